package rmem

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// With one slot, a 4 MiB Read in 4 KiB WRs and 16 small Reads that arrive
// one after another while it runs: each small Read is granted after at
// most one WR of every call ahead of it in the queue (the large Read once,
// the small ones before it), not after the rest of the large Read; and the
// small Reads are granted in the order they came.
func TestFairFIFO(t *testing.T) {
	checkRoutines(t)
	p := newPair(t, pairOpts{size: 8 << 20, cfg: Config{Depth: 1, PieceSize: 4096}})
	const large, smalls, smallOff = 4 << 20, 16, 4<<20 + 4096
	var grants []int64 // the offset of each granted WR's call, in order (under b.mu)
	p.b.mu.Lock()
	p.b.onGrant = func(c *call) { grants = append(grants, c.off) }
	p.b.mu.Unlock()

	ctx := context.Background()
	var wg sync.WaitGroup
	errc := make(chan error, smalls+1)
	wg.Go(func() {
		_, err := p.b.ReadAt(ctx, make([]byte, large), 0)
		errc <- err
	})
	// observed[k]: grants so far, and the calls ahead of small Read k in
	// the queue, when it was first seen there.
	type seen struct{ grants, ahead int }
	observed := make([]seen, smalls)
	waitFor := func(what string, cond func() bool) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			p.b.mu.Lock()
			ok := cond()
			p.b.mu.Unlock()
			if ok {
				return
			}
			require.True(t, time.Now().Before(deadline), "waiting for %s", what)
			time.Sleep(50 * time.Microsecond)
		}
	}
	waitFor("the large Read's second WR", func() bool { return len(grants) >= 2 })
	for k := range smalls {
		off := int64(smallOff + k*4096)
		wg.Go(func() {
			_, err := p.b.ReadAt(ctx, make([]byte, 4096), off)
			errc <- err
		})
		waitFor("a small Read to queue", func() bool {
			ahead := 0
			for c := p.b.queue.head; c != nil; c = c.links[linkQueue].next {
				if c.off == off {
					observed[k] = seen{grants: len(grants), ahead: ahead}
					return true
				}
				ahead++
			}
			for _, g := range grants { // granted before we looked
				if g == off {
					observed[k] = seen{grants: -1}
					return true
				}
			}
			return false
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	require.Len(t, grants, large/4096+smalls)
	next := 0
	for i, g := range grants {
		if g < smallOff {
			continue
		}
		k := int(g-smallOff) / 4096
		require.Equal(t, next, k, "small Reads granted out of order: %v", grants)
		next++
		if o := observed[k]; o.grants >= 0 {
			require.LessOrEqual(t, i-o.grants, o.ahead, "small Read %d waited for more WRs than calls were ahead of it", k)
		}
	}
	require.Less(t, grants[len(grants)-1], int64(smallOff), "the large Read should finish last")
}
