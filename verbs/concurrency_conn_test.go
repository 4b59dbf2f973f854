package verbs

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The concurrency contract for connecting and ending (package doc,
// "Concurrency"): Dial and Accept one at a time, Listener and ConnRequest
// from several goroutines, the QP's getters at any time, Device.Close
// while everything else runs.

// Two Dials of one QP at once, then two Accepts of two requests with one
// QP at once: one of each pair connects, the other fails with ErrQPState
// and leaves its request unanswered, for Reject; a Dial of the connected
// QP fails with ErrQPState too.
func TestConcurrentDialAccept(t *testing.T) {
	checkRoutines(t)
	srv := newSide(t, pairOpts{})
	defer srv.qp.Close()
	ln, err := srv.dev.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{})
	require.NoError(t, err)
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr := ln.Addr().String()
	c1, c2 := newSide(t, pairOpts{}), newSide(t, pairOpts{})
	defer c1.qp.Close()
	defer c2.qp.Close()
	dials1, dial2 := make(chan error, 2), make(chan error, 1)
	for range 2 {
		go func() { dials1 <- c1.qp.Dial(ctx, "tcp", addr, withPD(ConnConfig{}, []byte{1})) }()
	}
	go func() { dial2 <- c2.qp.Dial(ctx, "tcp", addr, withPD(ConnConfig{}, []byte{2})) }()

	reqs := map[byte]*ConnRequest{}
	for len(reqs) < 2 {
		r, err := ln.GetRequest(ctx)
		require.NoError(t, err)
		require.Len(t, r.PrivateData, 1)
		require.Nil(t, reqs[r.PrivateData[0]], "one request per QP: the second Dial of a QP made none")
		reqs[r.PrivateData[0]] = r
	}
	lost := <-dials1 // the Dial that lost the QP to the other one returns at once
	require.ErrorIs(t, lost, ErrQPState)

	accepts := make(chan struct {
		who byte
		err error
	}, 2)
	for who, r := range reqs {
		go func() {
			err := r.Accept(ctx, srv.qp, nil)
			accepts <- struct {
				who byte
				err error
			}{who, err}
		}()
	}
	a1, a2 := <-accepts, <-accepts
	require.True(t, (a1.err == nil) != (a2.err == nil), "one Accept wins: %v, %v", a1.err, a2.err)
	won, loser := a1, a2
	if a1.err != nil {
		won, loser = a2, a1
	}
	require.ErrorIs(t, loser.err, ErrQPState)
	require.NoError(t, reqs[loser.who].Reject(nil), "the request its Accept refused is still to answer")

	dials := map[byte]error{1: <-dials1, 2: <-dial2}
	require.NoError(t, dials[won.who], "the accepted Dial")
	require.Error(t, dials[loser.who], "the rejected Dial")
	winner := map[byte]*side{1: c1, 2: c2}[won.who]
	require.Equal(t, StateRTS, winner.qp.State())
	require.ErrorIs(t, winner.qp.Dial(ctx, "tcp", addr, ConnConfig{}), ErrQPState, "a connected QP")
	barrier(t, winner, srv) // the connection carries data
}

