package perf

// Bandwidth tests, as perftest's run_iter_bw: each QP keeps up to tx-depth
// WRs outstanding, every CQMod-th is signaled (and the last), and the loop
// polls the one CQ in batches, blocking in CQ.Wait only when it can neither
// post nor reap.
//
// Send tests and credits. iWARP has no receiver-not-ready retry: a Send
// that finds no posted receive is fatal to the connection (RFC 5040 section
// 7.1), so a sender must never have more Sends in flight than the receiver
// has receives posted. perftest does the same for iWARP (ctx.send_rcredit).
// Here:
//
//   - The receiver posts rx-depth receives, plus recvReserve for credit
//     messages, before it connects, and reposts each one as soon as it
//     polls its completion.
//   - The sender starts with rx-depth credits and spends one per Send.
//   - Every batch = ceil(rx-depth/4) data receives reposted, the receiver
//     sends a credit message: a zero-length Send with the Solicited flag,
//     worth batch credits. Reposting comes first, so credits never exceed
//     posted receives.
//   - Credit messages themselves land in the reserve: at most
//     rx-depth/batch + 1 <= 5 can be in flight unread, fewer than
//     recvReserve, and each is reposted when read.
//   - After its last data Send the sender sends an end marker, a one-octet
//     Solicited Send (it costs a credit); the receiver is done when every
//     QP's end marker has arrived. Messages on a QP arrive in order, so
//     all the data is in by then.
//
// Bidirectional send tests run both roles on each side at once.
//
// With perftest's exchange (-R) send_bw uses perftest's credits for iWARP
// instead (ctx.send_rcredit; notes in perftest_exchange.go), so that
// either side may be perftest: no credit messages and no end marker. The
// receiver posts rx-depth receives before the test and reposts each; on
// its r-th receive on a QP, whenever (r % rx-depth) % (rx-depth/3) == 0,
// it RDMA Writes r, a little-endian 32-bit word, into the credit word the
// sender advertised for the QP. The sender keeps scnt - credit word below
// rx-depth - 1 before each post, and the receiver stops after -n receives
// per QP.

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"time"

	"github.com/goiwarp/iwarp/verbs"
)

// The BW loop spins on the CQ (polling, yielding the processor) before it
// blocks in CQ.Wait, as perftest busy-polls, while the waits it sees are
// short: up to bwSpin, when its waits have averaged under bwSpinAvg.
// Spinning keeps the poster on a processor of its own. A goroutine that the
// transmit loop wakes (with a completion) runs on the transmit loop's
// processor after it (Go's runnext), and another processor takes it over
// only after microseconds, so a poster that blocks takes turns with the
// transmit loop and small messages go slower. Long waits (large messages, a
// slow link) are not spun: there spinning only burns CPU, which the runs
// measure (docs/measurements.md).
const (
	bwSpin    = 30 * time.Microsecond
	bwSpinAvg = 15 * time.Microsecond
)

// bwRun is one bandwidth measurement at one size.
type bwRun struct {
	e          *endpoint
	size       int
	op         verbs.SendOpcode
	flags      verbs.SendFlags
	sender     bool
	receiver   bool
	base       time.Time
	dur        bool
	tSample    int64 // duration mode: window of the sample, and the stop
	tEnd       int64
	tStop      int64
	stopping   bool
	sampled    uint64
	totc       int // data WRs completed, over all QPs
	tposted    []int64
	comps      []completion
	keepPosted bool // keep every post time (for the peak)
	prog       *progress

	// --run_infinitely: a row every period, from the completions since
	// the last one.
	inf     bool
	period  int64
	tPeriod int64
	cPeriod int

	// perftest's send_bw credits (-R)
	pt         bool
	creditWait bool          // a QP waits for the peer's credit word to move
	nextPeriod func(t int64) // --run_infinitely: the blocking waits' next deadline
	rFirst     int64         // receiver: the first and last receive completions
	rLast      int64
	rTotal     int
}

func (r *bwRun) now() int64 { return int64(time.Since(r.base)) }

