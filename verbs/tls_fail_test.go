package verbs

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/internal/pki"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// Every mismatch between a TLS side and the other fails the Dial quickly
// with an error that names it; none waits for a timeout. failFast bounds
// them, far below the 10 s ReplyTimeout and 5 s RequestTimeout.
const failFast = 3 * time.Second

// dialFails dials ln's address with cfg and returns the error, which must
// come within failFast.
func dialFails(t *testing.T, addr string, cfg ConnConfig) error {
	t.Helper()
	c := newSide(t, pairOpts{})
	t.Cleanup(func() { c.dev.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err := c.qp.Dial(ctx, "tcp", addr, cfg)
	require.Error(t, err)
	require.Less(t, time.Since(start), failFast, "%v", err)
	require.Equal(t, StateIdle, c.qp.State(), "a failed Dial leaves the QP IDLE")
	return err
}

// listenAccepting starts a listener with cfg that accepts every request
// with a fresh QP of its own, until the test ends.
func listenAccepting(t *testing.T, cfg ConnConfig) *Listener {
	t.Helper()
	dev := openDev(DeviceAttr{})
	ln, err := dev.Listen(context.Background(), "tcp", "127.0.0.1:0", cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			req, err := ln.GetRequest(ctx)
			if err != nil {
				return
			}
			pd := dev.AllocPD()
			cq, _ := dev.CreateCQ(64)
			qp, err := pd.CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq})
			if err == nil {
				req.Accept(ctx, qp, nil)
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		ln.Close()
		wg.Wait()
		dev.Close()
	})
	return ln
}

func TestTLSClientToCleartextListener(t *testing.T) {
	checkRoutines(t)
	p := newTestPKI(t)
	ln := listenAccepting(t, ConnConfig{})
	err := dialFails(t, ln.Addr().String(), ConnConfig{TLS: p.clientConfig(t, "alice")})
	require.ErrorContains(t, err, "TLS handshake")
	require.ErrorContains(t, err, "listener without TLS")
	// The listener goes on serving cleartext.
	c := newSide(t, pairOpts{})
	defer c.dev.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, c.qp.Dial(ctx, "tcp", ln.Addr().String(), ConnConfig{}))
	c.qp.Close()
}

// A cleartext initiator (ours, or siw) gets an MPA Reject that says why.
func TestCleartextClientToTLSListener(t *testing.T) {
	checkRoutines(t)
	p := newTestPKI(t)
	ln := listenAccepting(t, ConnConfig{TLS: p.serverConfig(true)})
	for _, rev := range []uint8{1, 2} {
		cfg := ConnConfig{MPA: mpa.Config{Rev: rev}}
		err := dialFails(t, ln.Addr().String(), cfg)
		var re *mpa.RejectError
		require.ErrorAs(t, err, &re)
		require.Equal(t, "iwarp: TLS required", string(re.PrivateData))
	}
	// The TLS listener goes on serving TLS.
	c, err := tlsDial(t, ln.Addr().String(), ConnConfig{TLS: p.clientConfig(t, "alice")})
	require.NoError(t, err)
	c.qp.Close()
}

// The Reject a TLS listener sends a cleartext Request, octet by octet
// (RFC 5044 section 7.1.1 and RFC 6581 section 9.1): the Reply key, R set,
// the Request's revision, PD_Length, then (Rev 2, enhanced: 0x10) the
// IRD/ORD word before the reason; as every Reject of a verbs Listener, no
// C bit, since no FPDU follows it.
func TestTLSListenerRejectWire(t *testing.T) {
	checkRoutines(t)
	p := newTestPKI(t)
	ln := listenAccepting(t, ConnConfig{TLS: p.serverConfig(false), MPA: mpa.Config{IRD: 7, ORD: 5}})
	reason := "iwarp: TLS required"
	for _, tc := range []struct {
		name string
		req  mpa.Config
		want []byte
	}{
		{"rev1", mpa.Config{Rev: 1, P2P: mpa.P2POff},
			append([]byte("MPA ID Rep Frame\x20\x01\x00\x13"), reason...)},
		{"rev2", mpa.Config{Rev: 2, P2P: mpa.P2POff, IRD: 1, ORD: 1},
			append([]byte("MPA ID Rep Frame\x30\x02\x00\x17\x00\x07\x00\x05"), reason...)},
		{"rev2-crc-off", mpa.Config{Rev: 2, CRC: mpa.CRCOff, P2P: mpa.P2POff},
			append([]byte("MPA ID Rep Frame\x30\x02\x00\x17\x00\x07\x00\x05"), reason...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
			require.NoError(t, err)
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(failFast))
			req, err := mpa.BuildRequest(tc.req, nil)
			require.NoError(t, err)
			b, _ := req.Append(nil)
			_, err = conn.Write(b)
			require.NoError(t, err)
			got, err := io.ReadAll(conn)
			require.NoError(t, err, "the listener closes after the Reject")
			require.Equal(t, tc.want, got)
		})
	}
}

