package verbs

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// Hostile peers at MPA start-up (RFC 5044 section 7.1, RFC 6581). A raw TCP
// client talks to our Listener, or a raw TCP server answers our Dial, with
// frames made here octet by octet (not by the mpa encoder), and each case
// checks
//
//   - what goes back on the wire: the exact octets of a Reply or Reject, a
//     Terminate with its LLP code, or a plain close without a single octet;
//   - how long it took: at once, or at RequestTimeout / ReplyTimeout, with
//     an absolute deadline (a peer that trickles octets gains nothing);
//   - the typed error the application gets (errors.Is / errors.As), and the
//     state of our QP (still IDLE and usable after a failed start-up, ERROR
//     after a Terminate);
//   - that the Listener still serves a good client afterwards, and that no
//     request it refused reached the application;
//   - that no goroutine is left behind (checkRoutines).
//
// Where the RFCs leave a choice, the comment says whose practice (Linux siw,
// siw_cm.c) the case follows. Cases that currently fail because of an engine
// bug call knownBug: see there.
//
// This file is the harness; the scenarios are in startup_request_test.go
// (our Listener), startup_rtr_test.go (its peer-to-peer mode) and
// startup_dial_test.go (our Dial).

// hostileTimeout is the RequestTimeout / ReplyTimeout of the cases that
// stall. Cases that must fail at once use startupSlow instead, so that "at
// once" and "at the timeout" cannot be confused.
const (
	hostileTimeout = 300 * time.Millisecond
	startupSlow    = 3 * time.Second
	atOnce         = time.Second // a refusal that is not a timeout comes sooner than this
	timeoutSlack   = 700 * time.Millisecond
)

// Engine bugs these tests found, all fixed; a case that runs into one again
// fails with the bug's name.
const (
	// The Listener hands a Revision 0 Request to the application, though
	// Respond can never accept it: RFC 5044 section 7.1.1 Rev, "If the MPA
	// receiver cannot interoperate with the received version, then it MUST
	// close the connection".
	bugRev0 = "rev0"
	// Octets the initiator sent after its Request and before our Reply are
	// taken as FPDUs. RFC 5044 section 7.1.1 PD_Length ("does not match the
	// length of the Private Data field ... MUST close") and 7.1.2 rule 3
	// (the initiator sends FPDUs only after it validated the Reply); siw
	// closes ("peer sent extra data", -EPROTO).
	bugEarlyData = "early-data"
	// Peer-to-peer responder: Accept returns nil when the first FPDU is not
	// the agreed RTR, or fails its CRC: rtrDone is closed before the error
	// is recorded, and QP.Err is nil until the QP is done.
	bugAwaitRTR = "await-rtr"
	// Peer-to-peer responder: a Terminate from the initiator in place of the
	// RTR (RFC 6581 section 9.2: an initiator that cannot send any of the
	// responder's RTRs MUST send one) is answered with a Terminate 0x07 of
	// our own, and Accept reports ours instead of the peer's: RFC 5040
	// section 5.4, "The RDMAP layer MUST Deliver the Terminate Message to
	// the ULP"; a received Terminate is never echoed.
	bugRTRTerminate = "rtr-terminate"
	// A responder that supports none of the offered RTRs rejects with no RTR
	// flag set; RFC 6581 section 9.2: "the responder MUST set at least one
	// RTR indication type option it supports".
	bugRejectRTR = "reject-rtr"
	// Dial's start-up Terminate ignores markers: when the Reply had M, the
	// first octets we send must be the marker 0x00000000 (RFC 5044 section
	// 7.1.2 rule 7).
	bugTermMarkers = "term-markers"
	// Dial does not report a context that ended while it waited for the
	// Reply: the error is an i/o timeout that Is neither
	// context.DeadlineExceeded nor context.Canceled.
	bugDialCtx = "dial-ctx"
)

func knownBug(t *testing.T, bug, format string, args ...any) {
	t.Helper()
	t.Fatalf("engine bug %s is back: %s", bug, fmt.Sprintf(format, args...))
}

// Hand-made start-up frames (RFC 5044 section 7.1.1 Figure 8, RFC 6581
// section 6): the key, the flags octet (M C R H/S Res), Rev, PD_Length, then
// the private data. PD_Length is given apart so that it can lie.
const (
	reqKey = "MPA ID Req Frame"
	repKey = "MPA ID Rep Frame"

	flagM = 0x80
	flagC = 0x40
	flagR = 0x20
	flagH = 0x10 // RFC 6581 S, siw MPA_RR_FLAG_ENHANCED
)

