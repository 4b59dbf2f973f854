package verbs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The concurrency contract of the package doc ("Concurrency"), call by
// call, meant for the race detector: every promise there is exercised
// here from several goroutines at once.

// collect polls cq from pollers goroutines at once until want completions
// have come, and returns how many times each ID was seen and the statuses.
func collect(t *testing.T, cq *CQ, pollers, want int) (map[uint64]int, map[WCStatus]int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	seen, statuses := map[uint64]int{}, map[WCStatus]int{}
	var got atomic.Int64
	var wg sync.WaitGroup
	for range pollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wcs := make([]WC, 8)
			for got.Load() < int64(want) {
				n, err := cq.PollWait(ctx, wcs)
				if err != nil {
					return // ctx: all came, or the test fails below
				}
				mu.Lock()
				for _, wc := range wcs[:n] {
					seen[wc.ID]++
					statuses[wc.Status]++
				}
				mu.Unlock()
				if got.Add(int64(n)) >= int64(want) {
					cancel() // the other pollers stop waiting
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(want), got.Load(), "completions polled")
	return seen, statuses
}

// Posters, pollers and readers of one connected pair at once: each WR
// posted from any goroutine completes exactly once, to one poller.
func TestConcurrencyContract(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{clientPD: []byte("client"), serverPD: []byte("server")})
	const posters, perPoster = 4, 40 // of each 40: 10 Sends, 20 Writes, 10 Reads
	src := c.regMR(t, 64, LocalWrite)
	sink := c.regMR(t, posters*perPoster*64, LocalWrite)
	dst := s.regMR(t, 64, LocalWrite|RemoteWrite|RemoteRead)
	rbuf := s.regMR(t, posters*16*64, LocalWrite)

	var wg sync.WaitGroup
	for p := range posters { // receives posted from several goroutines
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 16 {
				id := uint64(p*16 + i)
				_, err := s.qp.PostRecv(RecvWR{ID: id, SGL: []SGE{rbuf.SGE(int(id)*64, 64)}})
				if err != nil {
					panic(err)
				}
			}
		}()
	}
	wg.Wait()

	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() { // every getter, while the data moves
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, q := range []*QP{c.qp, s.qp} {
				_ = q.State()
				_ = q.Err()
				_ = q.Stats()
				_, _ = q.TCPInfo()
				_ = q.Params()
				_ = q.MULPDU()
				_ = q.PeerPrivateData()
				_, _ = q.LocalAddr(), q.RemoteAddr()
				_, _ = q.Config(), q.PD()
			}
			_, _, _ = sink.LKey(), sink.Len(), sink.RemoteBuffer()
			_, _ = dst.Placed(), dst.Valid()
			_, _, _ = c.scq.Len(), c.scq.Err(), c.scq.Cap()
		}
	}()
	var handled atomic.Int64
	count := func() { handled.Add(1) }
	s.qp.SetRxHandler(count)
	readers.Add(1)
	go func() { // the handler replaced and cleared while the receive loop runs
		defer readers.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				s.qp.SetRxHandler(nil)
				return
			case <-time.After(time.Millisecond):
			}
			if i%3 == 2 {
				s.qp.SetRxHandler(nil)
			} else {
				s.qp.SetRxHandler(count)
			}
		}
	}()

	for p := range posters { // sends posted from several goroutines
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perPoster {
				id := uint64(p*perPoster + i)
				wr := SendWR{ID: id, Flags: Signaled, SGL: []SGE{src.SGE(0, 64)}}
				switch i % 4 {
				case 0:
					wr.Opcode = OpSend
				case 1, 2:
					wr.Opcode, wr.RemoteAddr, wr.RKey = OpRDMAWrite, dst.Addr(), dst.RKey()
				case 3:
					wr.Opcode, wr.RemoteAddr, wr.RKey = OpRDMARead, dst.Addr(), dst.RKey()
					wr.SGL = []SGE{sink.SGE(int(id)*64, 64)}
				}
				if _, err := c.qp.PostSend(wr); err != nil {
					panic(fmt.Sprintf("poster %d, WR %d: %v", p, i, err))
				}
			}
		}()
	}
	seen, statuses := collect(t, c.scq, 3, posters*perPoster)
	wg.Wait()
	require.Len(t, seen, posters*perPoster)
	for id, n := range seen {
		require.Equal(t, 1, n, "WR %d completed %d times", id, n)
	}
	require.Equal(t, map[WCStatus]int{Success: posters * perPoster}, statuses)
	sends := posters * perPoster / 4
	rseen, rstat := collect(t, s.rcq, 2, sends)
	require.Len(t, rseen, sends)
	require.Equal(t, map[WCStatus]int{Success: sends}, rstat)
	close(stop)
	readers.Wait()
	require.Equal(t, []byte("server"), c.qp.PeerPrivateData())
	require.Equal(t, []byte("client"), s.qp.PeerPrivateData())
	require.NoError(t, c.qp.Err())
	// The toggler may leave the handler cleared for all of the traffic
	// (it did on a loaded machine), so whether it ran meanwhile is luck;
	// what must hold is that a handler set after all the replacing runs.
	during := handled.Load()
	s.qp.SetRxHandler(count)
	_, err := c.qp.PostSend(SendWR{ID: 1 << 20, Opcode: OpSend, Flags: Inline, InlineData: []byte("last")})
	require.NoError(t, err)
	waitOK(t, s.rcq, WCRecv)
	require.Eventually(t, func() bool { return handled.Load() > during }, 5*time.Second, time.Millisecond,
		"the handler ran for an arrival after the replacing (%d runs during it)", during)
	s.qp.SetRxHandler(nil)
	t.Logf("the handler ran %d times while it was replaced", during)
}

