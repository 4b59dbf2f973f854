package verbs

import (
	"context"
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/stretchr/testify/require"
)

// Writes, Reads and Sends of many sizes cross a mutual TLS connection
// intact, both QPs report the TLS state, and the socket's TCP_INFO still
// comes from the TCP connection under TLS.
func TestTLSDataPath(t *testing.T) {
	checkRoutines(t)
	p := newTestPKI(t)
	c, s := connect(t, p.tlsOpts(t, "alice"))
	for _, q := range []*QP{c.qp, s.qp} {
		st := q.TLS()
		require.NotNil(t, st)
		require.Equal(t, uint16(tls.VersionTLS13), st.Version)
		require.Equal(t, alpnIWARP, st.NegotiatedProtocol)
		stats := q.Stats()
		require.True(t, stats.TLS)
		require.NoError(t, stats.TCPErr)
		require.False(t, q.Params().CRC, "no MPA CRC inside TLS by default")
	}
	require.Equal(t, "alice", s.qp.TLS().PeerCertificates[0].Subject.CommonName)
	require.Equal(t, "server", c.qp.TLS().PeerCertificates[0].Subject.CommonName)

	for i, n := range sizes(c.qp.MULPDU() - 18) {
		src := c.regFilled(t, n, 0, uint64(i))
		dst := s.regMR(t, n+16, LocalWrite|RemoteWrite|RemoteRead)
		_, err := c.qp.PostSend(SendWR{Opcode: OpRDMAWrite, Flags: Signaled,
			SGL: []SGE{src.SGE(0, n)}, RemoteAddr: dst.Addr() + 8, RKey: dst.RKey()})
		require.NoError(t, err)
		waitOK(t, c.scq, WCRDMAWrite)
		barrier(t, c, s)
		requireSame(t, src.Buf()[:n], dst.Buf()[8:8+n])

		back := c.regMR(t, n, LocalWrite)
		_, err = c.qp.PostSend(SendWR{Opcode: OpRDMARead, Flags: Signaled,
			SGL: []SGE{back.SGE(0, n)}, RemoteAddr: dst.Addr() + 8, RKey: dst.RKey()})
		require.NoError(t, err)
		waitOK(t, c.scq, WCRDMARead)
		requireSame(t, src.Buf()[:n], back.Buf()[:n])

		rb := s.regMR(t, n, LocalWrite)
		_, err = s.qp.PostRecv(RecvWR{SGL: []SGE{rb.SGE(0, n)}})
		require.NoError(t, err)
		_, err = c.qp.PostSend(SendWR{Opcode: OpSend, Flags: Signaled, SGL: []SGE{src.SGE(0, n)}})
		require.NoError(t, err)
		waitOK(t, c.scq, WCSend)
		wc := waitOK(t, s.rcq, WCRecv)
		require.Equal(t, uint32(n), wc.ByteLen)
		requireSame(t, src.Buf()[:n], rb.Buf()[:n])
	}
	require.NotZero(t, c.qp.Stats().TCP.BytesAcked, "TCP_INFO of the socket under TLS")
}

// The verified client identity is on the request before Accept, so that
// the application picks the PD for it, and on the QP afterwards.
func TestTLSIdentityBeforeAccept(t *testing.T) {
	checkRoutines(t)
	p := newTestPKI(t)
	dev := openDev(DeviceAttr{})
	defer dev.Close()
	ln, err := dev.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{TLS: p.serverConfig(true)})
	require.NoError(t, err)
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	client := newSide(t, pairOpts{})
	defer client.dev.Close()
	errc := make(chan error, 1)
	go func() {
		errc <- client.qp.Dial(ctx, "tcp", ln.Addr().String(), ConnConfig{TLS: p.clientConfig(t, "bob")})
	}()
	req, err := ln.GetRequest(ctx)
	require.NoError(t, err)
	require.NotNil(t, req.TLS)
	require.Len(t, req.TLS.VerifiedChains, 1)
	require.Equal(t, "bob", req.TLS.PeerCertificates[0].Subject.CommonName)
	pd := dev.AllocPD() // bob's own
	cq, err := dev.CreateCQ(16)
	require.NoError(t, err)
	qp, err := pd.CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq})
	require.NoError(t, err)
	defer qp.Close()
	require.NoError(t, req.Accept(ctx, qp, nil))
	require.NoError(t, <-errc)
	require.Equal(t, "bob", qp.TLS().PeerCertificates[0].Subject.CommonName)
	client.qp.Close()
}

// Inside TLS the CRC is off unless a side asks for it with CRCRequired;
// then both directions carry it, and data still crosses.
func TestTLSCRCChoice(t *testing.T) {
	checkRoutines(t)
	p := newTestPKI(t)
	for _, tc := range []struct {
		name           string
		client, server mpa.CRCPolicy
		want           bool
	}{
		{"default", mpa.CRCOn, mpa.CRCOn, false},
		{"client-required", mpa.CRCRequired, mpa.CRCOn, true},
		{"server-required", mpa.CRCOn, mpa.CRCRequired, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := p.tlsOpts(t, "carol")
			o.client.MPA.CRC, o.server.MPA.CRC = tc.client, tc.server
			c, s := connect(t, o)
			require.Equal(t, tc.want, c.qp.Params().CRC)
			require.Equal(t, tc.want, s.qp.Params().CRC)
			n := 300 << 10
			src := c.regFilled(t, n, 0, 7)
			dst := s.regMR(t, n, LocalWrite|RemoteWrite)
			_, err := c.qp.PostSend(SendWR{Opcode: OpRDMAWrite, SGL: []SGE{src.SGE(0, n)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
			require.NoError(t, err)
			barrier(t, c, s)
			requireSame(t, src.Buf(), dst.Buf())
		})
	}
}

// Peer-to-peer mode's RTR and an orderly Disconnect work inside TLS: both
// QPs end ErrDisconnected (close_notify and FIN, no reset).
func TestTLSPeerToPeerDisconnect(t *testing.T) {
	checkRoutines(t)
	p := newTestPKI(t)
	for _, rtr := range []mpa.RTR{mpa.RTRWrite, mpa.RTRRead, mpa.RTRSend} {
		t.Run(rtr.String(), func(t *testing.T) {
			o := p.tlsOpts(t, "dave")
			o.client.MPA.P2P, o.client.MPA.RTRs = mpa.P2POn, rtr
			o.server.MPA.P2P, o.server.MPA.RTRs = mpa.P2POn, rtr
			c, s := connect(t, o)
			require.True(t, s.qp.Params().P2P)
			barrier(t, s, c)
			barrier(t, c, s)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- s.qp.Disconnect(ctx) }()
			require.NoError(t, c.qp.Disconnect(ctx))
			require.NoError(t, <-errc)
			require.True(t, errors.Is(c.qp.Err(), ErrDisconnected), "client: %v", c.qp.Err())
			require.True(t, errors.Is(s.qp.Err(), ErrDisconnected), "server: %v", s.qp.Err())
		})
	}
}
