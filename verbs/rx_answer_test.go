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

// TestRxAnswerBurst: a burst of small Reads that reaches the responder in
// one piece is answered by its receive loop in one write once the burst is
// read, not in one write per Read (TCP's data segments tell). A large Read
// in the middle of a second burst goes to the transmit loop, and the
// responses keep their order: every Read lands whole and completes in order.
func TestRxAnswerBurst(t *testing.T) {
	checkRoutines(t)
	const burst = 64
	c, s := connect(t, pairOpts{ird: 2 * burst, ord: 2 * burst})
	defer c.qp.Close()
	defer s.qp.Close()
	const size = 64
	big := inlineTxMax + 1
	src := s.regFilled(t, 2*burst*size+big, RemoteRead, 11)
	dst := c.regMR(t, 2*burst*size+big, LocalWrite)
	read := func(id uint64, off, n int) SendWR {
		return SendWR{ID: id, Opcode: OpRDMARead, Flags: Signaled, SGL: []SGE{dst.SGE(off, n)},
			RemoteAddr: src.Addr() + uint64(off), RKey: src.RKey()}
	}
	run := func(wrs []SendWR) {
		t.Helper()
		n, err := c.qp.PostSend(wrs...)
		require.NoError(t, err)
		require.Equal(t, len(wrs), n)
		for _, w := range wrs {
			wc := waitOK(t, c.scq, WCRDMARead)
			require.Equal(t, w.ID, wc.ID, "Reads complete in order")
		}
	}

	// The client's first Read goes out alone (its send queue was idle); the
	// rest of the burst follows in one write, as the transmit loop takes it.
	var wrs []SendWR
	for i := range burst {
		wrs = append(wrs, read(uint64(i), i*size, size))
	}
	before, err := s.qp.TCPInfo()
	require.NoError(t, err)
	run(wrs)
	after, err := s.qp.TCPInfo()
	require.NoError(t, err)
	segs := after.DataSegsOut - before.DataSegsOut
	in := after.DataSegsIn - before.DataSegsIn
	t.Logf("%d small Reads answered in %d TCP segments, to Requests that came in %d", burst, segs, in)
	// A write for each piece of the burst at most (one or two pieces
	// unless the machine is loaded), not one per Read.
	require.LessOrEqual(t, segs, max(in+2, burst/8), "about one write per Read")

	// Small, large, small: the large one is the transmit loop's, and the
	// small ones after it wait for it.
	wrs = wrs[:0]
	for i := range burst {
		off := burst*size + i*size
		wrs = append(wrs, read(uint64(burst+i), off, size))
		if i == burst/2 {
			wrs = append(wrs, read(1<<20, 2*burst*size, big))
		}
	}
	run(wrs)
	requireSame(t, src.Buf(), dst.Buf())
}