func mpaFrame(key string, flags, rev byte, pdLen int, pd ...[]byte) []byte {
	b := append([]byte(key), flags, rev, byte(pdLen>>8), byte(pdLen))
	for _, p := range pd {
		b = append(b, p...)
	}
	return b
}

// irdord is the RFC 6581 section 9 word: A|B|IRD, C|D|ORD, network order.
func irdord(ird, ord uint16) []byte {
	return []byte{byte(ird >> 8), byte(ird), byte(ord >> 8), byte(ord)}
}

// The RFC 6581 flags, as they sit in the two halves of irdord.
const (
	wordA = 0x8000 // IRD half: peer-to-peer
	wordB = 0x4000 // IRD half: zero-length Send RTR
	wordC = 0x8000 // ORD half: zero-length Write RTR
	wordD = 0x4000 // ORD half: zero-length Read RTR
)

func requireOctets(t *testing.T, want, got []byte, what string) {
	t.Helper()
	if !bytes.Equal(want, got) {
		t.Fatalf("%s differs\nwant:\n%sgot:\n%s", what, hex.Dump(want), hex.Dump(got))
	}
}

// rawConnect opens a plain TCP connection to addr.
func rawConnect(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	d := net.Dialer{Timeout: peerTimeout}
	nc, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	c := nc.(*net.TCPConn)
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(peerTimeout))
	return c
}

func rawWrite(t *testing.T, c *net.TCPConn, b []byte) {
	t.Helper()
	c.SetWriteDeadline(time.Now().Add(peerTimeout))
	_, err := c.Write(b)
	require.NoError(t, err)
}

// readStartupFrame reads one start-up frame as raw octets: the 20-octet
// header and PD_Length octets after it.
func readStartupFrame(t *testing.T, c *net.TCPConn) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(peerTimeout))
	b := make([]byte, mpa.FrameHeaderLen)
	_, err := io.ReadFull(c, b)
	require.NoError(t, err, "reading a start-up frame header")
	n := int(b[18])<<8 | int(b[19])
	b = append(b, make([]byte, n)...)
	_, err = io.ReadFull(c, b[mpa.FrameHeaderLen:])
	require.NoError(t, err, "reading %d octets of private data", n)
	return b
}

// closeOutcome is what a raw peer saw when it waited for the other side to
// close: the octets that came first, the error that ended the stream (nil
// for none until the deadline), and when.
type closeOutcome struct {
	got []byte
	err error
	at  time.Time
}

func (o closeOutcome) timedOut() bool {
	var ne net.Error
	return errors.As(o.err, &ne) && ne.Timeout()
}

// waitClose reads from c until the stream ends or within passes.
func waitClose(c *net.TCPConn, within time.Duration) closeOutcome {
	c.SetReadDeadline(time.Now().Add(within))
	var o closeOutcome
	buf := make([]byte, 1024)
	for {
		n, err := c.Read(buf)
		o.got = append(o.got, buf[:n]...)
		if err != nil {
			o.err, o.at = err, time.Now()
			return o
		}
	}
}

// wantPlainClose requires o to be a close without a single octet: a FIN, or
// with resetOK a reset (we close a socket with unread octets in it).
func wantPlainClose(t *testing.T, o closeOutcome, resetOK bool) {
	t.Helper()
	if len(o.got) > 0 {
		t.Fatalf("want a close and nothing else; got:\n%s", hex.Dump(o.got))
	}
	switch {
	case errors.Is(o.err, io.EOF):
	case resetOK && errors.Is(o.err, syscall.ECONNRESET):
	case resetOK:
		t.Fatalf("want the connection closed (FIN or reset), got %v", o.err)
	default:
		t.Fatalf("want the connection closed (FIN), got %v", o.err)
	}
}

// trickle writes b one octet at a time, the first after 50 ms and then one
// every 100 ms (so that no write coincides with a 300 ms deadline), until a
// write fails or the returned stop is called; stop waits for it.
func trickle(c *net.TCPConn, b []byte) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		next := time.NewTimer(50 * time.Millisecond)
		defer next.Stop()
		for _, o := range b {
			select {
			case <-done:
				return
			case <-next.C:
			}
			c.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := c.Write([]byte{o}); err != nil {
				return
			}
			next.Reset(100 * time.Millisecond)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}

func recvErr(t *testing.T, errc <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(peerTimeout):
		t.Fatalf("%s hangs", what)
		return nil
	}
}