// Disconnect twice, Close and Abort at once, while posters keep posting:
// every call returns, the QP ends, and every WR posted completes exactly
// once (done or flushed).
func TestConcurrentEnding(t *testing.T) {
	checkRoutines(t)
	for round := range 5 {
		c, s := connect(t, pairOpts{})
		src := c.regMR(t, 64, LocalWrite)
		dst := s.regMR(t, 64, LocalWrite|RemoteWrite)
		var posted atomic.Int64
		var wg sync.WaitGroup
		for p := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					n, err := c.qp.PostSend(SendWR{ID: uint64(p)<<32 | uint64(i), Opcode: OpRDMAWrite, Flags: Signaled,
						SGL: []SGE{src.SGE(0, 64)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
					posted.Add(int64(n))
					if errors.Is(err, ErrQueueFull) {
						time.Sleep(time.Millisecond)
						continue
					}
					if err != nil {
						panic(err)
					}
					select {
					case <-c.qp.Done():
						return
					default:
					}
					if i > 2000 {
						return
					}
				}
			}()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		disconnect := func() error { return c.qp.Disconnect(ctx) }
		endAtOnce(t, round, disconnect, disconnect, c.qp.Close, c.qp.Abort)
		cancel()
		wg.Wait()
		waitDone(t, c.qp, peerTimeout)
		waitDone(t, s.qp, peerTimeout)
		require.Error(t, c.qp.Err())
		seen := map[uint64]int{}
		for _, wc := range drainWC(c.scq) {
			seen[wc.ID]++
			require.Contains(t, []WCStatus{Success, WRFlushErr}, wc.Status, "round %d: %v", round, wc)
		}
		require.Len(t, seen, int(posted.Load()), "round %d: every posted WR completed", round)
		for id, n := range seen {
			require.Equal(t, 1, n, "round %d: WR %#x completed %d times", round, id, n)
		}
	}
}

// GetRequest from two goroutines, Accept and Reject racing for one
// request, then Close with a GetRequest waiting.
func TestConcurrentListener(t *testing.T) {
	checkRoutines(t)
	srv := newSide(t, pairOpts{})
	ln, err := srv.dev.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{})
	require.NoError(t, err)
	reqs := make(chan *ConnRequest, 2)
	for range 2 {
		go func() {
			r, err := ln.GetRequest(context.Background())
			if err != nil {
				reqs <- nil
				return
			}
			reqs <- r
		}()
	}
	cli := newSide(t, pairOpts{})
	dialed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		dialed <- cli.qp.Dial(ctx, "tcp", ln.Addr().String(), ConnConfig{})
	}()
	r := <-reqs
	require.NotNil(t, r)
	answers := make(chan error, 2)
	go func() { answers <- r.Accept(context.Background(), srv.qp, nil) }()
	go func() { answers <- r.Reject(nil) }()
	a1, a2 := <-answers, <-answers
	require.True(t, (a1 == nil) != (a2 == nil), "exactly one answer wins: %v, %v", a1, a2)
	derr := <-dialed
	if srv.qp.State() == StateRTS {
		require.NoError(t, derr, "accepted")
	} else {
		require.Error(t, derr, "rejected")
	}
	require.NoError(t, ln.Close()) // the other GetRequest returns
	select {
	case r := <-reqs:
		require.Nil(t, r)
	case <-time.After(5 * time.Second):
		t.Fatal("GetRequest still blocked after Close")
	}
	cli.qp.Close()
	srv.qp.Close()
}

