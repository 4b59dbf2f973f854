package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/goiwarp/iwarp/internal/pki"
	"github.com/stretchr/testify/require"
)

// pemFiles writes a certificate and key signed by ca, and ca's own
// certificate, to files in dir, and returns their names as TLS flags.
func pemFiles(t *testing.T, dir string, ca *pki.CA, o pki.Options) []string {
	t.Helper()
	cert, err := ca.Issue(o)
	require.NoError(t, err)
	c, k, err := pki.PEM(cert)
	require.NoError(t, err)
	base := filepath.Join(dir, o.CommonName)
	require.NoError(t, os.WriteFile(base+".crt", c, 0o644))
	require.NoError(t, os.WriteFile(base+".key", k, 0o600))
	require.NoError(t, os.WriteFile(base+"-ca.crt", ca.CAPEM(), 0o644))
	return []string{"-tls-cert", base + ".crt", "-tls-key", base + ".key", "-tls-ca", base + "-ca.crt"}
}

// Mutual TLS between the two processes: the file arrives intact, both
// sides say TLS 1.3, and the server names the client it verified. A
// client without TLS, and one whose certificate the server's CA did not
// sign, fail with the reason and do not count as served.
func TestFetchMutualTLS(t *testing.T) {
	bin := build(t)
	ca, err := pki.NewCA("fetch test CA")
	require.NoError(t, err)
	rogue, err := pki.NewCA("rogue CA")
	require.NoError(t, err)
	certs := t.TempDir()
	srvFlags := pemFiles(t, certs, ca, pki.Options{CommonName: "server", Hosts: []string{"127.0.0.1"}})
	cliFlags := pemFiles(t, certs, ca, pki.Options{CommonName: "lab-b", Client: true})
	rogueFlags := pemFiles(t, certs, rogue, pki.Options{CommonName: "mallory", Client: true})
	rogueFlags[5] = cliFlags[5] // mallory trusts the real CA; the server does not trust mallory's

	src, data := randomFile(t, 2<<20+99)
	port := freePort(t)
	srv := start(t, bin, append(append([]string{"serve", "-p", port, "-n", "1"}, srvFlags...), src)...)

	dir := t.TempDir()
	out, err := runErr(dir, bin, "get", "-p", port, "-o", "copy", "127.0.0.1")
	require.Error(t, err, "a cleartext client:\n%s", out)
	require.Contains(t, out, "iwarp: TLS required")

	out, err = runErr(dir, bin, append(append([]string{"get", "-p", port, "-o", "copy"}, rogueFlags...), "127.0.0.1")...)
	require.Error(t, err, "a client of another CA:\n%s", out)
	// A Go client sends only a certificate whose issuer the server's
	// request names, so the server sees none.
	require.Contains(t, out, "tls: certificate required")
	require.NoFileExists(t, filepath.Join(dir, "copy"))

	out = run(t, dir, bin, append(append([]string{"get", "-p", port, "-o", "copy"}, cliFlags...), "127.0.0.1")...)
	srvOut := srv.wait(t)
	requireFile(t, filepath.Join(dir, "copy"), data)
	require.Contains(t, out, `TLS 1.3 TLS_AES_128_GCM_SHA256, peer "server"`)
	require.Contains(t, out, fmt.Sprintf("SHA-256 verified: %x", sha256.Sum256(data)))
	require.Contains(t, srvOut, `connected (TLS 1.3 TLS_AES_128_GCM_SHA256, peer "lab-b")`)
	require.Contains(t, srvOut, ": left after")
	requireNoTemp(t, dir)
}

// Half the TLS flags is a usage error, not a silent cleartext connection.
func TestFetchTLSFlagsIncomplete(t *testing.T) {
	bin := build(t)
	out, err := runErr(t.TempDir(), bin, "get", "-tls-cert", "x.crt", "127.0.0.1")
	require.Error(t, err)
	require.Contains(t, out, "mutual TLS takes all of -tls-cert, -tls-key and -tls-ca")
}
