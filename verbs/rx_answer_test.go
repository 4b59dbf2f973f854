package verbs

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/tcpx"
	"github.com/stretchr/testify/require"
)

// TestRxAnswer: a Read of up to inlineTxMax at queue depth 1 is answered by the
// responder's receive loop (no hand-off to its transmit loop), a large one
// by the transmit loop, and both land whole.
func TestRxAnswer(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	defer c.qp.Close()
	defer s.qp.Close()
	src := s.regFilled(t, 256<<10, RemoteRead, 7)
	dst := c.regMR(t, 256<<10, LocalWrite)
	read := func(off, n int) {
		t.Helper()
		_, err := c.qp.PostSend(SendWR{Opcode: OpRDMARead, Flags: Signaled,
			SGL: []SGE{dst.SGE(off, n)}, RemoteAddr: src.Addr() + uint64(off), RKey: src.RKey()})
		require.NoError(t, err)
		waitOK(t, c.scq, WCRDMARead)
		requireSame(t, src.Buf()[off:off+n], dst.Buf()[off:off+n])
	}
	const rounds = 200
	before := s.qp.txStats.answered.Load() // the peer-to-peer start-up's Read RTR may count
	for i := range rounds {
		read(i*64, 64)
	}
	answered := s.qp.txStats.answered.Load() - before
	t.Logf("%d of %d small Reads answered by the receive loop", answered, rounds)
	// Each Request acknowledges the Response before it, so the send queue
	// is empty when it arrives; on a loaded machine a delayed ACK may leave
	// a few to the transmit loop.
	require.Greater(t, answered, uint64(rounds/2))
	// The path allocates nothing, on either side.
	wr := []SendWR{{Opcode: OpRDMARead, Flags: Signaled, SGL: []SGE{dst.SGE(0, 64)}, RemoteAddr: src.Addr(), RKey: src.RKey()}}
	var wc [1]WC
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := c.qp.PostSend(wr...); err != nil {
			panic(err)
		}
		for c.scq.Poll(wc[:]) == 0 {
			c.scq.Wait(context.Background())
		}
	})
	if !raceEnabled {
		require.Zero(t, allocs, "allocations per small Read, both sides")
	}
	answered = s.qp.txStats.answered.Load()
	read(0, inlineTxMax+1)
	read(0, 256<<10)
	require.Equal(t, answered, s.qp.txStats.answered.Load(), "a large Read is the transmit loop's")
}

// smallSendBuffers fills send queues: 8 KiB send buffers. The receive
// buffers stay at 64 KiB: with 8 KiB ones, Linux on loopback offered a
// window (a multiple of the 6060-octet receive MSS it had seen) below the
// sender's 7070-octet segments, so the sender moved one window-sized
// zero-window probe every 200 ms and a test of 16 MiB each way stalled for
// its 20 s (1 run in 20-40 under the race detector).
var smallSendBuffers = tcpx.Config{SendBuffer: 8 << 10, RecvBuffer: 64 << 10}

// TestRxAnswerNeverBlocks: both ends Read small pieces of each other at
// depth while each floods the other with large Writes through small socket
// buffers, so that send queues are full most of the time. A receive loop
// that wrote into a full send queue would wait for a peer that waits for
// it; everything must complete.
func TestRxAnswerNeverBlocks(t *testing.T) {
	checkRoutines(t)
	small := ConnConfig{TCP: smallSendBuffers}
	c, s := connect(t, pairOpts{client: small, server: small, cap: QPCap{MaxSendWR: 64, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}, ird: 16, ord: 16})
	defer c.qp.Close()
	defer s.qp.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, p := range [][2]*side{{c, s}, {s, c}} {
		me, peer := p[0], p[1]
		src := peer.regFilled(t, 64<<10, RemoteRead|RemoteWrite|LocalWrite, 3)
		dst := me.regMR(t, 64<<10, LocalWrite)
		big := me.regFilled(t, 1<<20, 0, 5)
		wg.Add(1)
		go func() {
			defer wg.Done()
			const reads, writes, depth, size = 2000, 256, 16, 2000
			posted, done, wposted := 0, 0, 0
			var wc [16]WC
			for done < reads+writes {
				for posted < reads && posted-done < depth {
					off := (posted * size) % (64<<10 - size)
					if _, err := me.qp.PostSend(SendWR{ID: 1, Opcode: OpRDMARead, Flags: Signaled,
						SGL: []SGE{dst.SGE(off, size)}, RemoteAddr: src.Addr() + uint64(off), RKey: src.RKey()}); err != nil {
						break
					}
					posted++
				}
				if wposted < writes {
					if _, err := me.qp.PostSend(SendWR{ID: 2, Opcode: OpRDMAWrite, Flags: Signaled,
						SGL: []SGE{big.SGE(0, 64<<10)}, RemoteAddr: src.Addr(), RKey: src.RKey()}); err == nil {
						wposted++
					}
				}
				n, err := me.scq.PollWait(ctx, wc[:])
				if err != nil {
					t.Errorf("%d of %d Reads, %d Writes done: %v (QP: %v)", done, reads, wposted, err, me.qp.Err())
					return
				}
				for _, w := range wc[:n] {
					if w.Status != Success {
						t.Errorf("completion %v", w)
						return
					}
					done++
				}
			}
		}()
	}
	wg.Wait()
	ca, sa := c.qp.txStats.answered.Load(), s.qp.txStats.answered.Load()
	t.Logf("Responses sent by the receive loops: client %d, server %d (of 2000 each)", ca, sa)
	// Both ways were taken: the test reached the receive loop's path while
	// the send queues were full.
	require.Positive(t, ca+sa)
	require.Less(t, ca+sa, uint64(4000))
}
