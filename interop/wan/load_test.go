//go:build netns

package wan

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const (
	loadRegion = 64 << 10 // largest message of the load test
	loadMsg    = 16       // Send payload: iteration, length, CRC32C
)

// loadPair is one connection of the load test and its memory.
type loadPair struct {
	idx  int
	c, s *end
	src  *verbs.MR // client: what it writes
	sink *verbs.MR // client: where its Reads land
	cmsg *verbs.MR // client: the server's replies
	reg  *verbs.MR // server: the Writes' target, the Reads' source
	smsg *verbs.MR // server: the client's Sends

	iters atomic.Int64
	bytes atomic.Int64
}

// Test 5: many QPs at once (WAN_QPS, default 64; 256 works) on the WAN
// path, each running Writes, Sends and Reads with checked data for
// WAN_LOAD_TIME (default 10 s; 60 s works). It reports the heap and stack
// each QP costs and fails on bad data, a failed QP, a goroutine or
// descriptor left behind, or QP memory that is not given back.
//
// One iteration of a pair: the client fills a message of random length
// (1 octet to 64 KiB) with fresh random data, RDMA-Writes it to the
// server, then Sends {iteration, length, CRC32C}, then RDMA-Reads the
// region back, all posted at once. The Send arrives after the Write is
// placed (RDMAP ordering), so the server checks the CRC of its region and
// Sends back {iteration, its CRC}; the Read comes back after the Write
// too, and the client compares it octet by octet.
func TestLoad(t *testing.T) {
	checkRoutines(t)
	nqp := envInt("WAN_QPS", 64)
	dur := envDuration("WAN_LOAD_TIME", 10*time.Second)
	n := impairedNet(t)
	require.NoError(t, n.Impair(wanProfile))
	t.Logf("%s; %d QP pairs for %v", n.Describe(), nqp, dur)
	fds := fdCount(t)

	// One device per side, as one process per side would have.
	cs, ss := newSide(), newSide()
	o := qpOpts{cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: loadMsg},
		ird: 2, ord: 2, cqe: 16}
	cfg := verbs.ConnConfig{}
	ln := listen(t, n, ss, cfg)
	var ms0, ms1 runtime.MemStats
	heapInuse()
	runtime.ReadMemStats(&ms0)
	g0 := runtime.NumGoroutine()

	// The QPs are connected 16 at a time: one at a time, 50 ms start-ups
	// add up. The client's index in the MPA private data pairs the QPs up.
	holder := &struct{ pairs []*loadPair }{pairs: make([]*loadPair, nqp)}
	t.Cleanup(func() {
		for _, p := range holder.pairs {
			if p != nil {
				p.c.qp.Close()
				p.s.qp.Close()
			}
		}
	})
	for i := range holder.pairs {
		holder.pairs[i] = &loadPair{idx: i, c: cs.newEnd(t, o), s: ss.newEnd(t, o)}
	}
	t0 := time.Now()
	connectAll(t, n, ln, holder.pairs)
	require.NoError(t, ln.Close())
	setup := time.Since(t0)
	heapInuse()
	runtime.ReadMemStats(&ms1)
	g1 := runtime.NumGoroutine()
	nq := uint64(2 * nqp)
	heapPerQP := (ms1.HeapInuse - ms0.HeapInuse) / nq
	stackPerQP := (ms1.StackInuse - ms0.StackInuse) / nq
	t.Logf("%d pairs connected in %v; per idle QP (both ends count): heap %d B, stacks %d B, %.1f goroutines",
		nqp, setup.Round(time.Millisecond), heapPerQP, stackPerQP, float64(g1-g0)/float64(nq))

	for _, p := range holder.pairs {
		p.src = p.c.regMR(t, loadRegion, 0)
		p.sink = p.c.regMR(t, loadRegion, verbs.LocalWrite)
		p.cmsg = p.c.regMR(t, loadMsg, verbs.LocalWrite)
		p.reg = p.s.regMR(t, loadRegion, verbs.LocalWrite|verbs.RemoteWrite|verbs.RemoteRead)
		p.smsg = p.s.regMR(t, loadMsg, verbs.LocalWrite)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur+time.Minute)
	defer cancel()
	stop := time.Now().Add(dur)
	errs := make(chan error, 2*nqp)
	var wg, clients sync.WaitGroup
	for _, p := range holder.pairs {
		wg.Add(2)
		clients.Add(1)
		go func() { defer wg.Done(); defer clients.Done(); errs <- p.client(ctx, stop) }()
		go func() { defer wg.Done(); errs <- p.server(ctx) }()
	}
	clients.Wait()
	cancel() // the servers wait for a next Send that will not come
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	}
	var iters, octets int64
	minIt, maxIt := int64(1<<62), int64(0)
	for _, p := range holder.pairs {
		k := p.iters.Load()
		iters += k
		octets += p.bytes.Load()
		minIt, maxIt = min(minIt, k), max(maxIt, k)
	}
	require.Positive(t, minIt, "a QP pair got nothing done")
	var ms2 runtime.MemStats
	heapInuse()
	runtime.ReadMemStats(&ms2)
	t.Logf("%d iterations (Write+Send+Read+Send each) in %v: %.0f/s, per pair %d–%d; %s written and read back = %.1f Mbit/s each way",
		iters, dur, float64(iters)/dur.Seconds(), minIt, maxIt, mib(uint64(octets)), float64(octets)*8/dur.Seconds()/1e6)
	regd := uint64(nqp) * (3*loadRegion + 2*loadMsg)
	active := (int64(ms2.HeapInuse) - int64(ms0.HeapInuse) - int64(regd)) / int64(nq)
	t.Logf("heap in use: %s before, %s connected, %s after the run with %s registered: %d B per QP once busy, registered buffers aside (read and write buffers grow with traffic)",
		mib(ms0.HeapInuse), mib(ms1.HeapInuse), mib(ms2.HeapInuse), mib(regd), active)

	for _, p := range holder.pairs {
		require.NoError(t, p.c.qp.Close())
		require.NoError(t, p.s.qp.Close())
		require.Equal(t, verbs.StateError, p.c.qp.State())
	}
	holder.pairs = nil
	cs, ss = nil, nil
	var ms3 runtime.MemStats
	heapInuse()
	runtime.ReadMemStats(&ms3)
	t.Logf("heap in use after Close: %s (%+d KiB against before)", mib(ms3.HeapInuse), (int64(ms3.HeapInuse)-int64(ms0.HeapInuse))/1024)
	// The QPs' memory must come back. Bound: a quarter of what they took
	// plus 4 MiB of slack for the runtime's own caches; a leak of the QPs
	// (or of their registered buffers, 192 KiB a pair) exceeds it.
	took := int64(ms1.HeapInuse) - int64(ms0.HeapInuse)
	require.Less(t, int64(ms3.HeapInuse)-int64(ms0.HeapInuse), took/4+4<<20, "QP memory not released")
	requireFDs(t, fds)
	requireNoSockets(t, n.A)
	requireNoSockets(t, n.B)
	t.Logf("link: %s", n.Stats())
}

