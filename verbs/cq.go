package verbs

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// CQ is a completion queue: a ring of work completions filled by the QPs'
// loops and drained by Poll. If the ring overflows, the CQ enters an error
// state (ErrCQOverrun) and the QPs that fill it move to ERROR, as a CQ
// overrun does in ibverbs: completions are never dropped silently.
//
// Its methods may be called from several goroutines at once: each
// completion is polled once (package doc, "Concurrency").
type CQ struct {
	dev     *Device
	avail   atomic.Int64 // 0 exactly when n is, so that polling an empty CQ takes no lock
	mu      sync.Mutex
	ring    []WC
	head, n int
	err     error
	sols    int           // solicited and error completions queued, not yet polled
	notify  chan struct{} // capacity 1: something was added
	waiters atomic.Int32  // goroutines in Wait: add wakes notify only for them
	solWait chan struct{} // capacity 1: a solicited or error completion was added
	solWtrs atomic.Int32  // goroutines in WaitSolicited

	// Moderation (cq_mod.go), under mu but for owed.
	mod     int         // SetModeration's count; 0: every completion wakes
	unwoken int         // completions a receive loop queued without a wake
	owed    atomic.Bool // unwoken > 0

	users int  // QP queues that complete here, not closed (under dev.mu; destroy.go)
	dead  bool // Destroy'd (under dev.mu)
}

// CreateCQ returns a completion queue with room for cqe completions.
func (d *Device) CreateCQ(cqe int) (*CQ, error) {
	if cqe <= 0 || cqe > d.attr.MaxCQE {
		return nil, fmt.Errorf("%w: cqe %d (max %d)", ErrInvalidArg, cqe, d.attr.MaxCQE)
	}
	if d.isClosed() {
		return nil, fmt.Errorf("%w: device", ErrClosed)
	}
	return &CQ{dev: d, ring: make([]WC, cqe), notify: make(chan struct{}, 1), solWait: make(chan struct{}, 1)}, nil
}

// Poll moves up to len(wcs) completions into wcs and returns how many. It
// never blocks.
func (cq *CQ) Poll(wcs []WC) int {
	if cq.avail.Load() == 0 {
		return 0 // busy pollers must not contend with the loops for the lock
	}
	cq.mu.Lock()
	k := min(len(wcs), cq.n)
	for i := 0; i < k; i++ {
		wcs[i] = cq.ring[cq.head]
		cq.ring[cq.head] = WC{}
		cq.head++
		if cq.head == len(cq.ring) {
			cq.head = 0
		}
	}
	if cq.sols > 0 {
		for i := range k {
			if solicits(&wcs[i]) {
				cq.sols--
			}
		}
	}
	cq.n -= k
	if cq.n == 0 && k > 0 {
		cq.avail.Store(0) // a store is a locked instruction: only when it changes
	}
	cq.mu.Unlock()
	return k
}

// Cap returns the number of completions the CQ holds (CreateCQ's cqe).
func (cq *CQ) Cap() int { return len(cq.ring) }

// Len returns the number of completions waiting.
func (cq *CQ) Len() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.n
}

// Err returns ErrCQOverrun once the ring has overflowed.
func (cq *CQ) Err() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.err
}

