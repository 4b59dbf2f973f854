package verbs

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The concurrency contract for a QP's posts (package doc, "Concurrency"):
// PostSend, PostRecv and PostRegMR from several goroutines at once, each
// call's WRs consecutive in their queue, and posts that race the QP's end.

// batchID names WR i of batch b of poster p.
func batchID(p, b, i int) uint64 { return uint64(p)<<32 | uint64(b)<<8 | uint64(i) }

// Four goroutines post receives, then four post Sends, each call a batch
// of five WRs that the poster reuses for its next call: a QP takes receives, and sends, in queue order, so the
// receives complete in batches of five consecutive, and each receive
// holds a Send of a batch of five consecutive, each poster's batches in
// the order it posted them.
func TestConcurrentPostBatches(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	const posters, batches, k = 4, 12, 5
	const total = posters * batches * k
	rb := s.regMR(t, 8*total, LocalWrite)
	var slot atomic.Int64 // receive buffers in the order taken, not posted
	var wg sync.WaitGroup
	for p := range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wrs := make([]RecvWR, k) // reused: posting copies the WRs
			for i := range wrs {
				wrs[i].SGL = make([]SGE, 1)
			}
			for b := range batches {
				for i := range wrs {
					n := int(slot.Add(1) - 1)
					wrs[i].ID, wrs[i].SGL[0] = batchID(p, b, i)<<16|uint64(n), rb.SGE(8*n, 8)
				}
				if n, err := s.qp.PostRecv(wrs...); err != nil || n != k {
					panic(err)
				}
			}
		}()
	}
	wg.Wait()
	for p := range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wrs := make([]SendWR, k) // reused, InlineData too: posting copies it
			for b := range batches {
				for i := range wrs {
					wrs[i] = SendWR{ID: batchID(p, b, i), Opcode: OpSend, Flags: Inline | Signaled,
						InlineData: binary.BigEndian.AppendUint64(wrs[i].InlineData[:0], batchID(p, b, i))}
				}
				if n, err := c.qp.PostSend(wrs...); err != nil || n != k {
					panic(err)
				}
			}
		}()
	}
	wg.Wait()

	var recvs []WC // in completion order, which is the RQ's
	for len(recvs) < total {
		recvs = append(recvs, wait(t, s.rcq))
	}
	sent, _ := collect(t, c.scq, 1, total)
	require.Len(t, sent, total, "each Send completed once")
	lastBatch := map[uint64]int{} // poster → its last batch seen, for the Sends and the receives
	lastRecv := map[uint64]int{}
	for j, wc := range recvs {
		require.Equal(t, Success, wc.Status)
		id, n := wc.ID>>16, wc.ID&0xffff
		got := binary.BigEndian.Uint64(rb.Buf()[8*n:])
		i := j % k
		require.EqualValues(t, i, id&0xff, "receive %d: the receives of a PostRecv call are consecutive", j)
		require.EqualValues(t, i, got&0xff, "receive %d: the Sends of a PostSend call are consecutive", j)
		if i > 0 {
			require.Equal(t, recvs[j-1].ID>>16+1, id, "receive %d: one PostRecv call", j)
			prev := binary.BigEndian.Uint64(rb.Buf()[8*(recvs[j-1].ID&0xffff):])
			require.Equal(t, prev+1, got, "receive %d: one PostSend call", j)
			continue
		}
		for _, c := range []struct {
			last map[uint64]int
			id   uint64
		}{{lastRecv, id}, {lastBatch, got}} {
			p, b := c.id>>32, int(c.id>>8&0xffffff)
			if l, ok := c.last[p]; ok {
				require.Equal(t, l+1, b, "receive %d: poster %d's calls in the order posted", j, p)
			} else {
				require.Zero(t, b, "receive %d: poster %d's first call first", j, p)
			}
			c.last[p] = b
		}
	}
}