// runBW measures bandwidth at one size. sender posts the test's operations;
// receiver takes the peer's Sends.
func (e *endpoint) runBW(ctx context.Context, size int, sender, receiver bool, prog *progress) (Report, error) {
	p := e.p
	r := &bwRun{e: e, size: size, sender: sender, receiver: receiver, dur: p.Duration > 0, prog: prog}
	switch p.Test.verb() {
	case verbWrite:
		r.op = verbs.OpRDMAWrite
	case verbRead:
		r.op = verbs.OpRDMARead
	case verbAtomic:
		r.op = verbs.OpAtomicFetchAdd
		if p.Atomic == CmpAndSwap {
			r.op = verbs.OpAtomicCmpSwap
		}
	default:
		r.op = verbs.OpSend
	}
	send := r.op == verbs.OpSend
	r.pt = send && p.Perftest
	if r.pt && sender {
		// perftest zeroes its credit words before each size (-a): the
		// peer counts its receives from zero again.
		for i := range e.qps {
			storeCredit(e.credit, 4*i, 0)
		}
	}
	if size <= p.Inline && !p.Test.verb().oneSided() {
		r.flags |= verbs.Inline
	}
	limit := uint64(p.Iters)
	r.inf = p.Infinite && sender
	if r.inf {
		r.period = int64(p.Duration)
		r.tSample, r.tEnd, r.tStop = 0, math.MaxInt64, math.MaxInt64
		limit = math.MaxUint64
	} else if r.dur {
		limit = math.MaxUint64
		m := p.margin()
		r.tSample, r.tEnd, r.tStop = int64(m), int64(p.Duration-m), int64(p.Duration)
	} else if sender {
		r.keepPosted = p.peak()
		n := 1
		if r.keepPosted {
			n = p.Iters * len(e.qps)
		}
		r.tposted = make([]int64, 0, n)
	}
	for _, q := range e.qps {
		q.scnt, q.ccnt, q.limit = 0, 0, limit
		q.endPosted = !sender || !send || r.pt
		q.endDone = q.endPosted
		q.endSeen = !receiver
		q.rcnt, q.credSent, q.credDue, q.credHigh = 0, 0, 0, 0
		q.warmed = 0
		if !sender {
			q.limit = 0
			continue
		}
		q.sge = verbs.SGE{Addr: q.mr.Addr(), Length: uint32(size), LKey: q.mr.LKey()}
		for j := range q.batch {
			wr := &q.batch[j]
			*wr = verbs.SendWR{Opcode: r.op, SGL: []verbs.SGE{q.sge}}
			if r.op != verbs.OpSend {
				wr.RemoteAddr, wr.RKey = q.remote.Addr, q.remote.RKey
			}
			// perftest's ATOMIC_ADD_VALUE and ATOMIC_SWAP_VALUE.
			wr.CompareAdd, wr.Swap = atomicAdd, atomicSwap
			if r.flags&verbs.Inline != 0 {
				wr.SGL, wr.InlineData = nil, q.local[:size]
			}
		}
	}

	if sender && p.WarmUp && !send {
		if err := r.warmUp(ctx); err != nil {
			return Report{}, err
		}
	}
	r.base = time.Now()
	waitCtx := ctx // blocking waits end at the stop time too
	if r.inf {
		// and at the end of each period, so that a stalled run shows rows
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithDeadline(ctx, r.base.Add(time.Duration(r.period)))
		defer func() { cancel() }()
		r.nextPeriod = func(t int64) {
			cancel()
			waitCtx, cancel = context.WithDeadline(ctx, r.base.Add(time.Duration(t+r.period)))
		}
	} else if r.dur {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithDeadline(ctx, r.base.Add(p.Duration))
		defer cancel()
	}
	// When the CQ went idle, and the average of the waits since (an EWMA
	// over about 8), in ns.
	idleSince, avgIdle := int64(-1), int64(0)
	for {
		if err := ctx.Err(); err != nil {
			if r.inf {
				// The end of an infinite run: what it moved in all.
				return bwDurReport(size, uint64(r.totc), time.Since(r.base)), nil
			}
			return Report{}, err
		}
		t := r.now()
		if r.inf && t-r.tPeriod >= r.period {
			if err := e.onPeriod(bwDurReport(size, uint64(r.totc-r.cPeriod), time.Duration(t-r.tPeriod))); err != nil {
				return Report{}, err
			}
			r.tPeriod, r.cPeriod = t, r.totc
			r.nextPeriod(t)
		}
		if r.dur && !r.stopping && t >= r.tStop {
			r.stop()
			waitCtx = ctx
		}
		worked := false
		if sender {
			n, err := r.post(t)
			if err != nil {
				return Report{}, err
			}
			worked = n > 0
		}
		if send {
			n, err := r.credit()
			if err != nil {
				return Report{}, err
			}
			worked = worked || n > 0
		}
		k := e.cq.Poll(e.wcs)
		if k > 0 {
			if err := r.reap(e.wcs[:k], r.now()); err != nil {
				return Report{}, err
			}
			worked = true
		}
		if r.done() {
			break
		}
		if worked {
			if idleSince >= 0 {
				avgIdle += (t - idleSince - avgIdle) / 8
				idleSince = -1
			}
			continue
		}
		if idleSince < 0 {
			idleSince = t
		}
		if !p.Events && avgIdle < int64(bwSpinAvg) && t-idleSince < int64(bwSpin) {
			runtime.Gosched()
			continue
		}
		if r.creditWait {
			// perftest's credits arrive as RDMA Writes, which complete
			// nothing here: poll the credit word. (Spinning instead, with
			// Gosched, measured no faster over loopback, and takes the
			// processor the QPs' receive loops need.)
			//
			// A QP that ended (the receiver's Terminate) may leave no WR
			// to flush: without this look the run would wait for its
			// exchange timeout and blame the peer's silence.
			for _, q := range e.qps {
				select {
				case <-q.qp.Done():
					return Report{}, qpFailure(q.qp, errors.New("waiting for the receiver's credits"))
				default:
				}
			}
			time.Sleep(20 * time.Microsecond)
			continue
		}
		if err := e.cq.Wait(waitCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			if ctx.Err() != nil {
				continue // the top of the loop returns
			}
			return Report{}, err
		}
	}
	if receiver {
		// Every receive posted again before the next size's barrier, as
		// perftest posts rx-depth of them before each: the peer may send
		// at once.
		for _, q := range e.qps {
			if len(q.reposts) > 0 {
				k, err := e.postRecv(q, q.reposts...)
				q.reposts = q.reposts[:copy(q.reposts, q.reposts[k:])]
				if err != nil {
					return Report{}, qpFailure(q.qp, err)
				}
			}
		}
	}
	if !sender {
		if r.pt && r.rTotal > 0 {
			// perftest's receiver reports its own: first to last receive,
			// no peak.
			return bwReport(size, r.rTotal, []int64{r.rFirst}, []completion{{r.rTotal - 1, r.rLast}}, false), nil
		}
		return Report{Kind: kindBW, Size: size}, nil
	}
	if r.dur {
		return bwDurReport(size, r.sampled, time.Duration(r.tEnd-r.tSample)), nil
	}
	return bwReport(size, p.Iters*len(e.qps), r.tposted, r.comps, r.keepPosted), nil
}

