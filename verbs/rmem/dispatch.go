package rmem

import (
	"context"
	"fmt"

	"github.com/goiwarp/iwarp/verbs"
)

// dispatch is the Buffer's completion dispatcher: the one goroutine that
// polls the send CQ. It hands each completion to its call (copying a Read's
// data from staging into the call's p), frees the slot and grants it to the
// next call waiting. It stops when ctx ends (Close, or the QP's end seen by
// watch) or the CQ fails, and then completes what the CQ still holds.
func (b *Buffer) dispatch(ctx context.Context) {
	defer close(b.done)
	wcs := make([]verbs.WC, len(b.slots))
	var cqErr error
	for {
		n, err := b.cq.PollWait(ctx, wcs)
		if err != nil {
			if ctx.Err() == nil {
				cqErr = err
			}
			break
		}
		for i := range wcs[:n] {
			b.complete(&wcs[i])
		}
	}
	for n := b.cq.Poll(wcs); n > 0; n = b.cq.Poll(wcs) {
		for i := range wcs[:n] {
			b.complete(&wcs[i])
		}
	}
	b.mu.Lock()
	busy := b.busy
	if cqErr != nil && !isDone(b.qp) {
		b.dieLocked(fmt.Errorf("rmem: the QP's send CQ failed: %w", cqErr))
	}
	b.mu.Unlock()
	if busy > 0 {
		// WRs whose completions will never be polled: free their slots
		// only once the QP has ended, when nothing lands in them any more
		// (Close stops waiting for that when the QP has ended).
		select {
		case <-b.qp.Done():
		case <-ctx.Done():
		}
	}
	b.mu.Lock()
	if isDone(b.qp) {
		b.dieLocked(&QPError{Status: verbs.WRFlushErr, Err: b.qp.Err()})
	}
	for i := range b.slots {
		if b.slots[i].busy {
			b.releaseLocked(int32(i))
		}
	}
	b.mu.Unlock()
}

// isDone reports whether qp has ended and flushed its WRs.
func isDone(qp *verbs.QP) bool {
	select {
	case <-qp.Done():
		return true
	default:
		return false
	}
}

// complete takes one completion.
func (b *Buffer) complete(wc *verbs.WC) {
	i, gen := int32(uint32(wc.ID)), uint32(wc.ID>>32)
	b.mu.Lock()
	defer b.mu.Unlock()
	if int(i) >= len(b.slots) || !b.slots[i].busy || b.slots[i].gen != gen {
		return // not one of ours
	}
	s := &b.slots[i]
	if wc.Status != verbs.Success {
		// An error status means the QP has ended; its Err says why.
		b.dieLocked(&QPError{Status: wc.Status, Err: b.qp.Err()})
	} else if c := s.owner; c != nil && s.read {
		pOff, n := s.pOff, s.n
		c.mu.Lock()
		b.mu.Unlock()
		copy(c.p[pOff:pOff+n], b.stg[int(i)*b.piece:int(i)*b.piece+n])
		c.mu.Unlock()
		b.mu.Lock()
	}
	b.releaseLocked(i)
	b.grantLocked()
}

// watch stops the dispatcher when the QP ends, so that calls fail at once
// with the QP's error rather than wait for completions.
func (b *Buffer) watch() {
	select {
	case <-b.qp.Done():
		b.stop()
	case <-b.closing:
	}
}
