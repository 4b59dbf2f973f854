package perf

// Latency tests, as perftest's run_iter_lat_write, run_iter_lat_send and
// run_iter_lat: a ping-pong of one message at a time (the client sends
// first), or one RDMA Read at a time. The samples are the times between
// successive posts, so a ping-pong sample is a round trip and is reported
// halved. The loop either runs in the QP's receive handler (drive, the
// default) or polls from its own goroutine (--lat-wait=poll).

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"runtime"
	"time"

	"github.com/goiwarp/iwarp/verbs"
)

// How many empty polls a latency loop spins (yielding the processor)
// before it blocks in CQ.Wait or, polling memory, sleeps between polls.
// Spinning, as perftest does, saves the wake-up when the peer is another
// host. With the peer on this host it starves the very goroutines that
// move the data (the "NIC" is software): with --loopback, both sides
// spinning on every P keep the Go scheduler from polling the network for
// the QPs' receive loops until sysmon does, every 10 ms; with two processes
// on one small machine, the spinners take the cores the receive loops need.
var (
	latSpin         = 100000
	latSpinLoopback = 20
)

type latRun struct {
	e        *endpoint
	q        *qpEnd
	ctx      context.Context
	waitCtx  context.Context
	base     time.Time
	deadline int64 // duration mode: stop at this time (ns since base)
	rcvd     uint64
	sdone    uint64 // data WRs completed (seq+1 of the last signaled one)
	spin     int
}

func (l *latRun) now() int64 { return int64(time.Since(l.base)) }

func (l *latRun) timeUp() bool { return l.deadline > 0 && l.now() >= l.deadline }

// latLoop is one latency loop's state: a ping-pong of messages, or one Read
// at a time. step advances it as far as it goes without waiting; a driver
// calls it again when what it waits for may have happened: the QP's receive
// handler after each FPDU (drive) or a polling goroutine (poll). A step, not
// a goroutine or a coroutine, so that resuming the loop costs a call.
type latLoop struct {
	*latRun
	v       verb
	wr      verbs.SendWR
	size    int
	n, mod  uint64
	first   bool // this side sends first
	handler bool // driven by the receive handler
	dur     bool
	prog    *progress
	tposted []int64
	gap     int64 // --latency_gap, in nanoseconds

	tSample, tEnd int64
	sampled       uint64
	// tNow is the clock as of the last post or wait (tick): one reading
	// an iteration, as tcp_lat takes, since a reading costs 50-100 ns in a
	// VM and a -D run's deadline and window need no finer time.
	tNow int64

	scnt, rcnt, lastSig uint64
	signaled            bool // WR scnt is signaled
	phase               latPhase
}

// latPhase is what a latency loop waits for.
type latPhase uint8

const (
	latRecv latPhase = iota // the peer's message rcnt+1 (unless this side sends first)
	latPost                 // room in the send queue for WR scnt
	latWC                   // WR scnt's completion
)

// runLat measures latency at one size; first says whether this side sends
// first (the client, but for perftest's write_lat the server).
func (e *endpoint) runLat(ctx context.Context, size int, client, first bool, prog *progress) (Report, error) {
	p := e.p
	q := e.qps[0]
	v := p.Test.verb()
	if v.oneSided() && !client {
		return Report{Kind: kindLat, Size: size}, nil // the server only serves the Reads or atomics
	}
	l := &latRun{e: e, q: q, ctx: ctx, waitCtx: ctx, spin: latSpin}
	switch {
	case p.Events:
		l.spin = 0 // block on the CQ at once, as a completion channel does
	case p.Loopback || sameHost(q.qp.LocalAddr(), q.qp.RemoteAddr()):
		l.spin = latSpinLoopback
	}
	s := &latLoop{latRun: l, v: v, size: size, n: uint64(p.Iters), mod: uint64(p.CQMod), first: first,
		handler: !p.LatPoll && !p.Events, dur: p.Duration > 0, prog: prog, gap: int64(p.LatencyGap) * 1000}
	if s.dur {
		s.n = math.MaxUint64
	} else {
		s.tposted = make([]int64, 0, s.n)
	}
	m := p.margin()
	s.tSample, s.tEnd = int64(m), int64(p.Duration-m)

	wr := verbs.SendWR{Flags: verbs.Signaled, SGL: []verbs.SGE{{Addr: q.mr.Addr(), Length: uint32(size), LKey: q.mr.LKey()}}}
	switch v {
	case verbWrite:
		wr.Opcode = verbs.OpRDMAWrite
		wr.RemoteAddr, wr.RKey = q.remote.Addr, q.remote.RKey
	case verbRead:
		wr.Opcode = verbs.OpRDMARead
		wr.RemoteAddr, wr.RKey = q.remote.Addr, q.remote.RKey
	case verbSend:
		wr.Opcode = verbs.OpSend
	case verbAtomic:
		wr.Opcode = verbs.OpAtomicFetchAdd
		if p.Atomic == CmpAndSwap {
			wr.Opcode = verbs.OpAtomicCmpSwap
		}
		wr.RemoteAddr, wr.RKey = q.remote.Addr, q.remote.RKey
		wr.CompareAdd, wr.Swap = atomicAdd, atomicSwap
	}
	if size <= p.Inline && !v.oneSided() {
		wr.Flags |= verbs.Inline
		wr.SGL, wr.InlineData = nil, q.local[:size]
	}
	s.wr = wr

	if s.dur {
		l.deadline = int64(p.Duration)
		var cancel context.CancelFunc
		l.waitCtx, cancel = context.WithDeadline(ctx, time.Now().Add(p.Duration))
		defer cancel()
	}
	if v.oneSided() {
		s.rcnt = s.n // nothing comes back but the responses
	}
	l.base = time.Now()
	var err error
	if s.handler {
		err = s.drive()
		if err == nil {
			// The completions of our last Writes or Sends: the transmit
			// goroutine queues them, and does not call the handler.
			_, err = l.pollUntil(func() bool { return l.sdone >= s.lastSig })
		}
	} else {
		err = s.poll()
	}
	if err != nil {
		return Report{}, err
	}
	q.scnt = s.scnt // what checkAtomics expects
	rtt := 2.0
	if v.oneSided() {
		rtt = 1
	}
	if s.dur {
		return latDurReport(size, s.sampled, time.Duration(s.tEnd-s.tSample), rtt), nil
	}
	return latReport(size, s.tposted, rtt).withSamples(p, s.tposted, rtt), nil
}

