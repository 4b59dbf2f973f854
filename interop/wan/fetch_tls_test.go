//go:build netns

package wan

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/goiwarp/iwarp/internal/pki"
	"github.com/stretchr/testify/require"
)

// fetchTLSFlags writes a CA, a server certificate for host and a client
// certificate to dir, and returns each side's TLS flags for examples/fetch.
func fetchTLSFlags(t *testing.T, dir, host string) (srv, cli []string) {
	t.Helper()
	ca, err := pki.NewCA("wan test CA")
	require.NoError(t, err)
	caFile := filepath.Join(dir, "ca.crt")
	require.NoError(t, os.WriteFile(caFile, ca.CAPEM(), 0o644))
	side := func(o pki.Options) []string {
		cert, err := ca.Issue(o)
		require.NoError(t, err)
		c, k, err := pki.PEM(cert)
		require.NoError(t, err)
		base := filepath.Join(dir, o.CommonName)
		require.NoError(t, os.WriteFile(base+".crt", c, 0o644))
		require.NoError(t, os.WriteFile(base+".key", k, 0o600))
		return []string{"-tls-cert", base + ".crt", "-tls-key", base + ".key", "-tls-ca", caFile}
	}
	return side(pki.Options{CommonName: "server", Hosts: []string{host}}), side(pki.Options{CommonName: "client", Client: true})
}
