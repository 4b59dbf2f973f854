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
	stop, halt := halter(t)
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
	halt()
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

// An MR's getters while a peer's Writes land in it and then while Dereg
// runs: its STag and address never change, Placed only grows and counts
// every Write, and once a getter has seen the region dead (deregistered)
// none sees it alive again; after Dereg, Len is 0 and Buf nil.
func TestConcurrentMRGettersWhileDereg(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	const n, writes = 4096, 200
	dst := s.regMR(t, n, LocalWrite|RemoteWrite)
	stag, addr := dst.RKey(), dst.Addr()
	src := c.regFilled(t, n, 0, 11)
	stop, halt := halter(t)
	fails := make(chan string, 4)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var placed uint64
			dead := false
			for {
				select {
				case <-stop:
					return
				default:
				}
				p := dst.Placed()
				rb := dst.RemoteBuffer()
				valid := dst.Valid()
				l, b := dst.Len(), dst.Buf()
				switch {
				case p < placed:
					note(fails, "Placed went back")
				case dst.LKey() != stag || dst.RKey() != stag || rb.RKey != stag:
					note(fails, "the STag changed")
				case dst.Addr() != addr || rb.Addr != addr || dst.SGE(0, 1).Addr != addr:
					note(fails, "the address changed")
				case rb.Len != n && rb.Len != 0, l != n && l != 0, b != nil && len(b) != n:
					note(fails, "a length other than the region's or 0")
				case dead && valid:
					note(fails, "alive again after Dereg")
				case dst.Access() != LocalWrite|RemoteWrite:
					note(fails, "the access changed")
				}
				placed, dead = p, !valid
			}
		}()
	}
	for i := range writes {
		_, err := c.qp.PostSend(SendWR{ID: uint64(i), Opcode: OpRDMAWrite, Flags: Signaled,
			SGL: []SGE{src.SGE(0, n)}, RemoteAddr: addr, RKey: stag})
		if errors.Is(err, ErrQueueFull) {
			wait(t, c.scq)
			i--
			continue
		}
		require.NoError(t, err)
	}
	barrier(t, c, s)
	require.EqualValues(t, writes, dst.Placed(), "every Write counted once")
	requireSame(t, src.Buf(), dst.Buf())
	time.Sleep(2 * time.Millisecond) // the getters run on the live region
	require.NoError(t, dst.Dereg())
	time.Sleep(2 * time.Millisecond)
	halt()
	wg.Wait()
	close(fails)
	for f := range fails {
		t.Fatal(f)
	}
	require.False(t, dst.Valid())
	require.Zero(t, dst.Len())
	require.Nil(t, dst.Buf())
	require.Equal(t, RemoteBuffer{Addr: addr, RKey: stag}, dst.RemoteBuffer())
	require.ErrorIs(t, dst.Dereg(), ErrInvalidArg, "deregistered already")
}

// RegMR, AllocMR, CreateQP and CreateSRQ from several goroutines while
// another calls Dealloc until it succeeds (at the latest once they are
// done): Dealloc is refused (ErrBusy) while any of them holds an object of
// the PD, and once it succeeds every later creation is refused with
// ErrClosed.
func TestConcurrentPDObjects(t *testing.T) {
	checkRoutines(t)
	d := openDev(DeviceAttr{})
	defer d.Close()
	pd := d.AllocPD()
	cq, err := d.CreateCQ(64)
	require.NoError(t, err)
	var live atomic.Int64 // objects created and not yet released: at most the PD's users
	var gone atomic.Bool  // Dealloc succeeded
	var started atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	creators := []func() (func() error, error){
		func() (func() error, error) {
			mr, err := pd.RegMR(make([]byte, 64), LocalWrite)
			if err != nil {
				return nil, err
			}
			return mr.Dereg, nil
		},
		func() (func() error, error) {
			mr, err := pd.AllocMR()
			if err != nil {
				return nil, err
			}
			return mr.Dereg, nil
		},
		func() (func() error, error) {
			qp, err := pd.CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				return nil, err
			}
			return qp.Close, nil
		},
		func() (func() error, error) {
			srq, err := pd.CreateSRQ(4, 1)
			if err != nil {
				return nil, err
			}
			return srq.Destroy, nil
		},
	}
	for _, create := range creators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 300 {
				release, err := create()
				if err != nil {
					if !errors.Is(err, ErrClosed) { // only a deallocated PD refuses
						errs <- err
					}
					return
				}
				live.Add(1)
				started.Add(1)
				runtime.Gosched() // held a while: Dealloc meets it
				if gone.Load() {
					errs <- errors.New("created after Dealloc succeeded")
				}
				live.Add(-1)
				if err := release(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for started.Load() < 40 { // the creators are under way
		time.Sleep(100 * time.Microsecond)
	}
	refused := 0
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := pd.Dealloc()
		if err == nil {
			// Each creator counts an object only after it exists and
			// stops before releasing it: Dealloc found none, and none
			// can be created now.
			gone.Store(true)
			require.Zero(t, live.Load(), "Dealloc succeeded while an object of the PD lived")
			break
		}
		require.ErrorIs(t, err, ErrBusy)
		refused++
		require.True(t, time.Now().Before(deadline), "Dealloc never found the PD unused")
		time.Sleep(50 * time.Microsecond)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.ErrorIs(t, pd.Dealloc(), ErrClosed, "deallocated already")
	_, err = pd.RegMR(make([]byte, 8), 0)
	require.ErrorIs(t, err, ErrClosed)
	t.Logf("Dealloc refused %d times first", refused)
}
