package verbs

// answerMax bounds the Read Responses the receive loop sends itself: small
// enough to go whole into an empty socket send queue (the kernel's smallest
// send buffer is 4 KiB of payload and more).
const answerMax = 2048

// rxAnswer sends the Read or Atomic Response just queued from the receive
// goroutine, when the transmit side is idle, instead of waking the
// transmit goroutine: that hand-off is the half of a Read's round trip a
// Write's does not have, and on a busy or virtual machine a goroutine
// woken on another thread costs more than the rest of the round trip.
//
// A receive loop must never block on a write (two peers that each wait to
// write until the other reads would wait forever), so it answers only a
// small response into a send queue the peer has acknowledged whole; with
// anything else, the transmit loop answers.
func (qp *QP) rxAnswer() {
	if !qp.rxAnswered() {
		wake(qp.wake)
	}
}

func (qp *QP) rxAnswered() bool {
	if qp.sendq == nil || qp.irdq.len() != 1 || !qp.txMu.TryLock() {
		return false
	}
	defer qp.txMu.Unlock()
	t := &qp.tx
	j := qp.irdq.front() // nil if the transmit loop answered it since len
	if j == nil || t.cur != nil || t.rr != nil || t.w.Buffered() > 0 || len(j.buf) > answerMax ||
		qp.State() != StateRTS || qp.termPending() {
		return false
	}
	if !qp.sendQueueEmpty() {
		return false
	}
	t.rr, t.rrOff = j, 0
	err := qp.txReadResponse()
	if err == nil {
		qp.txStats.answered.Add(1) // before the peer can see it
		err = t.flush()
	}
	if err != nil {
		qp.connLost(err) // before txMu is released, as in txLoop
		return true
	}
	if qp.txPending() {
		return false // more to send (the SQ, or what a batch did not hold): the loop's
	}
	t.w.Idle()
	return true
}

// sendQueueEmpty reports whether the peer has acknowledged everything
// written on the socket (SIOCOUTQ is 0): then a small write goes whole into
// the send buffer and cannot wait. False if the socket cannot tell.
func (qp *QP) sendQueueEmpty() bool {
	if qp.sendq == nil {
		return false
	}
	n, err := qp.sendq.Len()
	return err == nil && n == 0
}
