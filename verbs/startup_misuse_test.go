package verbs

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/tcpx"
	"github.com/stretchr/testify/require"
)

// A Dial whose last step fails (the RTR write, the responder having reset
// the connection right after its Reply) leaves the QP IDLE, as before it:
// it can be dialled again, and Close flushes what was posted. Before, the
// QP kept the dead socket without loops: Close flushed nothing, Done never
// closed, and a PostSend was accepted and never completed.
func TestDialFailedAtRTRLeavesQPIdle(t *testing.T) {
	checkRoutines(t)
	s := newSide(t, pairOpts{})
	rb := s.regMR(t, 64, LocalWrite)
	_, err := s.qp.PostRecv(RecvWR{ID: 7, SGL: []SGE{rb.SGE(0, 64)}})
	require.NoError(t, err)

	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer ln.Close()
	served := make(chan struct{})
	go func() { // a responder that replies and then resets
		defer close(served)
		conn, err := ln.AcceptTCP()
		if err != nil {
			return
		}
		req, err := mpa.ReadFrame(conn, false)
		if err != nil {
			conn.Close()
			return
		}
		rep, _, _ := mpa.Respond(mpa.Config{}, req, nil)
		b, _ := rep.Append(nil)
		conn.Write(b)
		tcpx.Abort(conn)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The delay lets the reset arrive before the RTR is written.
	err = s.qp.Dial(ctx, "tcp", ln.Addr().String(), ConnConfig{FirstFPDUDelay: time.Second})
	<-served
	require.Error(t, err, "the RTR write on a reset connection")
	require.Equal(t, StateIdle, s.qp.State())
	require.Nil(t, s.qp.LocalAddr(), "the dead socket is not kept")
	var wc [4]WC
	require.Zero(t, s.rcq.Poll(wc[:]), "the receive stays posted for the next connection")
	_, err = s.qp.PostSend(SendWR{ID: 9, Opcode: OpSend, Flags: Signaled | Inline, InlineData: []byte("x")})
	require.ErrorIs(t, err, ErrQPState, "an IDLE QP refuses sends")

	// The same QP connects again, and its receive takes the peer's Send.
	peer := newSide(t, pairOpts{})
	pln, err := peer.dev.Listen(ctx, "tcp", "127.0.0.1:0", ConnConfig{})
	require.NoError(t, err)
	defer pln.Close()
	accepted := make(chan error, 1)
	go func() {
		req, err := pln.GetRequest(ctx)
		if err == nil {
			err = req.Accept(ctx, peer.qp, nil)
		}
		accepted <- err
	}()
	require.NoError(t, s.qp.Dial(ctx, "tcp", pln.Addr().String(), ConnConfig{}))
	require.NoError(t, <-accepted)
	_, err = peer.qp.PostSend(SendWR{ID: 1, Opcode: OpSend, Flags: Signaled | Inline, InlineData: []byte("again")})
	require.NoError(t, err)
	n, err := s.rcq.PollWait(ctx, wc[:1])
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, Success, wc[0].Status)
	require.Equal(t, uint64(7), wc[0].ID)
	require.Equal(t, "again", string(rb.Buf()[:wc[0].ByteLen]))
	// Nothing of the failed attempt reaches this connection: its Read RTR
	// (on the ORD queue) and MSNs would have mismatched this one's first
	// Read Response.
	src, err := peer.pd.RegMR([]byte("read me, twice"), RemoteRead)
	require.NoError(t, err)
	sink := s.regMR(t, 14, LocalWrite)
	for i := range 2 {
		_, err = s.qp.PostSend(SendWR{ID: uint64(20 + i), Opcode: OpRDMARead, Flags: Signaled,
			SGL: []SGE{sink.SGE(0, 14)}, RemoteAddr: src.Addr(), RKey: src.RKey()})
		require.NoError(t, err)
		n, err = s.scq.PollWait(ctx, wc[:1])
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, WC{ID: uint64(20 + i), Status: Success, Opcode: WCRDMARead, ByteLen: 14, QP: s.qp}, wc[0])
	}
	require.Equal(t, "read me, twice", string(sink.Buf()))
	require.NoError(t, s.qp.Close())
	require.NoError(t, peer.qp.Close())
}

