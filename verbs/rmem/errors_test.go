package rmem

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

func TestRangeErrors(t *testing.T) {
	checkRoutines(t)
	p := newPair(t, pairOpts{size: 8192})
	ctx := context.Background()
	for _, c := range []struct {
		off int64
		n   int
	}{{-1, 1}, {8192, 1}, {8191, 2}, {0, 8193}, {1 << 62, 1}} {
		for _, op := range []func(context.Context, []byte, int64) (int, error){p.b.ReadAt, p.b.WriteAt} {
			n, err := op(ctx, make([]byte, c.n), c.off)
			require.Zero(t, n)
			require.ErrorIs(t, err, ErrOutOfRange)
			var re *RangeError
			require.ErrorAs(t, err, &re)
			require.Equal(t, RangeError{Off: c.off, Len: c.n, Size: 8192}, *re)
		}
	}
	n, err := p.b.ReadAt(ctx, nil, 8192) // empty, at the end: fine
	require.NoError(t, err)
	require.Zero(t, n)
	require.Zero(t, p.b.Stats().InFlight)
	require.NoError(t, p.client.Err(), "nothing was posted")
}

// pieceAboveMax is a PieceSize past MaxPieceSize where int holds one, and
// a negative one where it does not (32-bit ports): both are refused.
func pieceAboveMax() int {
	p := int64(MaxPieceSize) + 1
	return int(p)
}

func TestNewRefuses(t *testing.T) {
	checkRoutines(t)
	p := newPair(t, pairOpts{size: 4096, sendWR: 16, noBuffer: true})
	for _, cfg := range []Config{{Depth: 17}, {Depth: -1}, {PieceSize: -1}, {PieceSize: pieceAboveMax()}} {
		_, err := New(p.client, p.remote, cfg)
		require.ErrorIs(t, err, verbs.ErrInvalidArg, "%+v", cfg)
	}
	huge := p.remote
	huge.Len = 1 << 63
	_, err := New(p.client, huge, Config{})
	require.ErrorIs(t, err, verbs.ErrInvalidArg, "a remote buffer past int64")
	idle, err := p.client.PD().CreateQP(verbs.QPConfig{SendCQ: p.client.Config().SendCQ, RecvCQ: p.client.Config().RecvCQ})
	require.NoError(t, err)
	defer idle.Close()
	_, err = New(idle, p.remote, Config{})
	require.ErrorIs(t, err, verbs.ErrQPState)
}

// A connection with ORD 0 takes Writes, and refuses Reads before posting.
func TestNoReads(t *testing.T) {
	checkRoutines(t)
	p := newPair(t, pairOpts{size: 4096, ord: -1})
	ctx := context.Background()
	_, err := p.b.ReadAt(ctx, make([]byte, 10), 0)
	require.ErrorIs(t, err, ErrNoReads)
	_, err = p.b.WriteAt(ctx, []byte("hello"), 100)
	require.NoError(t, err)
	p.placed(t, 1)
	require.Equal(t, "hello", string(p.mr.Buf()[100:105]))
}

// A context already ended posts nothing.
func TestEndedContext(t *testing.T) {
	checkRoutines(t)
	p := newPair(t, pairOpts{size: 4096})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sent := p.client.Stats().FPDUsSent
	_, err := p.b.WriteAt(ctx, []byte("x"), 0)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, sent, p.client.Stats().FPDUsSent)
}

// A Write into a region the peer registered for reading only ends the QP.
// The Write itself completes when handed to TCP; the Read after it waits
// for the peer, whose answer is a Terminate: its error is a *QPError
// wrapping the QP's, and every later call fails at once with it.
func TestQPEndsOnRemoteError(t *testing.T) {
	checkRoutines(t)
	p := newPair(t, pairOpts{size: 4096, access: verbs.RemoteRead})
	ctx := context.Background()
	_, err := p.b.WriteAt(ctx, []byte("no"), 0)
	require.NoError(t, err)
	_, err = p.b.ReadAt(ctx, make([]byte, 8), 0)
	var qe *QPError
	require.ErrorAs(t, err, &qe)
	var te *verbs.TerminateError
	require.ErrorAs(t, err, &te)
	require.Equal(t, p.client.Err(), qe.Err)
	sent := p.client.Stats().FPDUsSent
	_, err = p.b.WriteAt(ctx, make([]byte, 8), 0)
	require.ErrorAs(t, err, &te, "a later call fails with the QP's error")
	require.Equal(t, sent, p.client.Stats().FPDUsSent, "and posts nothing")
	require.NoError(t, p.b.Close())
}