// Wait blocks until the CQ holds a completion, the CQ fails, its device
// closes with none queued (an error that Is ErrClosed) or ctx ends (then
// it returns ctx.Err()). Every goroutine waiting returns while completions
// are queued; which of them Polls them is theirs to settle (a completion
// is polled once). PollWait is the usual way to use it.
func (cq *CQ) Wait(ctx context.Context) error {
	// Counted before n is read: an add after that read sees the count
	// (its load follows our increment, through mu) and wakes us.
	cq.waiters.Add(1)
	defer cq.waiters.Add(-1)
	for {
		cq.mu.Lock()
		n, err := cq.n, cq.err
		cq.mu.Unlock()
		if n > 0 {
			if cq.waiters.Load() > 1 {
				wake(cq.notify) // pass the news on to the next waiter
			}
			return nil
		}
		if err != nil {
			if cq.waiters.Load() > 1 {
				wake(cq.notify) // every waiter returns: pass it on
			}
			return err
		}
		select {
		case <-cq.notify:
		case <-cq.dev.done:
			if cq.Len() == 0 {
				return errDeviceClosed
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// PollWait polls up to len(wcs) completions into wcs, waiting for the
// first if none is queued: it returns at least one, or the CQ's error
// (ErrCQOverrun), or, with none queued, an error that Is ErrClosed once
// the device has closed (Device.Close) or ctx.Err() once ctx has ended.
// Completions already queued come first even when ctx has ended, so that
// a cancelled wait never strands them; a loop that must stop while
// completions keep coming checks ctx itself.
func (cq *CQ) PollWait(ctx context.Context, wcs []WC) (int, error) {
	if len(wcs) == 0 {
		return 0, fmt.Errorf("%w: PollWait with no room", ErrInvalidArg)
	}
	for {
		if n := cq.Poll(wcs); n > 0 {
			return n, nil
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if err := cq.Wait(ctx); err != nil {
			return 0, err
		}
	}
}

// WaitSolicited blocks until the CQ holds a completion not yet polled for
// a Send that carried the Solicited Event bit, or one with an error status
// (what ibv_req_notify_cq with solicited_only reports), the CQ fails
// (ErrCQOverrun), its device closes with none queued (an error that Is
// ErrClosed) or ctx ends. One already queued counts: the loop "Poll
// until empty, then WaitSolicited" loses no wake-up, as ibverbs' "arm, then
// poll again" does not. Every goroutine waiting returns.
func (cq *CQ) WaitSolicited(ctx context.Context) error {
	cq.solWtrs.Add(1)
	defer cq.solWtrs.Add(-1)
	for {
		cq.mu.Lock()
		sols, err := cq.sols, cq.err
		cq.mu.Unlock()
		if sols > 0 || err != nil {
			if cq.solWtrs.Load() > 1 {
				wake(cq.solWait) // pass the news on to the next waiter
			}
			if sols > 0 {
				return nil
			}
			return err
		}
		select {
		case <-cq.solWait:
		case <-cq.dev.done:
			cq.mu.Lock()
			sols := cq.sols
			cq.mu.Unlock()
			if sols == 0 {
				return errDeviceClosed
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// solicits reports whether wc is what WaitSolicited waits for.
func solicits(wc *WC) bool { return wc.Flags&SolicitedEvent != 0 || wc.Status != Success }

// push adds a completion and wakes Wait; false means the CQ overflowed.
func (cq *CQ) push(wc WC) bool { return cq.add(wc, false) }

// add adds a completion; false means the CQ overflowed. A receive loop may
// hold the wake back (mayHold, cq_mod.go): then it owes a kick.
func (cq *CQ) add(wc WC, mayHold bool) bool {
	cq.mu.Lock()
	if cq.err != nil || cq.n == len(cq.ring) {
		if cq.err != errCQDestroyed { // a WR flushed by a closed QP's post
			cq.err = ErrCQOverrun
		}
		cq.mu.Unlock()
		wake(cq.notify)
		wake(cq.solWait)
		return false
	}
	i := cq.head + cq.n
	if i >= len(cq.ring) {
		i -= len(cq.ring)
	}
	cq.ring[i] = wc
	cq.n++
	if cq.n == 1 {
		cq.avail.Store(1)
	}
	sol := solicits(&wc)
	if sol {
		cq.sols++
	}
	if mayHold && !sol && cq.mod > 1 {
		if cq.unwoken++; cq.unwoken < cq.mod {
			if !cq.owed.Load() {
				cq.owed.Store(true)
			}
			cq.mu.Unlock()
			return true
		}
	}
	cq.unwoken = 0
	if cq.owed.Load() { // an atomic store is a locked instruction: most adds need none
		cq.owed.Store(false)
	}
	cq.mu.Unlock()
	if cq.waiters.Load() > 0 {
		// A channel send locks the channel: a CQ that is polled, never
		// waited on (a latency loop, a busy poller), skips it.
		wake(cq.notify)
	}
	if sol {
		wake(cq.solWait)
	}
	return true
}

// wake does a non-blocking send on a capacity-1 channel.
func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
