package verbs

import (
	"context"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// woken reports whether the CQ's waiters have a wake-up pending.
func woken(cq *CQ) bool { return len(cq.notify) == 1 }

// drainWake takes a pending wake-up.
func drainWake(cq *CQ) {
	select {
	case <-cq.notify:
	default:
	}
}

// The moderation rule on the CQ itself: completions a receive loop queues
// are pollable at once, but wake the waiter only at the count, at a kick,
// or when they carry an error or the Solicited Event flag; everything else
// wakes at once.
func TestCQModerationRule(t *testing.T) {
	d := openDev(DeviceAttr{})
	cq, err := d.CreateCQ(64)
	require.NoError(t, err)
	require.ErrorIs(t, cq.SetModeration(0), ErrInvalidArg)
	require.ErrorIs(t, cq.SetModeration(65), ErrInvalidArg)
	require.NoError(t, cq.SetModeration(4))
	cq.waiters.Add(1) // as if a goroutine were in Wait

	for i := range 3 {
		require.True(t, cq.add(WC{ID: uint64(i)}, true))
		require.False(t, woken(cq), "completion %d of 4 held", i)
	}
	require.Equal(t, 3, cq.Len(), "held completions are queued")
	require.True(t, cq.add(WC{ID: 3}, true))
	require.True(t, woken(cq), "the fourth wakes")
	drainWake(cq)

	require.True(t, cq.add(WC{ID: 4}, true))
	require.False(t, woken(cq))
	cq.kick()
	require.True(t, woken(cq), "a kick wakes what was held")
	drainWake(cq)
	cq.kick()
	require.False(t, woken(cq), "nothing held, nothing to wake")

	require.True(t, cq.add(WC{ID: 5}, true))
	require.True(t, cq.add(WC{ID: 6, Status: RemAccessErr}, true))
	require.True(t, woken(cq), "an error wakes at once")
	drainWake(cq)
	require.True(t, cq.add(WC{ID: 7, Flags: SolicitedEvent}, true))
	require.True(t, woken(cq), "a solicited completion wakes at once")
	drainWake(cq)
	require.True(t, cq.add(WC{ID: 8}, false))
	require.True(t, woken(cq), "the transmit side never holds")
	drainWake(cq)

	wcs := make([]WC, 16)
	require.Equal(t, 9, cq.Poll(wcs))
	for i := range 9 {
		require.Equal(t, uint64(i), wcs[i].ID, "in order")
	}

	require.True(t, cq.add(WC{ID: 9}, true))
	require.NoError(t, cq.SetModeration(1))
	require.True(t, cq.add(WC{ID: 10}, true))
	require.True(t, woken(cq), "count 1: every completion wakes")
	drainWake(cq)

	cq.waiters.Add(-1)
	require.True(t, cq.add(WC{ID: 11}, false))
	require.False(t, woken(cq), "nobody waits: no wake-up to send")
}

// A completion added while a goroutine is about to wait, or waits, ends
// its Wait; one added before it waits is found by it. Many rounds, with
// the adds racing the waits, so that a wake-up lost between Wait's look at
// the ring and its sleep would hang a round.
func TestCQWaitNeverMissesAdd(t *testing.T) {
	d := openDev(DeviceAttr{})
	cq, err := d.CreateCQ(4)
	require.NoError(t, err)
	wcs := make([]WC, 4)
	for i := range 20000 {
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := cq.PollWait(ctx, wcs)
			done <- err
		}()
		if i%2 == 0 {
			runtime.Gosched()
		}
		require.True(t, cq.add(WC{ID: uint64(i)}, false))
		require.NoError(t, <-done, "round %d", i)
	}
	require.Zero(t, cq.waiters.Load())
}

