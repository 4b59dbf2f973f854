package verbs

// rxAnswer sends the Read and Atomic Responses queued from the receive
// goroutine, when the transmit side is idle, instead of waking the
// transmit goroutine: that hand-off is the half of a Read's round trip a
// Write's does not have, and on a busy or virtual machine a goroutine
// woken on another thread costs more than the rest of the round trip.
// The receive loop calls it once the requests it has buffered are taken
// (rxLoop, answerDue), so that a burst of small Reads is answered in one
// write rather than one write each.
//
// A receive loop must never block on a write (two peers that each wait to
// write until the other reads would wait forever), so it answers only up
// to inlineTxMax octets of Reads, with a write that takes what the socket
// has room for (tryFlush); the transmit loop sends the rest, and answers
// anything larger.
func (qp *QP) rxAnswer() {
	if !qp.rxAnswered() {
		wake(qp.wake)
	}
}

func (qp *QP) rxAnswered() bool {
	if qp.irdq.len() == 0 || !qp.txMu.TryLock() {
		return false
	}
	defer qp.txMu.Unlock()
	t := &qp.tx
	if t.cur != nil || t.rr != nil || t.w.Buffered() > 0 || t.align != nil || qp.State() != StateRTS || qp.termPending() {
		return false
	}
	// Responses up to inlineTxMax octets of payload and of FPDUs (atomics
	// and empty Reads have no payload), so that their framing can never
	// fill the Writer, whose Append would then wait for the socket.
	n := 0
	for t.w.Buffered() < inlineTxMax {
		j := qp.irdq.front() // nil once the queue is empty
		if j == nil || n+len(j.buf) > inlineTxMax {
			break
		}
		n += len(j.buf)
		t.rr, t.rrOff = j, 0
		batch := t.batch
		t.batch = max(batch, inlineTxMax) // the Response whole (batch is 1 with SegmentPerFPDU)
		err := qp.txReadResponse()
		t.batch = batch
		if err != nil {
			qp.connLost(err) // before txMu is released, as in txLoop
			return true
		}
		if t.rr != nil {
			break // not framed whole: the loop goes on with it
		}
		qp.txStats.answered.Add(1) // before the peer can see it
	}
	if t.w.Buffered() == 0 {
		return false // the first was too large: the loop's
	}
	if _, err := t.tryFlush(); err != nil {
		qp.connLost(err)
		return true
	}
	if qp.txPending() {
		return false // more to send (the SQ, a large Read, what the socket did not take): the loop's
	}
	t.idle()
	return true
}
