package verbs

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A Listener whose tls.Config picks the config per client
// (GetConfigForClient, as servers that choose a certificate by SNI do)
// still runs TLS 1.3 or later and offers the iwarp ALPN protocol, as
// ConnConfig.TLS says: a client that offers only TLS 1.2 fails the
// handshake.
func TestTLSListenerConfigForClientKeepsTLS13(t *testing.T) {
	checkRoutines(t)
	p := newTestPKI(t)
	srv := &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return p.serverConfig(false), nil
	}}
	ln := listenAccepting(t, ConnConfig{TLS: srv})

	raw, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
	require.NoError(t, err)
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(failFast))
	tc := tls.Client(raw, &tls.Config{RootCAs: p.ca.Pool(), ServerName: "127.0.0.1", MaxVersion: tls.VersionTLS12})
	err = tc.Handshake()
	require.Error(t, err, "a TLS 1.2 handshake with the Listener (version %#x)", tc.ConnectionState().Version)

	// A TLS 1.3 client gets the iwarp ALPN protocol.
	raw2, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
	require.NoError(t, err)
	defer raw2.Close()
	raw2.SetDeadline(time.Now().Add(failFast))
	tc2 := tls.Client(raw2, &tls.Config{RootCAs: p.ca.Pool(), ServerName: "127.0.0.1", NextProtos: []string{alpnIWARP}})
	require.NoError(t, tc2.Handshake())
	require.Equal(t, alpnIWARP, tc2.ConnectionState().NegotiatedProtocol)

	// And a verbs Dial works through it.
	c, err := tlsDial(t, ln.Addr().String(), ConnConfig{TLS: p.clientConfig(t, "")})
	require.NoError(t, err)
	require.Equal(t, uint16(tls.VersionTLS13), c.qp.TLS().Version)
	c.qp.Close()
}
