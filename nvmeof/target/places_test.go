package target

import (
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

// The places rule on queues that never connect (no run goroutine): which
// waiting queue a newcomer evicts, that a bound queue is never evicted
// and an evicted one never binds (the two happen under t.mu, so a Connect
// that races an eviction either wins its place or is refused), and that
// a target full of bound queues refuses.
func TestPlacesRule(t *testing.T) {
	checkRoutines(t)
	tg, _, _ := newTestTarget(t, 1<<20, Config{MaxQueues: 3})
	p := &Port{t: tg}
	var added []*queue
	add := func() (*queue, bool) {
		q, err := tg.newQueue(nvme.CMRequest{QID: 1, HSQSize: 15, HRQSize: 16})
		require.NoError(t, err)
		if !tg.addQueue(q, p) {
			q.release()
			return nil, false
		}
		added = append(added, q)
		return q, true
	}
	t.Cleanup(func() {
		for _, q := range added {
			q.release()
			tg.dropQueue(q)
			tg.wg.Done()
		}
	})
	bind := func(q *queue) bool {
		tg.mu.Lock()
		defer tg.mu.Unlock()
		return tg.bindQueue(q)
	}
	evicted := func(q *queue) bool { return q.evicted() && q.runCtx.Err() != nil }

	a, _ := add()
	b, _ := add()
	c, _ := add()
	// All in their start-up: the oldest goes.
	d, ok := add()
	require.True(t, ok)
	require.True(t, evicted(a), "the oldest waiting queue")
	require.False(t, bind(a), "an evicted queue does not bind: its Connect is refused")
	require.False(t, evicted(b) || evicted(c) || evicted(d))

	// A queue whose Connect is being served is passed over; one silent
	// for connectGrace since its start-up goes before older ones.
	b.connecting.Store(true)
	d.started.Store(time.Now().Add(-connectGrace).UnixNano())
	e, ok := add()
	require.True(t, ok)
	require.True(t, evicted(d), "silent past the grace, ahead of the older c")
	require.False(t, evicted(b) || evicted(c))
	_, ok = add()
	require.True(t, ok)
	require.True(t, evicted(c), "the oldest not connecting, before b")
	require.False(t, evicted(b))

	// Bound queues stay; with every place bound, a newcomer is refused.
	require.True(t, bind(b))
	require.True(t, bind(e))
	f := added[len(added)-1]
	require.True(t, bind(f))
	_, ok = add()
	require.False(t, ok, "all places connected: No Resources")
	require.False(t, evicted(b) || evicted(e) || evicted(f))

	// A Connect that failed after binding puts its queue back, first in
	// line; a queue that ends frees its place.
	tg.unbindQueue(e)
	g, ok := add()
	require.True(t, ok)
	require.True(t, evicted(e))
	tg.dropQueue(f)
	_, ok = add()
	require.True(t, ok, "a place freed by a queue that ended")
	require.False(t, evicted(b) || evicted(g))
}