// The peer ends the connection while Reads are in flight from many
// goroutines: each returns a *QPError that wraps the QP's error, the
// dispatcher ends, and Close returns with nothing left in flight.
func TestQPEndsWithCallsInFlight(t *testing.T) {
	checkRoutines(t)
	p := newPair(t, pairOpts{size: 16 << 20, cfg: Config{PieceSize: 4096}})
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			buf := make([]byte, 4<<20)
			for {
				if _, err := p.b.ReadAt(context.Background(), buf, 0); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	require.Eventually(t, func() bool { return p.b.Stats().InFlight > 0 }, 10*time.Second, time.Millisecond)
	require.NoError(t, p.server.Abort())
	wg.Wait()
	close(errc)
	for err := range errc {
		var qe *QPError
		require.ErrorAs(t, err, &qe)
		require.ErrorIs(t, err, verbs.ErrConnLost)
	}
	select { // the dispatcher ends with the QP, before Close
	case <-p.b.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the dispatcher outlived the QP")
	}
	require.NoError(t, p.b.Close())
	require.Zero(t, p.b.Stats().InFlight)
}

// Close with calls in progress and waiting: they return ErrClosed, Close
// waits for their WRs, deregisters the staging memory and leaves the QP
// open; later calls return ErrClosed.
func TestCloseWithCallsInProgress(t *testing.T) {
	checkRoutines(t)
	p := newPair(t, pairOpts{size: 16 << 20, cfg: Config{Depth: 4, PieceSize: 4096}})
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			_, err := p.b.ReadAt(context.Background(), make([]byte, 16<<20), 0)
			errc <- err
		})
	}
	require.Eventually(t, func() bool { return p.b.Stats().Waiting > 0 }, 10*time.Second, time.Millisecond)
	require.NoError(t, p.b.Close())
	wg.Wait()
	close(errc)
	for err := range errc {
		require.ErrorIs(t, err, ErrClosed)
	}
	require.Zero(t, p.b.Stats().InFlight)
	require.Zero(t, p.b.staging.Len(), "staging deregistered")
	require.NoError(t, p.client.Err(), "the QP stays open")
	_, err := p.b.WriteAt(context.Background(), []byte("x"), 0)
	require.ErrorIs(t, err, ErrClosed)
	require.NoError(t, p.b.Close(), "a second Close")

	// The QP serves a new Buffer.
	b2, err := New(p.client, p.remote, Config{})
	require.NoError(t, err)
	defer b2.Close()
	_, err = b2.ReadAt(context.Background(), make([]byte, 8), 0)
	require.NoError(t, err)
}

// The client's Device closes under calls in flight: each returns a
// *QPError, Close returns, and no goroutine is left.
func TestDeviceCloseWithCallsInFlight(t *testing.T) {
	checkRoutines(t)
	p := newPair(t, pairOpts{size: 16 << 20, cfg: Config{PieceSize: 4096}})
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			buf := make([]byte, 4<<20)
			for {
				if _, err := p.b.ReadAt(context.Background(), buf, 0); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	require.Eventually(t, func() bool { return p.b.Stats().InFlight > 0 }, 10*time.Second, time.Millisecond)
	require.NoError(t, p.cdev.Close())
	wg.Wait()
	close(errc)
	for err := range errc {
		var qe *QPError
		require.ErrorAs(t, err, &qe)
	}
	require.NoError(t, p.b.Close())
	require.Zero(t, p.b.Stats().InFlight)
}