// Three goroutines each bind a region of their own anew (PostRegMR) and
// post a Send that carries the new STag, round after round, on one QP at
// once; the peer Writes a pattern through each STag and answers. Every
// Write reaches the buffer of its registration, and each registration
// completes once.
func TestConcurrentPostRegMR(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	const posters, rounds, n = 3, 20, 1024
	const total = posters * rounds
	src := c.regFilled(t, n*total, 0, 21)
	crb, srb := c.regMR(t, 16*total, LocalWrite), s.regMR(t, 16*total, LocalWrite)
	for i := range total {
		_, err := c.qp.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{crb.SGE(16*i, 16)}})
		require.NoError(t, err)
		_, err = s.qp.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{srb.SGE(16*i, 16)}})
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the peer: a Write through each STag it is sent, then the answer
		defer wg.Done()
		for range total {
			var wc [1]WC
			if _, err := c.rcq.PollWait(ctx, wc[:]); err != nil {
				return // the test failed: it ends ctx
			}
			if wc[0].Status != Success {
				panic(wc[0].String())
			}
			m := crb.Buf()[16*wc[0].ID:]
			which, stag, addr := binary.BigEndian.Uint32(m), binary.BigEndian.Uint32(m[4:]), binary.BigEndian.Uint64(m[8:])
			_, err := c.qp.PostSend(
				SendWR{Opcode: OpRDMAWrite, SGL: []SGE{src.SGE(n*int(which), n)}, RemoteAddr: addr, RKey: stag},
				SendWR{Opcode: OpSend, Flags: Inline, InlineData: binary.BigEndian.AppendUint32(nil, which)})
			if err != nil {
				panic(err)
			}
		}
	}()
	answers := make([]chan struct{}, posters)
	for p := range answers {
		answers[p] = make(chan struct{}, 1)
	}
	wg.Add(1)
	go func() { // our answers, to their posters
		defer wg.Done()
		for range total {
			var wc [1]WC
			if _, err := s.rcq.PollWait(ctx, wc[:]); err != nil {
				return
			}
			if wc[0].Status != Success {
				panic(wc[0].String())
			}
			which := binary.BigEndian.Uint32(srb.Buf()[16*wc[0].ID:])
			answers[which/rounds] <- struct{}{}
		}
	}()
	bufs := make([][]byte, total)
	fmrs := make([]*MR, posters)
	stags := make([]uint32, posters)
	errs := make(chan error, posters)
	for p := range posters {
		var err error
		fmrs[p], err = s.pd.AllocMR()
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				which := p*rounds + r
				bufs[which] = make([]byte, n)
				stag, err := s.qp.PostRegMR(uint64(which), Signaled, fmrs[p], bufs[which], LocalWrite|RemoteWrite)
				if err != nil {
					errs <- err
					return
				}
				stags[p] = stag
				msg := binary.BigEndian.AppendUint32(nil, uint32(which))
				msg = binary.BigEndian.AppendUint32(msg, stag)
				msg = binary.BigEndian.AppendUint64(msg, addrOf(bufs[which]))
				if _, err := s.qp.PostSend(SendWR{Opcode: OpSend, Flags: Inline, InlineData: msg}); err != nil {
					errs <- err
					return
				}
				select {
				case <-answers[p]: // the Write has landed: it came before the answer
				case <-ctx.Done():
					errs <- ctx.Err()
					return
				}
			}
			errs <- nil
		}()
	}
	for range posters {
		require.NoError(t, <-errs)
	}
	regs, statuses := collect(t, s.scq, 1, total)
	wg.Wait()
	require.Len(t, regs, total, "each registration completes once")
	require.Equal(t, map[WCStatus]int{Success: total}, statuses)
	for which, buf := range bufs {
		requireSame(t, src.Buf()[n*which:n*which+n], buf)
	}
	for p, fmr := range fmrs {
		require.Equal(t, stags[p], fmr.RKey(), "the last registration is in force")
	}
	require.NoError(t, s.qp.Err())
	require.NoError(t, c.qp.Err())
}

// Sends, receives and fast registrations posted from their own goroutines
// while Disconnect, Close and Abort end the QP: every WR posted completes
// exactly once, done or flushed, and every post after the end flushes.
func TestConcurrentEndingAllPosts(t *testing.T) {
	checkRoutines(t)
	for round := range 3 {
		c, s := connect(t, pairOpts{})
		src := c.regMR(t, 64, LocalWrite)
		rb := c.regMR(t, 64, LocalWrite)
		dst := s.regMR(t, 64, LocalWrite|RemoteWrite)
		fmr, err := c.pd.AllocMR()
		require.NoError(t, err)
		var sends, recvs atomic.Int64
		var wg sync.WaitGroup
		posters := []func(i int) (int, error){
			func(i int) (int, error) {
				return c.qp.PostSend(SendWR{ID: uint64(i), Opcode: OpRDMAWrite, Flags: Signaled,
					SGL: []SGE{src.SGE(0, 64)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
			},
			func(i int) (int, error) {
				_, err := c.qp.PostRegMR(1<<32|uint64(i), Signaled, fmr, make([]byte, 64), LocalWrite)
				if err != nil {
					return 0, err
				}
				return 1, nil
			},
			func(i int) (int, error) {
				return c.qp.PostRecv(RecvWR{ID: 2<<32 | uint64(i), SGL: []SGE{rb.SGE(0, 64)}})
			},
		}
		for k, post := range posters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 600 {
					n, err := post(i)
					if k == 2 {
						recvs.Add(int64(n))
					} else {
						sends.Add(int64(n))
					}
					if err != nil && !errors.Is(err, ErrQueueFull) {
						panic(err)
					}
					select {
					case <-c.qp.Done():
						if i%8 == 7 {
							return // a few posts after the end
						}
					default:
						if err != nil {
							time.Sleep(100 * time.Microsecond) // full
						}
					}
				}
			}()
		}
		time.Sleep(time.Duration(round) * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		endAtOnce(t, round, func() error { return c.qp.Disconnect(ctx) }, c.qp.Close, c.qp.Abort)
		cancel()
		wg.Wait()
		waitDone(t, c.qp, peerTimeout)
		err = c.qp.Err()
		require.True(t, errors.Is(err, ErrDisconnected) || errors.Is(err, ErrClosed) || errors.Is(err, ErrAborted),
			"round %d: the first ending call decides Err: %v", round, err)
		for _, q := range []struct {
			cq     *CQ
			posted int64
		}{{c.scq, sends.Load()}, {c.rcq, recvs.Load()}} {
			seen := map[uint64]int{}
			for _, wc := range drainWC(q.cq) {
				seen[wc.ID]++
				require.Contains(t, []WCStatus{Success, WRFlushErr}, wc.Status, "round %d: %v", round, wc)
				if wc.ID>>32 == 2 {
					require.Equal(t, WRFlushErr, wc.Status, "round %d: no Send came for receive %v", round, wc)
				}
			}
			require.Len(t, seen, int(q.posted), "round %d: every posted WR completed", round)
			for id, n := range seen {
				require.Equal(t, 1, n, "round %d: WR %#x completed %d times", round, id, n)
			}
			require.NoError(t, q.cq.Err(), "round %d", round)
		}
	}
}
