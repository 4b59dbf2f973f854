package verbs

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The concurrency contract for CQ (package doc, "Concurrency"): Poll,
// PollWait, Wait and WaitSolicited from several goroutines, each
// completion polled by exactly one; every waiter returns while completions
// are queued; SetModeration, Len, Cap and Err at any time.

// sendSeq posts n Sends of an 8-octet sequence number, from first on,
// every fourth with the Solicited Event bit, waiting for room in the send
// queue; only the last is signaled.
func sendSeq(t *testing.T, c *side, first, n int) {
	t.Helper()
	for i := first; i < first+n; {
		wr := SendWR{ID: uint64(i), Opcode: OpSend, Flags: Inline,
			InlineData: binary.BigEndian.AppendUint64(nil, uint64(i))}
		if i%4 == 3 {
			wr.Flags |= Solicited
		}
		if i == first+n-1 {
			wr.Flags |= Signaled
		}
		_, err := c.qp.PostSend(wr)
		if err == ErrQueueFull {
			time.Sleep(100 * time.Microsecond)
			continue
		}
		require.NoError(t, err)
		i++
	}
}

// postSeqRecvs posts n receives from first on, receive i into octets
// [8i, 8i+8) of rb.
func postSeqRecvs(t *testing.T, s *side, rb *MR, first, n int) {
	t.Helper()
	for i := first; i < first+n; i++ {
		_, err := s.qp.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{rb.SGE(8*i, 8)}})
		require.NoError(t, err)
	}
}

// Four kinds of consumer on one receive CQ at once: a busy Poll loop,
// PollWait, Wait then Poll, WaitSolicited then Poll. Each receive
// completes once, to one of them, with its Send's data.
func TestConcurrentCQConsumers(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	const rounds, per = 4, 200
	rb := s.regMR(t, 8*rounds*per, LocalWrite)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	seen := map[uint64]int{}
	by := [4]int{} // completions polled by each kind
	var got atomic.Int64
	stop, halt := halter(t)
	take := func(kind int, wcs []WC) {
		mu.Lock()
		for _, wc := range wcs {
			seen[wc.ID]++
			by[kind]++
			if wc.Status != Success || wc.Opcode != WCRecv || wc.ByteLen != 8 {
				seen[1<<63|wc.ID]++ // fails the test below
			}
		}
		mu.Unlock()
		got.Add(int64(len(wcs)))
	}
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	var wg sync.WaitGroup
	consumers := []func(wcs []WC){
		func(wcs []WC) { // busy Poll
			for !stopped() {
				if n := s.rcq.Poll(wcs); n > 0 {
					take(0, wcs[:n])
				}
				runtime.Gosched()
			}
		},
		func(wcs []WC) {
			for !stopped() {
				if n, err := s.rcq.PollWait(ctx, wcs); err == nil {
					take(1, wcs[:n])
				}
			}
		},
		func(wcs []WC) {
			for !stopped() {
				if s.rcq.Wait(ctx) == nil {
					take(2, wcs[:s.rcq.Poll(wcs)])
				}
			}
		},
		func(wcs []WC) {
			for !stopped() {
				if s.rcq.WaitSolicited(ctx) == nil {
					take(3, wcs[:s.rcq.Poll(wcs)])
				}
			}
		},
	}
	for _, consume := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			consume(make([]WC, 3))
		}()
	}
	for r := range rounds {
		postSeqRecvs(t, s, rb, r*per, per)
		sendSeq(t, c, r*per, per)
		wc := wait(t, c.scq)
		require.Equal(t, wcString(uint64(r*per+per-1), WCSend, Success), wcOf(wc))
		require.Eventually(t, func() bool { return got.Load() >= int64((r+1)*per) }, 10*time.Second,
			time.Millisecond, "round %d: %d of %d completions polled", r, got.Load(), (r+1)*per)
	}
	halt()
	cancel() // the waiters return
	wg.Wait()
	require.EqualValues(t, rounds*per, got.Load(), "no completion polled twice")
	require.Len(t, seen, rounds*per, "no completion failed, none lost")
	for id, n := range seen {
		require.Equal(t, 1, n, "receive %d polled %d times", id, n)
		require.Equal(t, id, binary.BigEndian.Uint64(rb.Buf()[8*id:]), "receive %d holds its Send", id)
	}
	require.Zero(t, s.rcq.Len())
	require.NoError(t, s.rcq.Err())
	t.Logf("polled by Poll, PollWait, Wait, WaitSolicited: %v", by)
}

