package verbs

// rxAnswer sends the Read or Atomic Response just queued from the receive
// goroutine, when the transmit side is idle, instead of waking the
// transmit goroutine: that hand-off is the half of a Read's round trip a
// Write's does not have, and on a busy or virtual machine a goroutine
// woken on another thread costs more than the rest of the round trip.
//
// A receive loop must never block on a write (two peers that each wait to
// write until the other reads would wait forever), so it answers only a
// Read of up to inlineTxMax octets, with a write that takes what the
// socket has room for (tryFlush); the transmit loop sends the rest, and
// answers anything larger.
func (qp *QP) rxAnswer() {
	if !qp.rxAnswered() {
		wake(qp.wake)
	}
}

func (qp *QP) rxAnswered() bool {
	if qp.irdq.len() != 1 || !qp.txMu.TryLock() {
		return false
	}
	defer qp.txMu.Unlock()
	t := &qp.tx
	j := qp.irdq.front() // nil if the transmit loop answered it since len
	if j == nil || t.cur != nil || t.rr != nil || t.w.Buffered() > 0 || len(j.buf) > inlineTxMax ||
		t.align != nil || qp.State() != StateRTS || qp.termPending() {
		return false
	}
	t.rr, t.rrOff = j, 0
	err := qp.txReadResponse()
	if err == nil {
		qp.txStats.answered.Add(1) // before the peer can see it
		_, err = t.tryFlush()
	}
	if err != nil {
		qp.connLost(err) // before txMu is released, as in txLoop
		return true
	}
	if qp.txPending() {
		return false // more to send (the SQ, or what the socket did not take): the loop's
	}
	t.w.Idle()
	return true
}