// tlsDial dials addr with a fresh QP.
func tlsDial(t *testing.T, addr string, cfg ConnConfig) (*side, error) {
	c := newSide(t, pairOpts{})
	t.Cleanup(func() { c.dev.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c, c.qp.Dial(ctx, "tcp", addr, cfg)
}

func TestTLSCertificateFailures(t *testing.T) {
	checkRoutines(t)
	p := newTestPKI(t)
	// A CA nobody here trusts, of the same name as p's: a Go client sends
	// its certificate only when the server's request names its issuer,
	// and otherwise sends none (certificate required).
	other := newTestPKI(t)
	expired := func(ca *pki.CA, o pki.Options) tls.Certificate {
		o.NotBefore, o.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
		c, err := ca.Issue(o)
		require.NoError(t, err)
		return c
	}
	withCert := func(c *tls.Config, cert tls.Certificate) *tls.Config {
		c.Certificates = []tls.Certificate{cert}
		return c
	}
	for _, tc := range []struct {
		name           string
		client, server *tls.Config
		want           string
	}{
		{"untrusted server", p.clientConfig(t, "alice"), other.serverConfig(true),
			"x509: certificate signed by unknown authority"},
		{"expired server", p.clientConfig(t, "alice"),
			withCert(p.serverConfig(true), expired(p.ca, pki.Options{CommonName: "server", Hosts: []string{"127.0.0.1"}})),
			"x509: certificate has expired"},
		{"wrong server name", withServerName(p.clientConfig(t, "alice"), "iwarp.example"), p.serverConfig(true),
			"certificate is valid for"},
		{"untrusted client", withCert(p.clientConfig(t, ""), issue(t, other.ca, pki.Options{CommonName: "mallory", Client: true})),
			p.serverConfig(true),
			"tls: unknown certificate authority"},
		{"expired client", withCert(p.clientConfig(t, ""), expired(p.ca, pki.Options{CommonName: "alice", Client: true})),
			p.serverConfig(true), "tls: expired certificate"},
		{"no client certificate", p.clientConfig(t, ""), p.serverConfig(true),
			"tls: certificate required"},
		{"TLS 1.2 only", &tls.Config{MaxVersion: tls.VersionTLS12}, p.serverConfig(true),
			"TLS 1.3"},
		{"other ALPN", withALPN(p.clientConfig(t, "alice"), "h2"), p.serverConfig(true),
			"tls: no application protocol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln := listenAccepting(t, ConnConfig{TLS: tc.server})
			err := dialFails(t, ln.Addr().String(), ConnConfig{TLS: tc.client})
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "connection lost", "a refusal, not a lost stream")
		})
	}
}

func issue(t *testing.T, ca *pki.CA, o pki.Options) tls.Certificate {
	c, err := ca.Issue(o)
	require.NoError(t, err)
	return c
}

func withServerName(c *tls.Config, name string) *tls.Config { c.ServerName = name; return c }
func withALPN(c *tls.Config, p string) *tls.Config          { c.NextProtos = []string{p}; return c }