// RegMR, Dereg, CreateQP and CreateCQ from several goroutines, with
// Device.Close at the end while some are still under way.
func TestConcurrentDeviceObjects(t *testing.T) {
	checkRoutines(t)
	d := openDev(DeviceAttr{})
	pd := d.AllocPD()
	cq, err := d.CreateCQ(64)
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				mr, err := pd.RegMR(make([]byte, 64), LocalWrite|RemoteRead)
				if err != nil {
					errs <- err
					return
				}
				_ = mr.RKey()
				mr.Dereg()
				qp, err := pd.CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq})
				if err != nil {
					errs <- err
					return
				}
				qp.Close()
			}
			errs <- nil
		}()
	}
	time.Sleep(5 * time.Millisecond)
	require.NoError(t, d.Close())
	wg.Wait()
	for range 4 {
		if err := <-errs; err != nil {
			require.ErrorIs(t, err, ErrClosed, "refused only because the device closed")
		}
	}
}

// The getters that Dial and Accept fill in may be called while they run:
// zero until connected. Before, Params, MULPDU and PeerPrivateData read
// what start and Dial wrote without a lock (a data race under -race).
func TestGettersDuringDial(t *testing.T) {
	checkRoutines(t)
	for range 10 {
		c, s := newSide(t, pairOpts{}), newSide(t, pairOpts{})
		ln, err := s.dev.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		go func() {
			if req, err := ln.GetRequest(ctx); err == nil {
				req.Accept(ctx, s.qp, []byte("hello"))
			}
		}()
		stop, done := make(chan struct{}), make(chan struct{})
		for _, q := range []*QP{c.qp, s.qp} {
			go func() {
				defer func() { done <- struct{}{} }()
				for {
					select {
					case <-stop:
						return
					default:
					}
					_, _, _ = q.Params(), q.MULPDU(), q.PeerPrivateData()
				}
			}()
		}
		require.NoError(t, c.qp.Dial(ctx, "tcp", ln.Addr().String(), ConnConfig{}))
		time.Sleep(time.Millisecond)
		close(stop)
		<-done
		<-done
		require.Equal(t, []byte("hello"), c.qp.PeerPrivateData())
		require.NotZero(t, c.qp.MULPDU())
		c.qp.Close()
		s.qp.Close()
		ln.Close()
		cancel()
	}
}

// endAtOnce runs a QP's ending calls at once and waits for each to return.
func endAtOnce(t *testing.T, round int, calls ...func() error) {
	t.Helper()
	ends := make(chan error, len(calls))
	for _, f := range calls {
		go func() { ends <- f() }()
	}
	for range calls {
		select {
		case <-ends:
		case <-time.After(15 * time.Second):
			t.Fatalf("round %d: an ending call did not return", round)
		}
	}
}