// stop ends duration mode's posting: one more WR on each QP whose last one
// was unsignaled, so that a completion covers it.
func (r *bwRun) stop() {
	r.stopping = true
	mod := uint64(r.e.p.CQMod)
	for _, q := range r.e.qps {
		q.limit = q.scnt
		if q.scnt > 0 && (q.scnt-1)%mod != mod-1 {
			q.limit++
		}
	}
}

// post posts what the window, the credits and the limit allow on each QP.
func (r *bwRun) post(t int64) (int, error) {
	p := r.e.p
	send := r.op == verbs.OpSend
	mod := uint64(p.CQMod)
	total := 0
	r.creditWait = false
	for _, q := range r.e.qps {
		if q.scnt < q.limit {
			list := uint64(postBatch)
			if p.PostList > 1 {
				list = uint64(p.PostList) // one list a PostSend, as perftest
			}
			avail := min(q.limit-q.scnt, uint64(p.TxDepth)-(q.scnt-q.ccnt), list)
			switch {
			case r.pt:
				w := r.window(q)
				if w == 0 {
					r.creditWait = true
				}
				avail = min(avail, w)
			case send:
				avail = min(avail, uint64(max(q.credits, 0)))
			}
			if p.PostList > 1 && avail < list && avail < q.limit-q.scnt {
				avail = 0 // whole lists only, but for the last
				if r.pt && r.window(q) < list {
					r.creditWait = true // the credit word, not a completion, makes room
				}
			}
			if avail > 0 {
				for j := range avail {
					seq := q.scnt + j
					wr := &q.batch[j]
					wr.ID = wrID(idData, q.i, seq)
					wr.Flags = r.flags
					if seq%mod == mod-1 || seq == q.limit-1 {
						wr.Flags |= verbs.Signaled
					}
				}
				if testPostHook != nil {
					testPostHook(int(avail))
				}
				n, err := q.qp.PostSend(q.batch[:avail]...)
				if err != nil && !errors.Is(err, verbs.ErrQueueFull) {
					return total, qpFailure(q.qp, err)
				}
				if r.keepPosted || len(r.tposted) == 0 && !r.dur {
					for range n {
						r.tposted = append(r.tposted, t)
					}
				}
				q.scnt += uint64(n)
				total += n
				if send && !r.pt {
					q.credits -= n
				}
			}
		}
		if send && q.scnt == q.limit && !q.endPosted && q.credits > 0 {
			wr := verbs.SendWR{ID: wrID(idEnd, q.i, 0), Opcode: verbs.OpSend,
				Flags: verbs.Signaled | verbs.Solicited | verbs.Inline, InlineData: endMarker[:]}
			if _, err := q.qp.PostSend(wr); err != nil {
				if !errors.Is(err, verbs.ErrQueueFull) {
					return total, qpFailure(q.qp, err)
				}
			} else {
				q.credits--
				q.endPosted = true
				total++
			}
		}
	}
	return total, nil
}