// Four goroutines in GetRequest while eight clients dial: each request goes
// to exactly one of them, which answers it with Accept and Reject at once,
// or with two Accepts (two QPs): one of the two wins, and the client sees
// which; Close then releases the four with ErrClosed.
func TestConcurrentListenerRequests(t *testing.T) {
	checkRoutines(t)
	const getters, clients = 4, 8
	srv := newSide(t, pairOpts{})
	ln, err := srv.dev.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{})
	require.NoError(t, err)
	defer ln.Close() // the getters end if the test fails early
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qps := make(chan *QP, 2*clients)
	for range 2 * clients {
		qp, err := srv.pd.CreateQP(QPConfig{SendCQ: srv.scq, RecvCQ: srv.rcq})
		require.NoError(t, err)
		defer qp.Close()
		qps <- qp
	}
	type answer struct {
		who      byte
		accepted bool
	}
	answers := make(chan answer, clients)
	ends := make(chan error, getters)
	var took atomic.Int64
	for range getters {
		go func() {
			for {
				r, err := ln.GetRequest(context.Background())
				if err != nil {
					ends <- err
					return
				}
				took.Add(1)
				qp, other := <-qps, <-qps
				acc, rej := make(chan error, 1), make(chan error, 1)
				go func() { acc <- r.Accept(ctx, qp, nil) }()
				if r.PrivateData[0]%2 == 0 {
					go func() { rej <- r.Reject(nil) }()
				} else { // the same request accepted with two QPs
					go func() { rej <- r.Accept(ctx, other, nil) }()
				}
				ae, re := <-acc, <-rej
				if (ae == nil) == (re == nil) {
					panic("both answered the request, or neither")
				}
				answers <- answer{r.PrivateData[0], ae == nil || r.PrivateData[0]%2 == 1}
			}
		}()
	}
	dials := make(chan answer, clients)
	for i := range clients {
		c := newSide(t, pairOpts{})
		defer c.qp.Close()
		go func() {
			err := c.qp.Dial(ctx, "tcp", ln.Addr().String(), withPD(ConnConfig{}, []byte{byte(i)}))
			dials <- answer{byte(i), err == nil}
		}()
	}
	got, dialed := map[byte]bool{}, map[byte]bool{}
	for range clients {
		a := <-answers
		_, dup := got[a.who]
		require.False(t, dup, "client %d's request went to two getters", a.who)
		got[a.who] = a.accepted
		d := <-dials
		dialed[d.who] = d.accepted
	}
	require.Equal(t, got, dialed, "each client connected exactly when its request was accepted")
	require.EqualValues(t, clients, took.Load())
	require.NoError(t, ln.Close())
	for range getters {
		select {
		case err := <-ends:
			require.ErrorIs(t, err, ErrClosed)
		case <-time.After(5 * time.Second):
			t.Fatal("a GetRequest still blocked after Close")
		}
	}
}

// Every getter of a QP from two goroutines, and of its peer from one,
// before Dial and Accept, while they connect, carry data and end: State
// never goes back, once RTS it has its addresses, MULPDU and the peer's
// private data, once Err is set it stays set, and Done closes only in
// ERROR.
func TestConcurrentGettersLifetime(t *testing.T) {
	checkRoutines(t)
	for range 5 { // the getters meet start's window in some rounds
		gettersLifetime(t)
	}
}

func gettersLifetime(t *testing.T) {
	c, s := newSide(t, pairOpts{}), newSide(t, pairOpts{})
	ln, err := s.dev.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{})
	require.NoError(t, err)
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stop, halt := halter(t)
	fails := make(chan string, 8)
	var wg sync.WaitGroup
	for _, w := range []struct {
		qp *QP
		pd string // the peer's private data
	}{{c.qp, "hello"}, {c.qp, "hello"}, {s.qp, ""}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last, errSeen := StateIdle, false
			for {
				select {
				case <-stop:
					return
				default:
				}
				st := w.qp.State()
				if st < last {
					note(fails, "State went from "+last.String()+" to "+st.String())
				}
				last = st
				e := w.qp.Err()
				if errSeen && e == nil {
					note(fails, "Err unset again")
				}
				errSeen = errSeen || e != nil
				select {
				case <-w.qp.Done():
					if w.qp.State() != StateError {
						note(fails, "Done closed in "+w.qp.State().String())
					}
				default:
				}
				m, pd, la, ra := w.qp.MULPDU(), w.qp.PeerPrivateData(), w.qp.LocalAddr(), w.qp.RemoteAddr()
				if st == StateRTS && (m == 0 || string(pd) != w.pd || la == nil || ra == nil || w.qp.Params().IRD == 0) {
					note(fails, "RTS without what connecting filled in")
				}
				_, _ = w.qp.TCPInfo()
				_, _, _, _ = w.qp.Stats(), w.qp.Config(), w.qp.PD(), w.qp.TLS()
			}
		}()
	}
	accepted := make(chan error, 1)
	go func() {
		req, err := ln.GetRequest(ctx)
		if err == nil {
			err = req.Accept(ctx, s.qp, []byte("hello"))
		}
		accepted <- err
	}()
	time.Sleep(time.Millisecond)
	require.NoError(t, c.qp.Dial(ctx, "tcp", ln.Addr().String(), ConnConfig{}))
	require.NoError(t, <-accepted)
	barrier(t, s, c)
	require.NoError(t, c.qp.Disconnect(ctx))
	waitDone(t, c.qp, peerTimeout)
	time.Sleep(time.Millisecond)
	halt()
	wg.Wait()
	close(fails)
	for f := range fails {
		t.Fatal(f)
	}
	require.ErrorIs(t, c.qp.Err(), ErrDisconnected)
	s.qp.Close()
}