// connectAll connects every pair, 16 start-ups at a time.
func connectAll(t *testing.T, n *Net, ln *verbs.Listener, pairs []*loadPair) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	accepted := make(chan error, 1)
	go func() {
		for range pairs {
			req, err := ln.GetRequest(ctx)
			if err == nil && len(req.PrivateData) != 4 {
				err = fmt.Errorf("private data %x", req.PrivateData)
			}
			if err == nil {
				i := binary.BigEndian.Uint32(req.PrivateData)
				if int(i) >= len(pairs) {
					err = fmt.Errorf("no pair %d", i)
				} else {
					err = req.Accept(ctx, pairs[i].s.qp, nil)
				}
			}
			if err != nil {
				accepted <- err
				return
			}
		}
		accepted <- nil
	}()
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	errs := make(chan error, len(pairs))
	for _, p := range pairs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs <- n.A.Do(func() error {
				err := p.c.qp.Dial(ctx, "tcp4", ln.Addr().String(), verbs.ConnConfig{PrivateData: binary.BigEndian.AppendUint32(nil, uint32(p.idx))})
				return err
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, <-accepted)
}

// next waits for one completion on cq and checks it.
func next(ctx context.Context, cq *verbs.CQ, op verbs.WCOpcode) (verbs.WC, error) {
	var wc [1]verbs.WC
	for cq.Poll(wc[:]) == 0 {
		if err := cq.Wait(ctx); err != nil {
			return verbs.WC{}, err
		}
	}
	if wc[0].Status != verbs.Success || wc[0].Opcode != op {
		var qerr error
		if wc[0].QP != nil {
			qerr = wc[0].QP.Err()
		}
		return wc[0], fmt.Errorf("completion %v, want %v (QP: %v)", wc[0], op, qerr)
	}
	return wc[0], nil
}