var endMarker = [1]byte{'E'}

// testPostHook, set by tests only, sees the length of every list of data
// WRs post hands PostSend.
var testPostHook func(n int)

// testRepostHook, set by tests only, runs before a receiver posts its
// receives again: a test slows the receiver with it.
var testRepostHook func()

// window is how many Sends perftest's credits let q post now: the sender
// keeps fewer than rx-depth Sends beyond the receiver's credit word.
//
// With --use-srq the receiver's receives are shared by every QP
// (perftest's server posts rx-depth/QPs of them for each into one SRQ,
// srqShare in all), so the bound is on the sum over the QPs: perftest's
// own client keeps only the bound per QP and, with two QPs, overruns a
// slow receiver's SRQ (siw then ends the connection: a run in the VM saw
// 308 of 600 Sends arrive).
func (r *bwRun) window(q *qpEnd) uint64 {
	rx := uint64(r.e.p.RxDepth)
	own := r.outstanding(q)
	if own+1 >= rx {
		return 0
	}
	w := rx - 1 - own
	if r.e.p.UseSRQ {
		all := uint64(0)
		for _, o := range r.e.qps {
			all += r.outstanding(o)
		}
		total := uint64(srqShare(r.e.p))
		if all+1 >= total {
			return 0
		}
		w = min(w, total-1-all)
	}
	return w
}

// srqShare is how many receives perftest's server puts into its SRQ: its
// rx-depth divided among the QPs, rounded down, for each.
func srqShare(p *Params) int { return p.RxDepth / max(p.QPs, 1) * max(p.QPs, 1) }

// outstanding is how many of q's Sends the receiver has not yet credited.
func (r *bwRun) outstanding(q *qpEnd) uint64 {
	// Only counts the receiver can have written: no more than we sent, and
	// one of its credit points (which also rejects a word caught half
	// written).
	rx := uint64(r.e.p.RxDepth)
	if c := loadCredit(r.e.credit, 4*q.i); c > q.credHigh && c <= q.scnt && (c%rx)%max(rx/3, 1) == 0 {
		q.credHigh = c
	}
	return q.scnt - q.credHigh
}

