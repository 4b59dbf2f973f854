package verbs

import "fmt"

// CQ moderation: fewer wake-ups of a goroutine waiting on a busy CQ.
//
// Each wake-up of a goroutine parked in Wait is a hand-off between threads
// (a futex wake, and on a VM an interrupt to another vCPU), which at 64 KiB
// messages over an Ethernet MSS costs as much CPU as the message's protocol
// work. ibverbs moderates completion events the same way (ibv_modify_cq,
// IBV_CQ_MODERATE): completions are queued, and Poll sees them, at once;
// only the wake-up waits.

// SetModeration has Wait and PollWait wake once count completions have been
// queued since the last wake-up, rather than at the first (count 1, the
// default). It moderates only what a QP's receive loop queues (received
// Sends, Read and atomic completions), and never holds back longer than
// that loop keeps finding octets already waiting on its connection: when
// it is about to wait for more, or has received moderateMax more octets,
// or stops, it wakes the CQ's waiters for what it held. A completion with
// an error status or the Solicited Event flag always wakes at once, and
// completions queued by the transmit side (Sends and Writes, which
// complete in groups as they are written) are never held. Poll is not
// affected: a completion can be polled the moment it is queued.
//
// Moderation suits a CQ that many completions reach in bursts: a bandwidth
// test, a storage target at queue depth. A loop that waits for one
// completion at a time gets it when its connection runs dry, as without
// moderation.
func (cq *CQ) SetModeration(count int) error {
	if count < 1 || count > len(cq.ring) {
		return fmt.Errorf("%w: moderation count %d (1 to %d)", ErrInvalidArg, count, len(cq.ring))
	}
	cq.mu.Lock()
	if cq.err == errCQDestroyed {
		cq.mu.Unlock()
		return cq.err
	}
	cq.mod = count
	held := cq.unwoken > 0 && cq.unwoken >= count
	cq.mu.Unlock()
	if held {
		cq.kick()
	}
	return nil
}

// moderateMax bounds how many octets a receive loop reads while it holds a
// wake-up back: about half a millisecond at 2 GB/s.
const moderateMax = 1 << 20

// kick wakes the CQ's waiters if a receive loop held a wake-up back.
func (cq *CQ) kick() {
	if !cq.owed.Load() {
		return
	}
	cq.mu.Lock()
	owed := cq.unwoken > 0
	cq.unwoken = 0
	cq.owed.Store(false)
	cq.mu.Unlock()
	if owed {
		wake(cq.notify)
	}
}

// rxKick is the receive loop's side: it wakes what the loop held back on
// the QP's CQs (the QP's receives may come from a shared receive queue,
// but they complete on its own recvCQ).
func (qp *QP) rxKick() {
	qp.rx.sinceKick = 0
	qp.sendCQ.kick()
	if qp.recvCQ != qp.sendCQ {
		qp.recvCQ.kick()
	}
}
