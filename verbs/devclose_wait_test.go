package verbs

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Device.Close unblocks CQ waiters as net.Listener.Close unblocks Accept:
// the flushed completions first, then an error that Is ErrClosed. Before,
// a waiter with context.Background stayed blocked for good.
func TestDeviceCloseWakesCQWaiters(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	defer s.dev.Close()
	rbuf := c.regMR(t, 64, LocalWrite)
	_, err := c.qp.PostRecv(RecvWR{ID: 7, SGL: []SGE{rbuf.SGE(0, 64)}})
	require.NoError(t, err)
	idle, err := c.dev.CreateCQ(4) // no QP completes here
	require.NoError(t, err)

	type result struct {
		wcs []WC
		err error
	}
	pollLoop := make(chan result, 1)
	go func() { // a completion loop: PollWait until an error
		var all []WC
		wcs := make([]WC, 4)
		for {
			n, err := c.rcq.PollWait(context.Background(), wcs)
			all = append(all, wcs[:n]...)
			if err != nil {
				pollLoop <- result{all, err}
				return
			}
		}
	}()
	waits := make(chan error, 3)
	go func() { waits <- idle.Wait(context.Background()) }()
	go func() { waits <- idle.WaitSolicited(context.Background()) }()
	go func() {
		_, err := idle.PollWait(context.Background(), make([]WC, 1))
		waits <- err
	}()
	time.Sleep(50 * time.Millisecond) // all four block
	select {
	case r := <-pollLoop:
		t.Fatalf("PollWait returned before Close: %v", r.err)
	case err := <-waits:
		t.Fatalf("a waiter returned before Close: %v", err)
	default:
	}

	require.NoError(t, c.dev.Close())
	for range 3 {
		select {
		case err := <-waits:
			require.ErrorIs(t, err, ErrClosed)
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter on an idle CQ still blocked after Device.Close")
		}
	}
	select {
	case r := <-pollLoop:
		require.ErrorIs(t, r.err, ErrClosed)
		require.Len(t, r.wcs, 1, "the flushed receive comes before the error")
		require.Equal(t, wcString(7, WCRecv, WRFlushErr), wcOf(r.wcs[0]))
	case <-time.After(5 * time.Second):
		t.Fatal("PollWait still blocked after Device.Close")
	}
	// Later waits return at once.
	require.ErrorIs(t, idle.Wait(context.Background()), ErrClosed)
}

// A PollWait whose ctx has ended returns the completions already queued
// before ctx.Err(): a cancelled wait strands none. Before, it returned
// context.Canceled with completions queued.
func TestPollWaitEndedCtxReturnsQueuedFirst(t *testing.T) {
	checkRoutines(t)
	c, _ := connect(t, pairOpts{})
	_, err := c.qp.PostSend(SendWR{ID: 3, Opcode: OpSend, Flags: Signaled | Inline, InlineData: []byte("x")})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	require.NoError(t, c.scq.Wait(ctx))
	cancel()
	wcs := make([]WC, 4)
	n, err := c.scq.PollWait(ctx, wcs)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, wcString(3, WCSend, Success), wcOf(wcs[0]))
	n, err = c.scq.PollWait(ctx, wcs)
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, n)
}