// A peer that connects to a TLS listener and then sends nothing, or half
// a ClientHello, is closed by RequestTimeout like one silent before its
// MPA Request; garbage is closed at once.
func TestTLSListenerSilentAndGarbage(t *testing.T) {
	checkRoutines(t)
	p := newTestPKI(t)
	// RequestTimeout bounds the legitimate client's handshake at the end
	// too: mutual TLS with P-256 keys in pure Go (the 386 pass) took more
	// than 300 ms on a loaded machine.
	const timeout = 2 * time.Second
	ln := listenAccepting(t, ConnConfig{TLS: p.serverConfig(true), RequestTimeout: timeout})
	for _, tc := range []struct {
		name string
		send []byte
		most time.Duration
	}{
		{"silent", nil, 2 * timeout},
		{"half a ClientHello", []byte{0x16, 0x03, 0x01, 0x01, 0x00, 0x01}, 2 * timeout},
		{"garbage", bytes.Repeat([]byte{0xee}, 64), timeout / 2}, // at once, not at RequestTimeout
		{"MPA key, then garbage", []byte("MPA ID Req Frame\xff\xff\xff\xff"), timeout / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
			require.NoError(t, err)
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * timeout))
			start := time.Now()
			if tc.send != nil {
				_, err = conn.Write(tc.send)
				require.NoError(t, err)
			}
			got, err := io.ReadAll(conn)
			if err != nil {
				require.ErrorIs(t, err, syscall.ECONNRESET, "closed, not timed out")
			}
			require.Less(t, time.Since(start), tc.most)
			if len(got) > 0 {
				require.Equal(t, byte(0x15), got[0], "at most a TLS alert: %x", got)
			}
		})
	}
	c, err := tlsDial(t, ln.Addr().String(), ConnConfig{TLS: p.clientConfig(t, "alice")})
	require.NoError(t, err, "the listener still serves")
	c.qp.Close()
}

// flipProxy relays a TCP connection between a client and a listener,
// parsing the client's TLS records; once armed, it flips one octet of the
// next application-data record's ciphertext: a man in the middle.
type flipProxy struct {
	ln      net.Listener
	target  string
	armed   atomic.Bool
	flipped chan struct{}
	wg      sync.WaitGroup
	conns   []net.Conn
	mu      sync.Mutex
}

func newFlipProxy(t *testing.T, target string) *flipProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	fp := &flipProxy{ln: ln, target: target, flipped: make(chan struct{})}
	fp.wg.Add(1)
	go fp.serve()
	t.Cleanup(func() {
		ln.Close()
		fp.mu.Lock()
		for _, c := range fp.conns {
			c.Close()
		}
		fp.mu.Unlock()
		fp.wg.Wait()
	})
	return fp
}

func (fp *flipProxy) serve() {
	defer fp.wg.Done()
	for {
		c, err := fp.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", fp.target)
		if err != nil {
			c.Close()
			continue
		}
		fp.mu.Lock()
		fp.conns = append(fp.conns, c, s)
		fp.mu.Unlock()
		fp.wg.Add(2)
		go func() { defer fp.wg.Done(); io.Copy(c, s); c.Close() }()
		go func() { defer fp.wg.Done(); fp.relayRecords(s, c); s.Close() }()
	}
}

func (fp *flipProxy) relayRecords(dst io.Writer, src io.Reader) {
	var hdr [5]byte
	buf := make([]byte, 1<<17)
	for {
		if _, err := io.ReadFull(src, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(hdr[3:]))
		rec := buf[:n]
		if _, err := io.ReadFull(src, rec); err != nil {
			return
		}
		if hdr[0] == 0x17 && n > 0 && fp.armed.CompareAndSwap(true, false) {
			rec[n/2] ^= 0x01
			close(fp.flipped)
		}
		if _, err := dst.Write(hdr[:]); err != nil {
			return
		}
		if _, err := dst.Write(rec); err != nil {
			return
		}
	}
}