func (p *loadPair) client(ctx context.Context, stop time.Time) error {
	rng := rand.New(rand.NewPCG(uint64(p.idx), 42))
	q := p.c.qp
	for k := uint64(1); time.Now().Before(stop); k++ {
		size := 1 + rng.IntN(loadRegion)
		data := p.src.Buf()[:size]
		fillRandom(data, uint64(p.idx)<<32|k)
		msg := binary.BigEndian.AppendUint64(nil, k)
		msg = binary.BigEndian.AppendUint32(msg, uint32(size))
		msg = binary.BigEndian.AppendUint32(msg, crc32.Checksum(data, castagnoli))
		if _, err := q.PostRecv(verbs.RecvWR{ID: k, SGL: []verbs.SGE{p.cmsg.SGE(0, loadMsg)}}); err != nil {
			return fmt.Errorf("pair %d: %w", p.idx, err)
		}
		_, err := q.PostSend(
			verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{p.src.SGE(0, size)},
				RemoteAddr: p.reg.Addr(), RKey: p.reg.RKey()},
			verbs.SendWR{ID: 2, Opcode: verbs.OpSend, Flags: verbs.Inline, InlineData: msg},
			verbs.SendWR{ID: 3, Opcode: verbs.OpRDMARead, Flags: verbs.Signaled, SGL: []verbs.SGE{p.sink.SGE(0, size)},
				RemoteAddr: p.reg.Addr(), RKey: p.reg.RKey()},
		)
		if err != nil {
			return fmt.Errorf("pair %d: %w", p.idx, err)
		}
		if _, err := next(ctx, p.c.scq, verbs.WCRDMARead); err != nil {
			return fmt.Errorf("pair %d iteration %d: %w", p.idx, k, err)
		}
		if !bytes.Equal(data, p.sink.Buf()[:size]) {
			return fmt.Errorf("pair %d iteration %d: Read of %d octets differs from what was written", p.idx, k, size)
		}
		wc, err := next(ctx, p.c.rcq, verbs.WCRecv)
		if err != nil {
			return fmt.Errorf("pair %d iteration %d: %w", p.idx, k, err)
		}
		reply := p.cmsg.Buf()
		if wc.ByteLen != 12 || binary.BigEndian.Uint64(reply) != k || binary.BigEndian.Uint32(reply[8:]) != binary.BigEndian.Uint32(msg[12:]) {
			return fmt.Errorf("pair %d iteration %d: server replied %x to %x", p.idx, k, reply[:wc.ByteLen], msg)
		}
		p.iters.Add(1)
		p.bytes.Add(int64(size))
	}
	return nil
}

func (p *loadPair) server(ctx context.Context) error {
	q := p.s.qp
	for k := uint64(1); ; k++ {
		if _, err := q.PostRecv(verbs.RecvWR{ID: k, SGL: []verbs.SGE{p.smsg.SGE(0, loadMsg)}}); err != nil {
			return fmt.Errorf("pair %d server: %w", p.idx, err)
		}
		wc, err := next(ctx, p.s.rcq, verbs.WCRecv)
		if err != nil {
			return fmt.Errorf("pair %d server: %w", p.idx, err)
		}
		m := p.smsg.Buf()
		it, size, sum := binary.BigEndian.Uint64(m), int(binary.BigEndian.Uint32(m[8:])), binary.BigEndian.Uint32(m[12:])
		if wc.ByteLen != loadMsg || it != k || size > loadRegion {
			return fmt.Errorf("pair %d server: message %x, want iteration %d", p.idx, m[:wc.ByteLen], k)
		}
		got := crc32.Checksum(p.reg.Buf()[:size], castagnoli)
		if got != sum {
			return fmt.Errorf("pair %d server iteration %d: Write of %d octets placed wrong data (CRC %08x, want %08x)", p.idx, k, size, got, sum)
		}
		reply := binary.BigEndian.AppendUint64(nil, k)
		reply = binary.BigEndian.AppendUint32(reply, got)
		if _, err := q.PostSend(verbs.SendWR{ID: k, Opcode: verbs.OpSend, Flags: verbs.Inline | verbs.Signaled, InlineData: reply}); err != nil {
			return fmt.Errorf("pair %d server: %w", p.idx, err)
		}
		if _, err := next(ctx, p.s.scq, verbs.WCSend); err != nil {
			return fmt.Errorf("pair %d server: %w", p.idx, err)
		}
	}
}
