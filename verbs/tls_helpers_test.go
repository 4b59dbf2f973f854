package verbs

import (
	"crypto/tls"
	"testing"

	"github.com/goiwarp/iwarp/internal/pki"
	"github.com/stretchr/testify/require"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and client
// certificates it signs on demand.
type testPKI struct {
	ca     *pki.CA
	server tls.Certificate
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	ca, err := pki.NewCA("verbs test CA")
	require.NoError(t, err)
	srv, err := ca.Issue(pki.Options{CommonName: "server", Hosts: []string{"127.0.0.1", "::1", "localhost"}})
	require.NoError(t, err)
	return &testPKI{ca: ca, server: srv}
}

// serverConfig requires and verifies client certificates of the CA when
// mutual is set.
func (p *testPKI) serverConfig(mutual bool) *tls.Config {
	c := &tls.Config{Certificates: []tls.Certificate{p.server}}
	if mutual {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = p.ca.Pool()
	}
	return c
}

// clientConfig trusts the CA and presents a certificate for cn (none if
// cn is empty).
func (p *testPKI) clientConfig(t testing.TB, cn string) *tls.Config {
	t.Helper()
	c := &tls.Config{RootCAs: p.ca.Pool()}
	if cn != "" {
		cert, err := p.ca.Issue(pki.Options{CommonName: cn, Client: true})
		require.NoError(t, err)
		c.Certificates = []tls.Certificate{cert}
	}
	return c
}

// tlsOpts is a pair whose connection runs inside mutual TLS, the client
// being cn.
func (p *testPKI) tlsOpts(t testing.TB, cn string) pairOpts {
	return pairOpts{client: ConnConfig{TLS: p.clientConfig(t, cn)}, server: ConnConfig{TLS: p.serverConfig(true)}}
}