// A record that fails authentication mid-stream ends the connection: the
// receiving QP goes to ERROR with the TLS cause in Err and places nothing
// of the record, the sender learns of it from the TLS alert, and every
// posted WR on both sides flushes.
func TestTLSRecordTamperedMidStream(t *testing.T) {
	checkRoutines(t)
	p := newTestPKI(t)
	o := p.tlsOpts(t, "alice")
	client, server := newSide(t, o), newSide(t, o)
	defer client.dev.Close()
	defer server.dev.Close()
	ln, err := server.dev.Listen(context.Background(), "tcp", "127.0.0.1:0", o.server)
	require.NoError(t, err)
	defer ln.Close()
	fp := newFlipProxy(t, ln.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		req, err := ln.GetRequest(ctx)
		if err == nil {
			err = req.Accept(ctx, server.qp, nil)
		}
		errc <- err
	}()
	cc := o.client
	cc.TLS.ServerName = "127.0.0.1"
	require.NoError(t, client.qp.Dial(ctx, "tcp", fp.ln.Addr().String(), cc))
	require.NoError(t, <-errc)
	defer client.qp.Close()
	defer server.qp.Close()
	barrier(t, client, server) // the stream works through the proxy

	for i := range 3 {
		rb := server.regMR(t, 64, LocalWrite)
		_, err = server.qp.PostRecv(RecvWR{ID: uint64(10 + i), SGL: []SGE{rb.SGE(0, 64)}})
		require.NoError(t, err)
		cb := client.regMR(t, 64, LocalWrite)
		_, err = client.qp.PostRecv(RecvWR{ID: uint64(20 + i), SGL: []SGE{cb.SGE(0, 64)}})
		require.NoError(t, err)
	}
	n := 4096
	src := client.regFilled(t, n, 0, 1)
	dst := server.regMR(t, n, LocalWrite|RemoteWrite)
	fp.armed.Store(true)
	_, err = client.qp.PostSend(SendWR{ID: 1, Opcode: OpRDMAWrite, Flags: Signaled, SGL: []SGE{src.SGE(0, n)},
		RemoteAddr: dst.Addr(), RKey: dst.RKey()})
	require.NoError(t, err)
	<-fp.flipped

	select {
	case <-server.qp.Done():
	case <-time.After(failFast):
		t.Fatal("the server QP did not fail on a tampered record")
	}
	require.Equal(t, StateError, server.qp.State())
	require.ErrorIs(t, server.qp.Err(), ErrConnLost)
	require.ErrorContains(t, server.qp.Err(), "bad record MAC")
	require.Equal(t, make([]byte, n), dst.Buf(), "nothing placed from the tampered record")
	for range 3 {
		wc := wait(t, server.rcq)
		require.Equal(t, WRFlushErr, wc.Status)
	}

	select {
	case <-client.qp.Done():
	case <-time.After(failFast):
		t.Fatal("the client QP did not learn of the TLS alert")
	}
	require.ErrorIs(t, client.qp.Err(), ErrConnLost)
	require.ErrorContains(t, client.qp.Err(), "remote error: tls: bad record MAC")
	for range 3 {
		wc := wait(t, client.rcq)
		require.Equal(t, WRFlushErr, wc.Status)
	}
	require.True(t, server.qp.Stats().TLS)
}

// tlsPeer is a hostile initiator inside TLS: it completes the TLS
// handshake and the MPA start-up with a verbs Listener by hand, and then
// writes what a test makes it.
type tlsPeer struct {
	tc     *tls.Conn
	sock   *eofConn // under tc: whether TCP's end reached it
	params mpa.Params
	s      *side // the stack's side, accepted
}

// eofConn notes when a read meets TCP's end of stream: under a tls.Conn,
// which reads no further after a close_notify, that is a FIN without one.
type eofConn struct {
	net.Conn
	eof atomic.Bool
}

func (c *eofConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err == io.EOF {
		c.eof.Store(true)
	}
	return n, err
}

func dialTLSPeer(t *testing.T, p *testPKI) *tlsPeer {
	t.Helper()
	s := newSide(t, pairOpts{})
	t.Cleanup(func() { s.dev.Close() })
	ln, err := s.dev.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{TLS: p.serverConfig(true)})
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		req, err := ln.GetRequest(ctx)
		if err == nil {
			err = req.Accept(ctx, s.qp, nil)
		}
		errc <- err
	}()
	raw, err := net.DialTimeout("tcp", ln.Addr().String(), peerTimeout)
	require.NoError(t, err)
	sock := &eofConn{Conn: raw}
	cfg := p.clientConfig(t, "mallory")
	cfg.ServerName = "127.0.0.1"
	tc := tls.Client(sock, cfg)
	require.NoError(t, tc.Handshake())
	t.Cleanup(func() { tc.Close() })
	tc.SetDeadline(time.Now().Add(peerTimeout))
	mc := mpa.Config{CRC: mpa.CRCOff, P2P: mpa.P2POff, IRD: 8, ORD: 8}
	req, err := mpa.BuildRequest(mc, nil)
	require.NoError(t, err)
	b, _ := req.Append(nil)
	_, err = tc.Write(b)
	require.NoError(t, err)
	rep, err := mpa.ReadFrame(tc, true)
	require.NoError(t, err)
	params, err := mpa.ConfirmReply(mc, req, rep)
	require.NoError(t, err)
	require.NoError(t, <-errc)
	t.Cleanup(func() { s.qp.Close() })
	return &tlsPeer{tc: tc, sock: sock, params: params, s: s}
}

// encode frames ULPDUs as FPDUs.
func (tp *tlsPeer) encode(t *testing.T, ulpdus ...[]byte) []byte {
	var out bytes.Buffer
	w := mpa.NewWriter(&out, tp.params.CRC, tp.params.MarkersTx)
	for _, u := range ulpdus {
		require.NoError(t, w.Append(nil, u))
	}
	require.NoError(t, w.Flush())
	return out.Bytes()
}