// Over TCP, a moderated CQ never keeps a waiter from a completion its
// receive loop held back: a lone Read, a few Sends, and Sends followed by
// the peer's close all reach PollWait, although the count is never reached.
// A stream of Reads at depth completes in full.
func TestCQModerationOverTCP(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{ird: 64, ord: 64})
	require.NoError(t, c.scq.SetModeration(16))
	require.NoError(t, s.rcq.SetModeration(16))
	src := s.regFilled(t, 64<<10, RemoteRead, 3)
	dst := c.regMR(t, 64<<10, LocalWrite)
	read := func(id uint64, n int) SendWR {
		return SendWR{ID: id, Opcode: OpRDMARead, Flags: Signaled, SGL: []SGE{dst.SGE(0, n)},
			RemoteAddr: src.Addr(), RKey: src.RKey()}
	}
	pollWait := func(cq *CQ, want int) []WC {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var got []WC
		wcs := make([]WC, 64)
		for len(got) < want {
			n, err := cq.PollWait(ctx, wcs)
			require.NoError(t, err, "%d of %d completions", len(got), want)
			got = append(got, wcs[:n]...)
		}
		return got
	}

	// One Read at a time: each completion reaches the waiter when the
	// receive loop runs dry.
	for i := range 20 {
		_, err := c.qp.PostSend(read(uint64(i), 8))
		require.NoError(t, err)
		wc := pollWait(c.scq, 1)[0]
		require.Equal(t, Success, wc.Status)
		require.Equal(t, uint64(i), wc.ID)
	}

	// 2000 Reads of 4 KiB with up to 64 outstanding.
	posted, done := 0, 0
	wcs := make([]WC, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for done < 2000 {
		for posted < 2000 && posted-done < 64 {
			_, err := c.qp.PostSend(read(uint64(posted), 4096))
			require.NoError(t, err)
			posted++
		}
		n, err := c.scq.PollWait(ctx, wcs)
		require.NoError(t, err, "%d of 2000 Reads completed", done)
		for _, wc := range wcs[:n] {
			require.Equal(t, Success, wc.Status)
			require.Equal(t, uint64(done), wc.ID, "in order")
			done++
		}
	}
	requireSame(t, src.Buf()[:4096], dst.Buf()[:4096])

	// Three Sends, then the peer closes: all three reach the waiter.
	rb := s.regMR(t, 3*64, LocalWrite)
	for i := range 3 {
		_, err := s.qp.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{rb.SGE(64*i, 64)}})
		require.NoError(t, err)
	}
	for i := range 3 {
		_, err := c.qp.PostSend(SendWR{ID: 100 + uint64(i), Opcode: OpSend, Flags: Inline, InlineData: []byte{byte(i)}})
		require.NoError(t, err)
	}
	got := pollWait(s.rcq, 3)
	for i, wc := range got {
		require.Equal(t, Success, wc.Status)
		require.Equal(t, uint64(i), wc.ID)
	}
	_, err := s.qp.PostRecv(RecvWR{ID: 9, SGL: []SGE{rb.SGE(0, 64)}})
	require.NoError(t, err)
	_, err = c.qp.PostSend(SendWR{ID: 200, Opcode: OpSend, Flags: Inline, InlineData: []byte("last")})
	require.NoError(t, err)
	require.NoError(t, c.qp.Disconnect(ctx))
	wc := pollWait(s.rcq, 1)[0]
	require.Equal(t, uint64(9), wc.ID)
	require.Equal(t, Success, wc.Status, "the Send before the close completes")
}

// BenchmarkCQAddPoll is one completion through a CQ, added by a loop and
// polled: what a latency test's round trip pays per completion.
func BenchmarkCQAddPoll(b *testing.B) {
	cq := &CQ{ring: make([]WC, 64), notify: make(chan struct{}, 1), solWait: make(chan struct{}, 1)}
	var wc [4]WC
	b.ReportAllocs()
	for b.Loop() {
		cq.add(WC{ID: 1}, true)
		if cq.Poll(wc[:]) != 1 {
			b.Fatal("no completion")
		}
	}
}

// avail, which Poll reads without the lock, is zero exactly when the CQ is
// empty, through any mix of adds and polls of any size.
func TestCQAvailFollowsN(t *testing.T) {
	d := openDev(DeviceAttr{})
	cq, err := d.CreateCQ(8)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	wcs := make([]WC, 8)
	next, want := uint64(0), uint64(0)
	for range 10000 {
		if rng.IntN(2) == 0 && cq.Len() < 8 {
			require.True(t, cq.add(WC{ID: next}, rng.IntN(2) == 0))
			next++
		} else {
			for _, wc := range wcs[:cq.Poll(wcs[:rng.IntN(4)])] {
				require.Equal(t, want, wc.ID)
				want++
			}
		}
		require.Equal(t, cq.Len() == 0, cq.avail.Load() == 0)
	}
}