// timeUp reports whether a -D run's time is over, as of tNow.
func (s *latLoop) timeUp() bool { return s.deadline > 0 && s.tNow >= s.deadline }

// tick reads the clock while the loop waits.
func (s *latLoop) tick() {
	if s.dur {
		s.tNow = s.now()
	}
}

// step runs the loop until it must wait. done: the loop is over (err says
// why, if not by its count or its duration); moved: it got somewhere.
func (s *latLoop) step() (done, moved bool, err error) {
	for {
		switch s.phase {
		case latRecv:
			if s.scnt >= s.n && s.rcnt >= s.n || s.timeUp() {
				return true, moved, nil
			}
			if s.rcnt < s.n && !(s.first && s.scnt == 0) {
				ok, err := s.arrived()
				if err != nil {
					return true, moved, err
				}
				if !ok {
					return false, moved, nil
				}
				s.rcnt++
				moved = true
				if s.v == verbSend {
					s.sample()
				}
			}
			if s.scnt < s.n {
				s.next()
				s.phase = latPost
			}
		case latPost:
			if _, err := s.q.qp.PostSend(s.wr); err != nil {
				if errors.Is(err, verbs.ErrQueueFull) {
					// Unsignaled Sends leave the queue when the transmit
					// goroutine has handed them to TCP.
					return s.timeUp(), moved, nil
				}
				return true, moved, qpFailure(s.q.qp, err)
			}
			moved = true
			if s.signaled {
				s.lastSig = s.scnt
			}
			s.phase = latRecv
			if s.handler && !s.v.oneSided() {
				// Take what completed so far (an inline post's own
				// completion is already there), so that the CQ never fills.
				if err := s.drain(); err != nil {
					return true, moved, err
				}
				if s.signaled && s.v != verbSend {
					s.sample()
				}
			} else if s.signaled {
				s.phase = latWC
			}
		case latWC:
			if err := s.drain(); err != nil {
				return true, moved, err
			}
			if s.sdone < s.scnt {
				return s.timeUp(), moved, nil
			}
			moved = true
			if s.v != verbSend {
				s.sample()
			}
			s.phase = latRecv
		}
	}
}

// next readies WR scnt+1: its time, its ID, whether it is signaled, and for
// a Write the value the peer polls for.
func (s *latLoop) next() {
	if s.gap > 0 {
		// perftest spins, as a sleep would wake late by more than the gap.
		for end := s.now() + s.gap; s.now() < end; {
		}
	}
	t := s.now()
	s.tNow = t
	if !s.dur {
		s.tposted = append(s.tposted, t)
	}
	s.prog.add(1, s.size)
	s.scnt++
	s.wr.ID = wrID(idData, 0, s.scnt-1)
	s.signaled = true
	if s.v == verbSend {
		// perftest signals a Send every CQMod and waits for it then.
		s.signaled = s.scnt%s.mod == 0 || s.scnt == s.n
		s.wr.Flags &^= verbs.Signaled
		if s.signaled {
			s.wr.Flags |= verbs.Signaled
		}
	}
	if s.v == verbWrite {
		s.q.local[s.size-1] = byte(s.scnt) // the peer polls for this value
	}
}