// A hostile TLS peer that completes both handshakes and then sends an
// RDMA Write to an STag nobody registered gets the same Terminate inside
// TLS as in cleartext, and the QP fails with it.
func TestTLSHostilePeerTerminate(t *testing.T) {
	checkRoutines(t)
	tp := dialTLSPeer(t, newTestPKI(t))
	_, err := tp.tc.Write(tp.encode(t, writeULPDU(0xdead00, 0, []byte("hostile"))))
	require.NoError(t, err)
	r := mpa.NewReader(tp.tc, tp.params.CRC, tp.params.MarkersRx, 0, nil)
	k, err := r.Next()
	require.NoError(t, err, "a Terminate inside TLS")
	u := make([]byte, k)
	require.NoError(t, r.ReadFull(u))
	require.NoError(t, r.Finish())
	require.Equal(t, byte(rdmap.OpTerminate), u[1]&0x0f, "%x", u)
	tm, err := rdmap.ParseTerminate(u[ddp.UntaggedHdrLen:])
	require.NoError(t, err)
	require.Equal(t, rdmap.LayerDDP, tm.Layer)
	<-tp.s.qp.Done()
	var te *TerminateError
	require.True(t, errors.As(tp.s.qp.Err(), &te), "%v", tp.s.qp.Err())
	require.False(t, te.Remote)
	require.ErrorContains(t, tp.s.qp.Err(), "STag")
}

// A peer that ends TLS (close_notify) in the middle of an FPDU has cut
// the stream inside it: the QP fails as on a FIN there (ErrConnLost), and
// the receive it was filling flushes with nothing completed.
func TestTLSHostileCloseNotifyMidFPDU(t *testing.T) {
	checkRoutines(t)
	tp := dialTLSPeer(t, newTestPKI(t))
	rb := tp.s.regMR(t, 64, LocalWrite)
	_, err := tp.s.qp.PostRecv(RecvWR{ID: 7, SGL: []SGE{rb.SGE(0, 64)}})
	require.NoError(t, err)
	fpdu := tp.encode(t, sendULPDU(rdmap.OpSend, 0, 0, 1, 0, true, []byte("half of this never comes")))
	_, err = tp.tc.Write(fpdu[:len(fpdu)/2])
	require.NoError(t, err)
	require.NoError(t, tp.tc.CloseWrite()) // close_notify
	select {
	case <-tp.s.qp.Done():
	case <-time.After(failFast):
		t.Fatal("the QP did not fail on a stream cut inside an FPDU")
	}
	require.ErrorIs(t, tp.s.qp.Err(), ErrConnLost)
	wc := wait(t, tp.s.rcq)
	require.Equal(t, uint64(7), wc.ID)
	require.Equal(t, WRFlushErr, wc.Status)
}

// A flood of peers silent in the TLS handshake, and of peers that sent a
// ClientHello and no more, does not lock a TLS listener's legitimate
// clients out: a start-up in TLS is evicted like one before its MPA
// Request.
func TestTLSListenerFlood(t *testing.T) {
	checkRoutines(t)
	p := newTestPKI(t)
	ln := listenAccepting(t, ConnConfig{TLS: p.serverConfig(true)}) // RequestTimeout 5 s
	addr := ln.Addr().String()
	cs := dialSilent(t, addr, 2*maxHandshakes)
	hello := make([]net.Conn, 0, maxHandshakes)
	t.Cleanup(func() {
		for _, c := range hello {
			c.Close()
		}
	})
	for range maxHandshakes {
		// A ClientHello's record header and a few octets: a handshake
		// begun and abandoned.
		c, err := net.DialTimeout("tcp", addr, peerTimeout)
		require.NoError(t, err)
		hello = append(hello, c)
		c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc})
	}
	t.Logf("%d silent and %d stalled handshakes; %d start-ups in progress", len(cs), len(hello), ln.starts.len())
	require.LessOrEqual(t, ln.starts.len(), maxHandshakes)
	start := time.Now()
	c, err := tlsDial(t, addr, ConnConfig{TLS: p.clientConfig(t, "alice")})
	took := time.Since(start)
	require.NoError(t, err)
	t.Logf("a legitimate TLS Dial took %v", took.Round(time.Millisecond))
	require.Less(t, took, failFast)
	c.qp.Close()
}
