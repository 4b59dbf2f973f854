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

	// With the receive handler (drive), the loop runs as a coroutine that
	// the QP's receive goroutine resumes after each FPDU; yield returns
	// to it. nil: the loop polls on the application's goroutine.
	yield func(struct{}) bool
}

func (l *latRun) now() int64 { return int64(time.Since(l.base)) }

func (l *latRun) timeUp() bool { return l.deadline > 0 && l.now() >= l.deadline }

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
	if p.Loopback || sameHost(q.qp.LocalAddr(), q.qp.RemoteAddr()) {
		l.spin = latSpinLoopback
	}
	dur := p.Duration > 0
	n := uint64(p.Iters)
	var tposted []int64
	if dur {
		n = math.MaxUint64
	} else {
		tposted = make([]int64, 0, n)
	}
	m := p.margin()
	tSample, tEnd := int64(m), int64(p.Duration-m)
	var sampled uint64
	sample := func() {
		if dur {
			if t := l.now(); t >= tSample && t < tEnd {
				sampled++
			}
		}
	}

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
	inline := size <= p.Inline && !v.oneSided()
	if inline {
		wr.Flags |= verbs.Inline
		wr.SGL, wr.InlineData = nil, q.local[:size]
	}
	mod := uint64(p.CQMod)

	if dur {
		l.deadline = int64(p.Duration)
		var cancel context.CancelFunc
		l.waitCtx, cancel = context.WithDeadline(ctx, time.Now().Add(p.Duration))
		defer cancel()
	}
	var scnt, rcnt, lastSig uint64
	if v.oneSided() {
		rcnt = n // nothing comes back but the responses
	}
	// With the receive handler, the loop waits for its own Write or Send
	// completion only at the end: it would come from the transmit
	// goroutine, which does not resume the loop.
	handler := !p.LatPoll
	loop := func() error {
		for scnt < n || rcnt < n {
			if l.timeUp() {
				break
			}
			// Wait for the peer's message (unless we send first).
			if rcnt < n && !(first && scnt == 0) {
				rcnt++
				var ok bool
				var err error
				if v == verbWrite {
					ok, err = l.spinByte(q.target, size-1, byte(rcnt))
				} else {
					ok, err = l.pollUntil(func() bool { return l.rcvd >= rcnt })
				}
				if err != nil {
					return err
				}
				if !ok {
					break
				}
				if v == verbSend {
					sample()
				}
			}
			if scnt >= n {
				continue
			}
			t := l.now()
			if !dur {
				tposted = append(tposted, t)
			}
			prog.add(1, size)
			scnt++
			wr.ID = wrID(idData, 0, scnt-1)
			signaled := true
			if v == verbSend {
				// perftest signals a Send every CQMod and waits for it then.
				signaled = scnt%mod == 0 || scnt == n
				wr.Flags &^= verbs.Signaled
				if signaled {
					wr.Flags |= verbs.Signaled
				}
			}
			if v == verbWrite {
				q.local[size-1] = byte(scnt) // the peer polls for this value
			}
			if err := l.post(wr); err != nil {
				return err
			}
			if signaled {
				lastSig = scnt
			}
			if handler && !v.oneSided() {
				// Take what completed so far (an inline post's own
				// completion is already there), so that the CQ never fills.
				if err := l.drain(); err != nil {
					return err
				}
				if signaled && v != verbSend {
					sample()
				}
			} else if signaled {
				ok, err := l.pollUntil(func() bool { return l.sdone >= scnt })
				if err != nil {
					return err
				}
				if !ok {
					break
				}
				if v != verbSend {
					sample()
				}
			}
		}
		return nil
	}
	l.base = time.Now()
	var err error
	if handler {
		err = l.drive(loop)
		if err == nil {
			// The completions of our last Writes or Sends.
			_, err = l.pollUntil(func() bool { return l.sdone >= lastSig })
		}
	} else {
		err = loop()
	}
	if err != nil {
		return Report{}, err
	}
	q.scnt = scnt // what checkAtomics expects
	rtt := 2.0
	if v.oneSided() {
		rtt = 1
	}
	if dur {
		return latDurReport(size, sampled, time.Duration(tEnd-tSample), rtt), nil
	}
	return latReport(size, tposted, rtt), nil
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

// post posts one WR, waiting while the send queue is full (unsignaled
// Sends leave it when the transmit loop has handed them to TCP).
func (l *latRun) post(wr verbs.SendWR) error {
	for {
		_, err := l.q.qp.PostSend(wr)
		if err == nil {
			return nil
		}
		if !errors.Is(err, verbs.ErrQueueFull) {
			return qpFailure(l.q.qp, err)
		}
		if err := l.ctx.Err(); err != nil {
			return err
		}
		if !l.pause() {
			return errLatStopped
		}
	}
}

// errLatStopped ends a latency loop that its driver abandoned.
var errLatStopped = errors.New("latency loop stopped")

// pause lets what the loop waits for happen: in handler mode it returns to
// the receive handler until the next FPDU (or drive's tick) resumes it;
// otherwise it yields the processor. false: the driver gave up on the loop.
func (l *latRun) pause() bool {
	if l.yield != nil {
		return l.yield(struct{}{})
	}
	runtime.Gosched()
	return true
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
		if l.yield != nil {
			if err := l.ctx.Err(); err != nil {
				return false, err
			}
			if !l.pause() {
				return false, errLatStopped
			}
			continue
		}
		if idle++; idle < l.spin {
			runtime.Gosched()
			continue
		}
		idle = 0
		if err := e.cq.Wait(l.waitCtx); err != nil {
			if l.ctx.Err() != nil {
				return false, l.ctx.Err()
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				return false, err
			}
		}
	}
	return true, nil
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

// spinByte polls b[i] until it holds want, as perftest polls the last
// octet of its buffer for the peer's RDMA Write; false means the duration
// ran out first. It reads the octet only when a Write has been placed
// since it last looked (verbs.MR.Placed), so that it never reads while the
// receive loop writes.
func (l *latRun) spinByte(b []byte, i int, want byte) (bool, error) {
	for spins := 1; ; spins++ {
		if n := l.q.mr.Placed(); n != l.q.seen {
			l.q.seen = n
			if b[i] == want {
				return true, nil
			}
		}
		if l.yield != nil {
			if !l.pause() {
				return false, errLatStopped
			}
		} else if spins < l.spin {
			if spins%64 != 0 {
				continue
			}
			runtime.Gosched()
		} else {
			time.Sleep(time.Microsecond)
		}
		if l.timeUp() {
			return false, nil
		}
		if err := l.ctx.Err(); err != nil {
			return false, err
		}
		if st := l.q.qp.State(); st != verbs.StateRTS {
			// The peer may have closed right after its last Write (perftest's
			// write_lat has no message after the test): it counts if it
			// landed.
			if l.q.mr.Placed(); b[i] == want {
				return true, nil
			}
			return false, qpFailure(l.q.qp, fmt.Errorf("QP %s while waiting for the peer's Write", st))
		}
	}
}
