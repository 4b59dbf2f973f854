package verbs

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// A peer whose process is stopped (SIGSTOP) still has its kernel ACK our
// Read Requests, so neither keep-alive nor UserTimeout ends the wait; the
// raw peer here reads the Requests and never answers, which looks the
// same from our side. ResponseTimeout ends the QP: the oldest Read with
// RetryExcErr, the rest flushed, the connection reset, Err naming the
// timeout. Before, the Reads waited for ever.
func TestResponseTimeoutEndsSilentPeer(t *testing.T) {
	checkRoutines(t)
	const limit = 400 * time.Millisecond
	s := newSide(t, pairOpts{})
	sink := s.regMR(t, 4096, LocalWrite)
	rp := answerDial(t, s.qp, ConnConfig{ResponseTimeout: limit}, mpa.Config{IRD: 4, ORD: 4})
	start := time.Now()
	for i := range 2 {
		_, err := s.qp.PostSend(SendWR{ID: uint64(1 + i), Opcode: OpRDMARead, Flags: Signaled,
			SGL: []SGE{sink.SGE(i*64, 64)}, RemoteAddr: 0x1000, RKey: 0x77})
		require.NoError(t, err)
	}
	rp.wantReadRequest(t, 2)
	rp.wantReadRequest(t, 3)

	waitDone(t, s.qp, 4*limit)
	elapsed := time.Since(start)
	require.GreaterOrEqual(t, elapsed, limit, "ended before the timeout")
	err := s.qp.Err()
	require.ErrorIs(t, err, ErrResponseTimeout)
	require.ErrorIs(t, err, ErrConnLost)
	require.Contains(t, err.Error(), "ResponseTimeout 400ms, 2 outstanding")
	wcs := drainWC(s.scq)
	require.Len(t, wcs, 2)
	require.Equal(t, wcString(1, WCRDMARead, RetryExcErr), wcOf(wcs[0]))
	require.Equal(t, wcString(2, WCRDMARead, WRFlushErr), wcOf(wcs[1]))
	require.Equal(t, "transport retry counter exceeded", RetryExcErr.String())

	// The peer, stopped rather than gone, finds a reset when it reads.
	_, perr := rp.next()
	require.True(t, errors.Is(perr, syscall.ECONNRESET), "the peer's read after the timeout: %v", perr)
	t.Logf("silent peer: QP ended after %v (ResponseTimeout %v): %v", elapsed, limit, err)
}

// An atomic is bounded the same way.
func TestResponseTimeoutAtomic(t *testing.T) {
	checkRoutines(t)
	const limit = 300 * time.Millisecond
	s := newSide(t, pairOpts{})
	res := s.regMR(t, 8, LocalWrite)
	rp := answerDial(t, s.qp, ConnConfig{ResponseTimeout: limit, RFC7306: true}, mpa.Config{IRD: 4, ORD: 4})
	_, err := s.qp.PostSend(SendWR{ID: 9, Opcode: OpAtomicFetchAdd, Flags: Signaled,
		SGL: []SGE{res.SGE(0, 8)}, RemoteAddr: 0x1000, RKey: 0x77, CompareAdd: 1})
	require.NoError(t, err)
	u := rp.wantULPDU(t, "an Atomic Request")
	require.Equal(t, rdmap.Ctrl(rdmap.OpAtomicRequest), ddp.Untagged(u).ULPCtrl())
	waitDone(t, s.qp, 5*limit)
	require.ErrorIs(t, s.qp.Err(), ErrResponseTimeout)
	wcs := drainWC(s.scq)
	require.Len(t, wcs, 1)
	require.Equal(t, wcString(9, WCAtomicFetchAdd, RetryExcErr), wcOf(wcs[0]))
}

// The bound is on silence, not on the Read: a response that takes twice
// the timeout to arrive, a segment at a time, completes.
func TestResponseTimeoutSlowPeerLives(t *testing.T) {
	checkRoutines(t)
	const limit = 400 * time.Millisecond
	s := newSide(t, pairOpts{})
	sink := s.regMR(t, 4096, LocalWrite)
	rp := answerDial(t, s.qp, ConnConfig{ResponseTimeout: limit}, mpa.Config{IRD: 4, ORD: 4})
	_, err := s.qp.PostSend(SendWR{ID: 1, Opcode: OpRDMARead, Flags: Signaled,
		SGL: []SGE{sink.SGE(0, 400)}, RemoteAddr: 0x1000, RKey: 0x77})
	require.NoError(t, err)
	rr := rp.wantReadRequest(t, 2)
	// A piece every quarter of the timeout: a pause of this goroutine
	// must exceed three quarters of it (300 ms) to look like silence.
	const pieces = 8
	for i := range pieces {
		time.Sleep(limit / 4)
		require.NoError(t, s.qp.Err(), "piece %d", i)
		u := ddp.AppendTagged(nil, i == pieces-1, rdmap.Ctrl(rdmap.OpReadResponse), rr.SinkSTag(), rr.SinkTO()+uint64(i*50))
		rp.send(t, append(u, make([]byte, 50)...))
	}
	wc := waitWC(t, s.scq)
	require.Equal(t, wcString(1, WCRDMARead, Success), wcOf(wc))
	require.NoError(t, s.qp.Err())
	require.Equal(t, StateRTS, s.qp.State())
}

// A negative ResponseTimeout leaves the wait unbounded, as before.
func TestResponseTimeoutOff(t *testing.T) {
	checkRoutines(t)
	s := newSide(t, pairOpts{})
	sink := s.regMR(t, 64, LocalWrite)
	rp := answerDial(t, s.qp, ConnConfig{ResponseTimeout: -1}, mpa.Config{IRD: 4, ORD: 4})
	_, err := s.qp.PostSend(SendWR{ID: 1, Opcode: OpRDMARead, Flags: Signaled,
		SGL: []SGE{sink.SGE(0, 64)}, RemoteAddr: 0x1000, RKey: 0x77})
	require.NoError(t, err)
	rp.wantReadRequest(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, s.scq.Wait(ctx), context.DeadlineExceeded)
	require.NoError(t, s.qp.Err())
	require.Equal(t, 1, s.qp.Stats().ReadsOutstanding)
}