// credit reposts the receives reaped and sends the credit messages due.
func (r *bwRun) credit() (int, error) {
	n := 0
	for _, q := range r.e.qps {
		if len(q.reposts) > 0 {
			if testRepostHook != nil {
				testRepostHook()
			}
			k, err := r.e.postRecv(q, q.reposts...)
			q.reposts = q.reposts[:copy(q.reposts, q.reposts[k:])]
			if err != nil {
				return n, qpFailure(q.qp, err)
			}
		}
		if r.pt {
			// perftest's credit: the count, written once its receives are
			// reposted (a later count supersedes one not yet sent).
			if q.credDue > q.credSent && len(q.reposts) == 0 {
				var v [4]byte
				binary.LittleEndian.PutUint32(v[:], uint32(q.credDue))
				wr := verbs.SendWR{ID: wrID(idCredit, q.i, 0), Opcode: verbs.OpRDMAWrite, Flags: verbs.Inline,
					InlineData: v[:], RemoteAddr: q.remote.Addr, RKey: q.remote.RKey}
				if _, err := q.qp.PostSend(wr); err != nil {
					if !errors.Is(err, verbs.ErrQueueFull) {
						return n, qpFailure(q.qp, err)
					}
				} else {
					q.credSent = q.credDue
					n++
				}
			}
			continue
		}
		for q.grant >= r.e.batch {
			wr := verbs.SendWR{ID: wrID(idCredit, q.i, 0), Opcode: verbs.OpSend, Flags: verbs.Solicited}
			if _, err := q.qp.PostSend(wr); err != nil {
				if errors.Is(err, verbs.ErrQueueFull) {
					break // the send queue drains; try again on the next round
				}
				return n, qpFailure(q.qp, err)
			}
			q.grant -= r.e.batch
			n++
		}
	}
	return n, nil
}

// reap accounts for completions polled at time t.
func (r *bwRun) reap(wcs []verbs.WC, t int64) error {
	e := r.e
	var done uint64
	for i := range wcs {
		wc := &wcs[i]
		if err := e.check(wc); err != nil {
			return err
		}
		q := e.qpOf(wc)
		if wc.Opcode == verbs.WCRecv && r.pt {
			q.reposts = append(q.reposts, e.recvWR(q, wc))
			q.rcnt++
			rx := uint64(e.p.RxDepth)
			if (q.rcnt%rx)%max(rx/3, 1) == 0 {
				q.credDue = q.rcnt
			}
			if r.rTotal == 0 {
				r.rFirst = t
			}
			r.rTotal++
			r.rLast = t
			done++
			if q.rcnt >= uint64(e.p.Iters) {
				q.endSeen = true
			}
			continue
		}
		if wc.Opcode == verbs.WCRecv {
			q.reposts = append(q.reposts, e.recvWR(q, wc))
			switch {
			case wc.Flags&verbs.SolicitedEvent == 0:
				q.grant++ // data: its receive is reposted before we grant it
			case wc.ByteLen == 0:
				q.credits += e.batch
			default:
				q.endSeen = true
				q.grant++ // the end marker took a credit too
			}
			continue
		}
		switch wc.ID & idKind {
		case idEnd:
			q.endDone = true
		case idData:
			seq := wc.ID & idSeq
			fill := int(seq + 1 - q.ccnt)
			q.ccnt = seq + 1
			r.totc += fill
			done += uint64(fill)
			if r.dur {
				if t >= r.tSample && t < r.tEnd {
					r.sampled += uint64(fill)
				}
			} else if r.keepPosted || len(r.comps) == 0 {
				r.comps = append(r.comps, completion{idx: r.totc - 1, t: t})
			} else {
				r.comps[0] = completion{idx: r.totc - 1, t: t}
			}
		}
	}
	r.prog.add(done, r.size)
	return nil
}

// done reports whether both roles are finished on every QP.
func (r *bwRun) done() bool {
	for _, q := range r.e.qps {
		if q.ccnt < q.limit || !q.endDone || !q.endSeen {
			return false
		}
	}
	return true
}

// loadCredit reads the credit word at off in mr that the peer's RDMA
// Writes update, as perftest polls it: the peer writes it again and again
// while we read, with no message between, so the reads race with the
// placements in the Go memory model's terms, as perftest's with a NIC's
// DMA (an aligned 4-octet word, never torn on the platforms we run on).
// Only these two functions touch it from outside the QP. A latency test's
// polling, where the peer waits for our answer, is race-free (peekByte).
//
//go:norace
//go:noinline
func loadCredit(mr *verbs.MR, off int) uint64 {
	return uint64(binary.LittleEndian.Uint32(mr.Buf()[off:]))
}

//go:norace
//go:noinline
func storeCredit(mr *verbs.MR, off int, v uint32) {
	binary.LittleEndian.PutUint32(mr.Buf()[off:], v)
}