// getRequest takes the next request from the listener.
func (s *stackSide) getRequest(t *testing.T) *ConnRequest {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
	defer cancel()
	r, err := s.ln.GetRequest(ctx)
	require.NoError(t, err, "the listener hands the Request to the application")
	return r
}

// wantNoRequest requires that nothing reached the application.
func (s *stackSide) wantNoRequest(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	r, err := s.ln.GetRequest(ctx)
	if err == nil {
		r.conn.Close()
		t.Fatalf("a refused Request reached the application: %+v", r.Request())
	}
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// wantServesRaw checks that the listener serves a good raw client with
// start-up policy c, on q (which must be IDLE: a QP whose Accept was refused
// is as good as new) or on a fresh QP: the start-up, the RTR if peer-to-peer
// (a zero-length Write), and a Send. Unlike wantServes it works for
// peer-to-peer listeners, which refuse a client-server client.
func (s *stackSide) wantServesRaw(t *testing.T, q *stackQP, c mpa.Config) {
	t.Helper()
	if q == nil {
		q = s.newQP(t, 0, 0)
	}
	require.Equal(t, StateIdle, q.qp.State())
	rb := regGuarded(t, s.pd, 64, LocalWrite)
	_, err := q.qp.PostRecv(RecvWR{ID: 77, SGL: []SGE{rb.mr.SGE(0, 64)}})
	require.NoError(t, err)
	errc := s.acceptAsync(q)
	p := dialPeer(t, s.ln.Addr().String(), c)
	if p.params.P2P {
		require.Equal(t, mpa.RTRWrite, p.params.RTR)
		p.send(t, writeULPDU(rtrSTag, 0, nil))
	}
	require.NoError(t, recvErr(t, errc, "Accept of a good client"), "Accept of a good client")
	p.send(t, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, []byte("still serving")))
	wc := waitWC(t, q.rcq)
	require.Equal(t, wcString(77, WCRecv, Success), wcOf(wc))
	require.Equal(t, "still serving", string(rb.region()[:wc.ByteLen]))
	p.closeWrite(t)
	p.wantClosed(t)
	p.close()
	waitDone(t, q.qp, peerTimeout)
	require.ErrorIs(t, q.qp.Err(), ErrDisconnected)
}

type dialResult struct {
	pd   []byte
	err  error
	took time.Duration
}

func dialOutcome(t *testing.T, res <-chan dialResult) dialResult {
	t.Helper()
	select {
	case r := <-res:
		return r
	case <-time.After(peerTimeout):
		t.Fatal("Dial hangs")
		return dialResult{}
	}
}

// rawResponder lets qp dial a plain TCP listener with cfg and a context of
// ctxTimeout (cancelled after cancelAfter if that is not 0); it returns the
// accepted connection and the Request the stack sent. Dial's outcome comes
// on the channel.
func rawResponder(t *testing.T, qp *QP, cfg ConnConfig, ctxTimeout, cancelAfter time.Duration) (*net.TCPConn, mpa.Frame, <-chan dialResult) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer ln.Close()
	res := make(chan dialResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), ctxTimeout)
		defer cancel()
		if cancelAfter > 0 {
			tm := time.AfterFunc(cancelAfter, cancel)
			defer tm.Stop()
		}
		start := time.Now()
		err := qp.Dial(ctx, "tcp", ln.Addr().String(), cfg)
		pd := qp.PeerPrivateData()
		res <- dialResult{pd, err, time.Since(start)}
	}()
	ln.SetDeadline(time.Now().Add(peerTimeout))
	conn, err := ln.AcceptTCP()
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(peerTimeout))
	req, err := mpa.ReadFrame(conn, false)
	require.NoError(t, err, "reading the stack's MPA Request")
	return conn, req, res
}

// wantRedial checks that q, whose Dial failed, is IDLE and dials the
// listener of s successfully.
func (s *stackSide) wantRedial(t *testing.T, q *stackQP) {
	t.Helper()
	srv := s.newQP(t, 0, 0)
	errc := s.acceptAsync(srv)
	ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
	defer cancel()
	err := q.qp.Dial(ctx, "tcp", s.ln.Addr().String(), ConnConfig{})
	require.NoError(t, err, "the QP whose start-up failed dials again")
	require.NoError(t, recvErr(t, errc, "Accept"))
	require.NoError(t, q.qp.Disconnect(ctx))
	waitDone(t, srv.qp, peerTimeout)
}
