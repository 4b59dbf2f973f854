package verbs

import (
	"bytes"
	"crypto/tls"
	"io"
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

// A record that fails authentication while the QP's transmit side is
// blocked (the peer has stopped reading, TCP's window is shut) still
// fails the QP at once, as any bad FPDU does in cleartext: the receive
// side's TLS alert must not wait for that write.
func TestTLSBadRecordWhileTransmitBlocked(t *testing.T) {
	checkRoutines(t)
	tp := dialTLSPeer(t, newTestPKI(t))
	const n = 64 << 20
	src := tp.s.regMR(t, n, LocalWrite)
	_, err := tp.s.qp.PostSend(SendWR{ID: 1, Opcode: OpRDMAWrite, Flags: Signaled, SGL: []SGE{src.SGE(0, n)},
		RemoteAddr: 0, RKey: 0x1234})
	require.NoError(t, err)
	// The peer reads nothing: wait until the transmit side can write no
	// more.
	sent := uint64(0)
	for range 100 {
		time.Sleep(50 * time.Millisecond)
		s := tp.s.qp.Stats().OctetsSent
		if s == sent && s > 0 {
			break
		}
		sent = s
	}
	// An application-data record nobody sealed, on the TCP connection
	// under the peer's TLS.
	rec := append([]byte{0x17, 0x03, 0x03, 0x00, 0x40}, bytes.Repeat([]byte{0x5a}, 0x40)...)
	_, err = tp.tc.NetConn().Write(rec)
	require.NoError(t, err)
	select {
	case <-tp.s.qp.Done():
	case <-time.After(failFast):
		t.Fatal("the QP did not fail on a record that failed authentication")
	}
	require.ErrorIs(t, tp.s.qp.Err(), ErrConnLost)
	require.ErrorContains(t, tp.s.qp.Err(), "bad record MAC")
}

// While a flush is blocked, records the receive side writes wait behind
// it in order and do not block; past tlsAfterMax, they fail.
func TestTLSSockWritesDuringFlush(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	s := &tlsSock{Conn: a}
	s.batch()
	_, err := s.Write([]byte("batch"))
	require.NoError(t, err)
	flushed := make(chan error, 1)
	go func() { flushed <- s.flush() }()
	require.Eventually(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.flushing }, 10*time.Second, time.Millisecond)
	alert := bytes.Repeat([]byte{0x15}, 24)
	var want bytes.Buffer
	want.WriteString("batch")
	for len(s.after)+len(alert) <= tlsAfterMax {
		_, err := s.Write(alert)
		require.NoError(t, err, "a record behind a blocked flush")
		want.Write(alert)
	}
	_, err = s.Write(alert)
	require.ErrorIs(t, err, errTLSAfter)
	got := make([]byte, want.Len())
	_, err = io.ReadFull(b, got)
	require.NoError(t, err)
	require.NoError(t, <-flushed)
	require.Equal(t, want.Bytes(), got, "the batch, then what came during it")
}