// Device.Close while two goroutines post Writes, two poll the send CQ,
// one waits in GetRequest and one creates CQs, MRs and Listeners: every WR posted
// completes exactly once (done or flushed), the pollers and GetRequest
// return errors that are ErrClosed, and so does every creation after.
func TestConcurrentDeviceClose(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	defer s.dev.Close()
	defer c.dev.Close() // what runs until it closes ends if the test fails early
	src := c.regMR(t, 256, LocalWrite)
	dst := s.regMR(t, 256, LocalWrite|RemoteWrite)
	ln, err := c.dev.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{})
	require.NoError(t, err)
	var posted atomic.Int64
	// Completions posted and not yet polled: at most what the CQ holds,
	// as an application must keep them (the pollers fell behind on a
	// loaded machine, and the CQ overran).
	var unpolled atomic.Int64
	var mu sync.Mutex
	seen := map[uint64]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for p := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3000 {
				if unpolled.Add(1) > int64(c.scq.Cap()) {
					unpolled.Add(-1)
					select {
					case <-c.qp.Done():
						return
					default:
						time.Sleep(100 * time.Microsecond) // the CQ is full
						continue
					}
				}
				n, err := c.qp.PostSend(SendWR{ID: uint64(p)<<32 | uint64(i), Opcode: OpRDMAWrite, Flags: Signaled,
					SGL: []SGE{src.SGE(0, 256)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
				posted.Add(int64(n))
				unpolled.Add(int64(n - 1))
				if err != nil && !errors.Is(err, ErrQueueFull) {
					errs <- err
					return
				}
				select {
				case <-c.qp.Done():
					return
				default:
					if err != nil {
						time.Sleep(100 * time.Microsecond) // full
					}
				}
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wcs := make([]WC, 16)
			for {
				n, err := c.scq.PollWait(context.Background(), wcs)
				unpolled.Add(-int64(n))
				mu.Lock()
				for _, wc := range wcs[:n] {
					seen[wc.ID]++
					if wc.Status != Success && wc.Status != WRFlushErr {
						errs <- errors.New(wc.String())
					}
				}
				mu.Unlock()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, err := ln.GetRequest(context.Background())
		errs <- err
	}()
	go func() {
		defer wg.Done()
		for {
			cq, err := c.dev.CreateCQ(4)
			if err == nil {
				_, err = c.pd.RegMR(make([]byte, 8), 0)
			}
			if err == nil {
				var l *Listener
				if l, err = c.dev.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{}); err == nil {
					err = l.Close()
				}
			}
			if err != nil {
				errs <- err
				return
			}
			if err := cq.Destroy(); err != nil {
				errs <- err
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, c.dev.Close())
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		require.ErrorIs(t, err, ErrClosed)
		n++
	}
	require.Equal(t, 4, n, "two pollers, GetRequest and the creator ended with ErrClosed; no poster failed")
	waitDone(t, c.qp, peerTimeout)
	for _, wc := range drainWC(c.scq) { // queued after the pollers returned
		require.Contains(t, []WCStatus{Success, WRFlushErr}, wc.Status, "%v", wc)
		seen[wc.ID]++
	}
	require.Len(t, seen, int(posted.Load()), "every posted WR completed")
	for id, k := range seen {
		require.Equal(t, 1, k, "WR %#x completed %d times", id, k)
	}
	_, err = c.dev.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{})
	require.ErrorIs(t, err, ErrClosed)
	_, err = c.pd.CreateSRQ(4, 1)
	require.ErrorIs(t, err, ErrClosed)
}