// sample counts a sample of a -D run inside its measured window.
func (s *latLoop) sample() {
	if s.dur {
		if t := s.tNow; t >= s.tSample && t < s.tEnd {
			s.sampled++
		}
	}
}

// arrived reports whether the peer's message rcnt+1 is here. A Write is
// seen as perftest sees it, by the last octet of the buffer taking the
// message's count; the octet is read only when a Write has been placed
// since the last look (verbs.MR.Placed), so never while the receive loop
// writes it.
func (s *latLoop) arrived() (bool, error) {
	want := s.rcnt + 1
	if s.v != verbWrite {
		if s.rcvd < want {
			if err := s.drain(); err != nil {
				return false, err
			}
		}
		return s.rcvd >= want, nil
	}
	q, i := s.q, s.size-1
	if n := q.mr.Placed(); n != q.seen {
		q.seen = n
		if q.target[i] == byte(want) {
			return true, nil
		}
	}
	if st := q.qp.State(); st != verbs.StateRTS {
		// The peer may have closed right after its last Write (perftest's
		// write_lat has no message after the test): it counts if it landed.
		if q.mr.Placed(); q.target[i] == byte(want) {
			return true, nil
		}
		return false, qpFailure(q.qp, fmt.Errorf("QP %s while waiting for the peer's Write", st))
	}
	return false, nil
}

// poll drives the loop from the test's goroutine, as perftest does: it
// spins on memory or the CQ while it waits, yielding the processor, and
// after l.spin empty looks sleeps a microsecond (a Write) or blocks in
// CQ.Wait.
func (s *latLoop) poll() error {
	idle := 0
	for {
		done, moved, err := s.step()
		if done {
			return err
		}
		if err := s.ctx.Err(); err != nil {
			return err
		}
		if moved {
			idle = 0
		} else {
			s.tick()
		}
		spinMem := s.phase == latRecv && s.v == verbWrite
		if idle++; idle < s.spin || s.phase == latPost {
			if !spinMem || idle%64 == 0 {
				runtime.Gosched()
			}
			continue
		}
		idle = 0
		if spinMem {
			time.Sleep(time.Microsecond)
			continue
		}
		if err := s.waitCQ(); err != nil {
			return err
		}
	}
}

// prepareLat readies the memory the peer writes before the Sync that starts
// a measurement: the polled octet of an RDMA Write latency test starts at
// zero (the peer's first Write may land as soon as the Sync is over).
func (e *endpoint) prepareLat(size int) {
	if e.p.Test == WriteLat {
		q := e.qps[0]
		q.mr.Placed() // after the peer's earlier Writes (verbs.MR.Placed)
		q.target[size-1] = 0
		q.seen = q.mr.Placed() // before its next; spinByte waits for more
	}
}

// sameHost reports whether c's peer is on this host.
func sameHost(local, remote net.Addr) bool {
	r, ok1 := remote.(*net.TCPAddr)
	l, ok2 := local.(*net.TCPAddr)
	return ok1 && ok2 && (r.IP.IsLoopback() || r.IP.Equal(l.IP))
}

// pollUntil takes completions until cond holds; false means the duration
// ran out first.
func (l *latRun) pollUntil(cond func() bool) (bool, error) {
	e := l.e
	idle := 0
	for !cond() {
		k := e.cq.Poll(e.wcs)
		if k > 0 {
			if err := l.handle(e.wcs[:k]); err != nil {
				return false, err
			}
			idle = 0
			continue
		}
		if l.timeUp() {
			return false, nil
		}
		if idle++; idle < l.spin {
			runtime.Gosched()
			continue
		}
		idle = 0
		if err := l.waitCQ(); err != nil {
			return false, err
		}
	}
	return true, nil
}

// waitCQ blocks until a completion is queued, the duration runs out or the
// test is cancelled (the error).
func (l *latRun) waitCQ() error {
	if err := l.e.cq.Wait(l.waitCtx); err != nil {
		if l.ctx.Err() != nil {
			return l.ctx.Err()
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
	return nil
}

// drain handles the completions queued now.
func (l *latRun) drain() error {
	if k := l.e.cq.Poll(l.e.wcs); k > 0 {
		return l.handle(l.e.wcs[:k])
	}
	return nil
}

func (l *latRun) handle(wcs []verbs.WC) error {
	for i := range wcs {
		wc := &wcs[i]
		if err := l.e.check(wc); err != nil {
			return err
		}
		if wc.Opcode == verbs.WCRecv {
			l.rcvd++
			if _, err := l.e.postRecv(l.q, l.e.recvWR(l.q, wc)); err != nil {
				return qpFailure(l.q.qp, err)
			}
			continue
		}
		l.sdone = max(l.sdone, wc.ID&idSeq+1)
	}
	return nil
}
