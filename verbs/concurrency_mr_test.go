package verbs

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The concurrency contract for PD and MR (package doc, "Concurrency"):
// PD's calls at once, and an MR's getters while WRs use the region, while
// fast registrations rebind it and while Dereg runs.

// mrView is what one goroutine saw of an MR: each getter reads the
// region's binding once, RemoteBuffer and SGE one binding each.
type mrView struct {
	rb  RemoteBuffer
	sge SGE
}

// A fast-registration region rebound over and over (PostRegMR, from two
// goroutines at once) between two buffers of different lengths, while
// other goroutines call its getters: every RemoteBuffer and SGE they got
// describes one binding, with the STag that binding was given; none mixes
// one binding's address with another's key or length.
func TestConcurrentMRGettersWhileRebound(t *testing.T) {
	checkRoutines(t)
	c, _ := connect(t, pairOpts{})
	fmr, err := c.pd.AllocMR()
	require.NoError(t, err)
	bufs := [2][]byte{make([]byte, 4096), make([]byte, 8192)}
	// What PostRegMR bound: an STag's 8-bit key may come back in a later
	// registration, so a binding is the pair.
	type binding struct {
		stag uint32
		addr uint64
		n    int
	}
	var mu sync.Mutex
	bound := map[binding]bool{{stag: fmr.RKey()}: true}
	stop := make(chan struct{})
	views := make(chan []mrView, 2)
	for range 2 {
		go func() {
			var seen []mrView
			for i := 0; ; i++ {
				select {
				case <-stop:
					views <- seen
					return
				default:
				}
				if len(seen) < 1<<14 {
					seen = append(seen, mrView{fmr.RemoteBuffer(), fmr.SGE(0, 1)})
				}
				_, _, _, _ = fmr.Len(), fmr.Buf(), fmr.Access(), fmr.Valid()
				if i%32 == 0 {
					runtime.Gosched() // the QP's loops share the test's cores
				}
			}
		}()
	}
	const posters, rounds = 2, 100
	var wg sync.WaitGroup
	var posted, done atomic.Int64
	for p := range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; {
				buf := bufs[(p+i)%2]
				stag, err := c.qp.PostRegMR(uint64(p*rounds+i), Signaled, fmr, buf, LocalWrite|RemoteWrite)
				if errors.Is(err, ErrQueueFull) {
					time.Sleep(100 * time.Microsecond)
					continue
				}
				if err != nil {
					panic(err)
				}
				mu.Lock() // the views are checked once all are recorded
				bound[binding{stag, addrOf(buf), len(buf)}] = true
				mu.Unlock()
				i++
				// Paced by the completions, so that the getters see
				// many bindings rather than the first and the last.
				for ticket := posted.Add(1); done.Load() < ticket; {
					runtime.Gosched()
				}
			}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ids := map[uint64]int{}
	wcs := make([]WC, 8)
	for len(ids) < posters*rounds {
		n, err := c.scq.PollWait(ctx, wcs)
		require.NoError(t, err)
		for _, wc := range wcs[:n] {
			require.Equal(t, Success, wc.Status, "%v", wc)
			ids[wc.ID]++
			require.Equal(t, 1, ids[wc.ID], "WR %d completed twice", wc.ID)
		}
		done.Add(int64(n))
	}
	wg.Wait()
	require.True(t, bound[binding{fmr.RKey(), addrOf(fmr.Buf()), fmr.Len()}], "a registration posted is in force")
	close(stop)
	var all []mrView
	for range 2 {
		all = append(all, <-views...)
	}
	require.NotEmpty(t, all)
	sges := map[[2]uint64]bool{}
	for b := range bound {
		sges[[2]uint64{uint64(b.stag), b.addr}] = true
	}
	keys := map[uint32]bool{}
	for _, v := range all {
		keys[v.rb.RKey] = true
		require.True(t, bound[binding{v.rb.RKey, v.rb.Addr, int(v.rb.Len)}], "RemoteBuffer of no one binding: %+v", v.rb)
		require.True(t, sges[[2]uint64{uint64(v.sge.LKey), v.sge.Addr}], "SGE of no one binding: %+v", v.sge)
	}
	t.Logf("%d views of %d bindings", len(all), len(keys))
}
