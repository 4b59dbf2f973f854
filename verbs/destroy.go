package verbs

import "fmt"

// Destroying CQs, SRQs and PDs, as ibv_destroy_cq, ibv_destroy_srq and
// ibv_dealloc_pd: refused with ErrBusy while something still uses the
// object (a QP not yet closed, an SRQ, a registered MR), so that a program
// that tears down in the wrong order is told at once rather than when a
// completion has nowhere to go. Each object counts its users under the
// device's mutex: CreateQP, CreateSRQ and memory registration add one,
// QP.Close (closeResources), SRQ.Destroy and MR.Dereg take it away.
// Memory the program registered stays the program's.

// Destroy destroys the CQ. It returns ErrBusy while a QP that has not been
// closed (QP.Close, Disconnect, Abort) uses it, as a send or a receive CQ.
// Completions still queued are dropped; goroutines in Wait, PollWait or
// WaitSolicited return an error wrapping ErrClosed, as does every later
// wait or SetModeration, and Poll returns 0.
func (cq *CQ) Destroy() error {
	d := cq.dev
	d.mu.Lock()
	switch {
	case cq.dead:
		d.mu.Unlock()
		return fmt.Errorf("%w: CQ destroyed already", ErrClosed)
	case cq.users > 0:
		n := cq.users
		d.mu.Unlock()
		return fmt.Errorf("%w: CQ used by %d QP queues not closed", ErrBusy, n)
	}
	cq.dead = true
	d.mu.Unlock()
	cq.mu.Lock()
	cq.err = errCQDestroyed
	clear(cq.ring)
	cq.head, cq.n, cq.sols = 0, 0, 0
	cq.avail.Store(0)
	cq.mu.Unlock()
	wake(cq.notify)
	wake(cq.solWait)
	return nil
}

var errCQDestroyed = fmt.Errorf("%w: CQ destroyed", ErrClosed)

// Destroy destroys the SRQ. It returns ErrBusy while a QP that has not
// been closed takes its receives. Receives still posted are dropped, with
// no completion (ibv_destroy_srq's); a later PostRecv or ArmLimit returns
// an error wrapping ErrClosed.
func (s *SRQ) Destroy() error {
	d := s.pd.dev
	d.mu.Lock()
	switch {
	case s.dead:
		d.mu.Unlock()
		return fmt.Errorf("%w: SRQ destroyed already", ErrClosed)
	case s.users > 0:
		n := s.users
		d.mu.Unlock()
		return fmt.Errorf("%w: SRQ used by %d QPs not closed", ErrBusy, n)
	}
	s.dead = true
	s.pd.users--
	d.mu.Unlock()
	q := &s.q
	q.mu.Lock()
	q.destroyed = true
	q.head = q.tail
	clear(q.ring)
	clear(q.segs) // the program's buffers
	q.limit, q.limitCh = 0, nil
	q.mu.Unlock()
	return nil
}

// Dealloc deallocates the PD. It returns ErrBusy while the PD has memory
// regions registered (not Dereg'd), SRQs not destroyed or QPs not
// closed. Later registrations and creations in it return an error wrapping
// ErrClosed.
func (pd *PD) Dealloc() error {
	d := pd.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case pd.dead:
		return fmt.Errorf("%w: PD deallocated already", ErrClosed)
	case pd.users > 0:
		return fmt.Errorf("%w: PD used by %d MRs, SRQs and QPs", ErrBusy, pd.users)
	}
	pd.dead = true
	return nil
}

// use counts a new QP's users (d.mu held): its PD, CQs and SRQ, none of
// which may be destroyed.
func (qp *QP) use() error {
	switch {
	case qp.pd.dead:
		return fmt.Errorf("%w: PD deallocated", ErrClosed)
	case qp.sendCQ.dead || qp.recvCQ.dead:
		return errCQDestroyed
	case qp.srq != nil && qp.srq.dead:
		return fmt.Errorf("%w: SRQ destroyed", ErrClosed)
	}
	qp.pd.users++
	qp.sendCQ.users++
	qp.recvCQ.users++
	if qp.srq != nil {
		qp.srq.users++
	}
	return nil
}

// unuse takes a closed QP's counts back (d.mu held).
func (qp *QP) unuse() {
	qp.pd.users--
	qp.sendCQ.users--
	qp.recvCQ.users--
	if qp.srq != nil {
		qp.srq.users--
	}
}