// Close of a QP that never connected ends it as the end of a connection
// does: ERROR, Err says why, Done closed, posted receives flushed, and
// later posts flushed at once. Before, the QP stayed IDLE and Done never
// closed, so code waiting on it (an SRQ's user, Device.Close's caller)
// waited for good.
func TestCloseNeverConnectedQP(t *testing.T) {
	s := newSide(t, pairOpts{})
	rb := s.regMR(t, 64, LocalWrite)
	_, err := s.qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{rb.SGE(0, 64)}})
	require.NoError(t, err)
	require.NoError(t, s.qp.Close())
	select {
	case <-s.qp.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed by Close of an IDLE QP")
	}
	require.Equal(t, StateError, s.qp.State())
	require.ErrorIs(t, s.qp.Err(), ErrClosed)
	var wc [4]WC
	require.Equal(t, 1, s.rcq.Poll(wc[:]))
	require.Equal(t, WC{ID: 1, Status: WRFlushErr, Opcode: WCRecv, QP: s.qp}, wc[0])

	n, err := s.qp.PostSend(SendWR{ID: 2, Opcode: OpSend, Flags: Signaled | Inline, InlineData: []byte("x")})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, s.scq.Poll(wc[:]))
	require.Equal(t, WRFlushErr, wc[0].Status)
	_, err = s.qp.PostRecv(RecvWR{ID: 3, SGL: []SGE{rb.SGE(0, 64)}})
	require.NoError(t, err)
	require.Equal(t, 1, s.rcq.Poll(wc[:]))
	require.Equal(t, WRFlushErr, wc[0].Status)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.ErrorIs(t, s.qp.Dial(ctx, "tcp", "127.0.0.1:1", ConnConfig{}), ErrClosed)
	require.NoError(t, s.qp.Close(), "a second Close")
	require.ErrorIs(t, s.qp.Disconnect(ctx), ErrQPState, "Disconnect of a QP that never connected")
}

// Accept with a QP it cannot use answers nothing: the request stays for
// Accept with another QP (rdma_accept's EINVAL), whether the QP is closed
// or another start-up holds it. Before, a closed QP was found out only
// after our Reply had gone: the initiator saw its connection die at once,
// and the request was used up.
func TestAcceptWithUnusableQPAnswersNothing(t *testing.T) {
	checkRoutines(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, cli := newSide(t, pairOpts{}), newSide(t, pairOpts{})
	ln, err := srv.dev.Listen(ctx, "tcp", "127.0.0.1:0", ConnConfig{})
	require.NoError(t, err)
	defer ln.Close()

	closed := newSide(t, pairOpts{})
	require.NoError(t, closed.qp.Close())
	busy := newSide(t, pairOpts{})
	require.NoError(t, busy.qp.claim("Dial")) // as a Dial under way holds it
	dialed := make(chan error, 1)
	go func() { dialed <- cli.qp.Dial(ctx, "tcp", ln.Addr().String(), ConnConfig{}) }()
	req, err := ln.GetRequest(ctx)
	require.NoError(t, err)

	require.ErrorIs(t, req.Accept(ctx, closed.qp, nil), ErrClosed)
	require.ErrorIs(t, req.Accept(ctx, busy.qp, nil), ErrQPState)
	busy.qp.unclaim()
	require.NoError(t, busy.qp.Close())
	select {
	case err := <-dialed:
		t.Fatalf("the initiator heard an answer before any Accept could take its request: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, req.Accept(ctx, srv.qp, nil), "the request is still there")
	require.NoError(t, <-dialed)
	require.Equal(t, StateRTS, cli.qp.State())

	// And a Dial on a QP a start-up holds is refused before it connects.
	other := newSide(t, pairOpts{})
	require.NoError(t, other.qp.claim("Accept"))
	require.ErrorIs(t, other.qp.Dial(ctx, "tcp", ln.Addr().String(), ConnConfig{}), ErrQPState)
	other.qp.unclaim()
	require.NoError(t, other.qp.Close())
	require.NoError(t, cli.qp.Close())
	require.NoError(t, srv.qp.Close())
}

// A post racing Close of a never-connected QP is refused (IDLE) or
// completes (flushed): never accepted and lost, which it could be when the
// QP showed ERROR before its SQ was marked flushed.
func TestPostRacingCloseOfIdleQP(t *testing.T) {
	for range 200 {
		s := newSide(t, pairOpts{})
		closed := make(chan struct{})
		go func() { s.qp.Close(); close(closed) }()
		// Until Close returns, and fewer than the CQ holds: once ERROR
		// shows, every post is accepted and flushed at once.
		accepted := 0
		for done := false; !done && accepted < 100; {
			select {
			case <-closed:
				done = true
			default:
			}
			n, _ := s.qp.PostSend(SendWR{ID: 1, Opcode: OpSend, Flags: Signaled | Inline, InlineData: []byte("x")})
			accepted += n
		}
		<-closed
		var wc [64]WC
		got := 0
		for k := s.scq.Poll(wc[:]); k > 0; k = s.scq.Poll(wc[:]) {
			for _, c := range wc[:k] {
				require.Equal(t, WRFlushErr, c.Status)
			}
			got += k
		}
		require.Equal(t, accepted, got, "every post accepted completes")
		s.dev.Close()
	}
}