// Goroutines waiting on an empty CQ, in Wait and in WaitSolicited: a
// completion without the Solicited Event bit returns every Wait and no
// WaitSolicited; a solicited one returns every WaitSolicited. Nobody polls
// meanwhile, so every waiter returns while the completions are queued.
func TestConcurrentCQWaitersAllReturn(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	rb := s.regMR(t, 16, LocalWrite)
	postSeqRecvs(t, s, rb, 0, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const n = 4
	waits, sols := make(chan error, n), make(chan error, n)
	for range n {
		go func() { waits <- s.rcq.Wait(ctx) }()
		go func() { sols <- s.rcq.WaitSolicited(ctx) }()
	}
	require.Eventually(t, func() bool { return s.rcq.waiters.Load() == n && s.rcq.solWtrs.Load() == n },
		5*time.Second, time.Millisecond, "the waiters are waiting")

	_, err := c.qp.PostSend(SendWR{ID: 0, Opcode: OpSend, Flags: Inline, InlineData: make([]byte, 8)})
	require.NoError(t, err)
	for i := range n {
		select {
		case err := <-waits:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("Wait %d of %d still blocked with a completion queued", i+1, n)
		}
	}
	require.Equal(t, 1, s.rcq.Len(), "Wait polls nothing")
	time.Sleep(20 * time.Millisecond)
	require.Len(t, sols, 0, "WaitSolicited returned for an unsolicited completion")

	_, err = c.qp.PostSend(SendWR{ID: 1, Opcode: OpSend, Flags: Inline | Solicited, InlineData: make([]byte, 8)})
	require.NoError(t, err)
	for i := range n {
		select {
		case err := <-sols:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("WaitSolicited %d of %d still blocked with a solicited completion queued", i+1, n)
		}
	}
	wcs := make([]WC, 4)
	require.Equal(t, 2, s.rcq.Poll(wcs))
	require.Equal(t, []string{wcString(0, WCRecv, Success), wcString(1, WCRecv, Success)},
		[]string{wcOf(wcs[0]), wcOf(wcs[1])})
}

// SetModeration changed over and over, with Len, Cap and Err, while two
// goroutines wait in PollWait for a stream of received Sends: no wake-up
// is lost (every completion reaches a waiter, none twice), whatever count
// is in force when the receive loop holds one back.
func TestConcurrentCQModeration(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	const rounds, per = 8, 200
	rb := s.regMR(t, 8*rounds*per, LocalWrite)
	stop, halt := halter(t)
	var settings atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.rcq.SetModeration(1 + r.IntN(64)); err != nil {
				panic(err)
			}
			settings.Add(1)
			if l := s.rcq.Len(); l < 0 || l > s.rcq.Cap() {
				panic("Len outside 0..Cap")
			}
			if s.rcq.Err() != nil {
				panic(s.rcq.Err())
			}
			runtime.Gosched()
		}
	}()
	all := map[uint64]int{}
	for r := range rounds {
		postSeqRecvs(t, s, rb, r*per, per)
		sendSeq(t, c, r*per, per)
		seen, statuses := collect(t, s.rcq, 2, per)
		require.Equal(t, map[WCStatus]int{Success: per}, statuses, "round %d", r)
		for id, n := range seen {
			all[id] += n
		}
		wait(t, c.scq)
	}
	halt()
	<-done
	require.Len(t, all, rounds*per)
	for id, n := range all {
		require.Equal(t, 1, n, "receive %d polled %d times", id, n)
		require.Equal(t, id, binary.BigEndian.Uint64(rb.Buf()[8*id:]), "receive %d holds its Send", id)
	}
	require.NoError(t, s.rcq.SetModeration(1))
	t.Logf("%d moderation settings", settings.Load())
}
