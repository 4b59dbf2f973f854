package verbs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/stretchr/testify/require"
)

// After Disconnect's FIN nothing more can go out, and nothing tries: a
// Read Request the peer sends after reading our FIN is dropped (the peer
// flushes that Read), and a WR posted while Disconnect waits for the peer
// flushes when the QP ends. Either, written to the half-closed socket,
// failed with EPIPE and turned the orderly close into ErrConnLost.
func TestNothingSentAfterDisconnectFIN(t *testing.T) {
	checkRoutines(t)
	s := newSide(t, pairOpts{})
	src := s.regMR(t, 4096, LocalWrite|RemoteRead)
	rp := answerDial(t, s.qp, ConnConfig{}, mpa.Config{IRD: 4, ORD: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	disc := make(chan error, 1)
	go func() { disc <- s.qp.Disconnect(ctx) }()
	rp.wantClosed(t) // our FIN; the peer's direction stays open

	rp.send(t, readReqULPDU(1, 0x1234, 0, 64, src.RKey(), src.Addr()))
	n, err := s.qp.PostSend(SendWR{ID: 5, Opcode: OpSend, Flags: Signaled | Inline, InlineData: []byte("late")})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	time.Sleep(50 * time.Millisecond) // for the transmit loop to try, as it did
	select {
	case err := <-disc:
		t.Fatalf("Disconnect returned before the peer closed: %v (QP: %v)", err, s.qp.Err())
	default:
	}
	rp.close()
	require.NoError(t, <-disc)
	require.ErrorIs(t, s.qp.Err(), ErrDisconnected)
	var wc [2]WC
	require.Equal(t, 1, s.scq.Poll(wc[:]))
	require.Equal(t, uint64(5), wc[0].ID)
	require.Equal(t, WRFlushErr, wc[0].Status)
}

// Disconnect while the peer has Reads outstanding is an orderly close on
// our side. A Read Request that crosses our FIN cannot be answered (no
// Response can follow the FIN; the peer flushes that Read when it reads
// the FIN): it is dropped, and the peer, whose Reads the FIN left
// unanswered, reports ErrUnanswered, but no reset. Before, the transmit loop answered it on the
// half-closed socket, got EPIPE, and recorded a lost connection, which
// could then reset the peer too (2–5 runs in 20 failed).
func TestDisconnectWithPeerReadsOutstanding(t *testing.T) {
	checkRoutines(t)
	for round := range 10 {
		c, s := connect(t, pairOpts{})
		sink := c.regMR(t, 1<<20, LocalWrite)
		src := s.regMR(t, 1<<20, LocalWrite|RemoteRead)
		posted := 0
		for i := range 200 {
			n, err := c.qp.PostSend(SendWR{ID: uint64(i), Opcode: OpRDMARead, Flags: Signaled,
				SGL: []SGE{sink.SGE(0, 4096)}, RemoteAddr: src.Addr(), RKey: src.RKey()})
			require.NoError(t, err)
			posted += n
		}
		time.Sleep(time.Millisecond) // some Reads answered, some in flight
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		require.NoError(t, s.qp.Disconnect(ctx))
		<-c.qp.Done()
		cancel()
		require.ErrorIs(t, s.qp.Err(), ErrDisconnected, "round %d: the server's own Disconnect", round)
		// Every Read completes once: answered, or flushed by the FIN.
		wcs := make([]WC, 256)
		done, flushed := 0, 0
		for n := c.scq.Poll(wcs); n > 0; n = c.scq.Poll(wcs) {
			for _, wc := range wcs[:n] {
				require.Contains(t, []WCStatus{Success, WRFlushErr}, wc.Status, "round %d", round)
				done++
				if wc.Status == WRFlushErr {
					flushed++
				}
			}
		}
		require.Equal(t, posted, done, "round %d", round)
		// Flushed Reads that had not gone out (the ORD held them) leave
		// the close orderly; one on the wire makes it ErrUnanswered.
		if flushed == 0 {
			require.ErrorIs(t, c.qp.Err(), ErrDisconnected, "round %d: every Read answered: an orderly close", round)
		} else if !errors.Is(c.qp.Err(), ErrDisconnected) {
			require.ErrorIs(t, c.qp.Err(), ErrUnanswered, "round %d: %d Reads flushed by the FIN", round, flushed)
		}
		require.NoError(t, c.qp.Close())
		if errors.Is(c.qp.Err(), ErrConnLost) && !errors.Is(c.qp.Err(), ErrUnanswered) {
			t.Fatalf("round %d: client lost its connection: %v", round, c.qp.Err())
		}
	}
}

// The Read RTR's nudge (a zero-length Write to a responder that left the
// RTR unread) waits for a fallback; a Disconnect before it fires has sent
// the FIN, and the nudge must not follow it.
func TestNoNudgeAfterDisconnectFIN(t *testing.T) {
	checkRoutines(t)
	const hold = 400 * time.Millisecond // long enough for the Disconnect below to come first
	st := newStackSide(t, ConnConfig{})
	q := st.newQP(t, 0, 0)
	p := answerDialNoRTR(t, q.qp, ConnConfig{FirstFPDUHold: hold}, mpa.Config{IRD: 8, ORD: 8})
	require.Zero(t, p.wantReadRequest(t, 1).Size(), "the Read RTR, left unanswered")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	disc := make(chan error, 1)
	go func() { disc <- q.qp.Disconnect(ctx) }()
	p.wantClosed(t)
	time.Sleep(3 * hold) // the nudge's fallback passes
	p.close()
	require.NoError(t, <-disc)
	require.ErrorIs(t, q.qp.Err(), ErrDisconnected)
}
