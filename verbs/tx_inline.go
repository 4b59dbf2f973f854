package verbs

// This file holds the one rule by which a post goes out from a goroutine
// other than the transmit loop: the poster's own (PostSend to an idle SQ),
// or the receive goroutine (a receive handler's post, and Read and Atomic
// Responses answered where their requests landed). Such a write never
// waits for the socket: what the socket does not take at once, and
// anything larger than inlineTxMax, is the transmit loop's. Two peers whose
// receive goroutines each waited to write would wait for each other to
// read.

// inlineTxMax bounds the WRs PostSend transmits itself, and the Read
// Responses the receive loop sends (rxAnswer): a few FPDUs, which an idle
// socket usually takes whole; what it does not take the transmit loop
// sends.
const inlineTxMax = 16 << 10

// txInline sends the WRs just posted to an idle SQ, wire payload octets,
// from the caller's goroutine if the transmit loop is idle; otherwise it
// wakes the loop (as when the queue was not idle).
//
// Only request/response traffic goes inline: when something arrived from the
// peer since we last transmitted. A stream of posts is better left to the
// loop, which batches many FPDUs per writev.
//
// The write never waits (txState.tryFlush): what the socket does not take
// at once is left to the loop, as ibv_post_send never blocks. That matters
// most for a receive handler's post, on the receive goroutine: two peers
// whose handlers each waited on a full send queue would wait for each
// other to read (TestRxHandlerPostNeverBlocks). A post goes inline only
// when nothing else is owed, half framed or queued, so that framing it
// cannot fill the Writer (whose Append would then wait to make room).
//
// A handler's post while more FPDUs wait in the read buffer whole (a burst
// of requests, each answered by the handler) is held: the receive loop
// sends what was held once it has taken the burst (rxSendHeld), in one
// write instead of one per request. Not when the SQ is full (a burst of
// more requests than it holds answers): the held posts then go, so that
// the poster's retry finds room.
func (qp *QP) txInline(wire int, idle, full bool) {
	rx := qp.rxHandling.Load()
	if rx == rxInBurst && !full {
		qp.txHeldWire.Add(int64(wire))
		qp.txHeld.Store(true)
		if qp.rxHandling.Load() == rxInBurst {
			return // the receive loop sees txHeld after the handler
		}
		// The handler has returned since (a post from another
		// goroutine): go on as if not held.
		rx = 0
	}
	qp.txSend(wire, idle, rx != 0)
}

// Values of rxHandling: the receive goroutine runs the handler, with more
// FPDUs buffered whole (rxInBurst) or not.
const (
	rxInHandler = 1
	rxInBurst   = 2
)

// rxSendHeld sends the posts txInline held during a burst, from the
// receive goroutine, as a handler's post would be.
func (qp *QP) rxSendHeld() {
	qp.txHeld.Store(false)
	qp.txSend(int(qp.txHeldWire.Swap(0)), true, true)
}

// txSend is txInline's write: wire payload octets were posted, the SQ was
// idle before them, and rx says the caller is the receive goroutine.
func (qp *QP) txSend(wire int, idle, rx bool) {
	// (tx.align is set before the loops start and never changes; its
	// flushes may wait for TCP, which a poster should not.)
	if !idle || wire > inlineTxMax || qp.tx.align != nil || qp.rxSeen.Load() == qp.txRxSeen.Load() || !qp.txMu.TryLock() {
		wake(qp.wake)
		return
	}
	// Nothing may be owed, half framed or queued in the Writer: carrying
	// on with it could fill the Writer, whose Append then waits for the
	// socket (a receive goroutine's send leaves a message half framed).
	if qp.txOwed() || qp.tx.w.Buffered() > 0 {
		qp.txMu.Unlock()
		wake(qp.wake)
		return
	}
	var err error
	more := false
	if qp.State() == StateRTS && !qp.termPending() {
		if rx {
			// The receive goroutine frames no more than about
			// inlineTxMax, whatever else the SQ holds (another
			// goroutine's post next to the held ones): the rest,
			// a message half framed included, is the loop's.
			batch := qp.tx.batch
			qp.tx.batch = min(batch, inlineTxMax)
			_, err = qp.txRun(false)
			qp.tx.batch = batch
		} else {
			_, err = qp.txRun(false)
		}
		more = qp.txPending()
	} else {
		more = true
	}
	if err != nil {
		qp.connLost(err) // before the unlock, as in txLoop
	}
	if !more {
		qp.tx.idle()
	}
	qp.txMu.Unlock()
	if more {
		wake(qp.wake)
	}
}

// SetRxHandler makes the QP's receive goroutine call fn after each FPDU from
// the peer, once its payload is placed and what it completes is on the CQ;
// nil removes the handler.
//
// It is this software stack's substitute for polling: where a NIC places
// data and an application spins on a CQ or on registered memory, here every
// arrival would otherwise wake the application's goroutine from the
// receive goroutine, a hand-off that costs about as much as the rest of a
// loopback round trip. A handler runs the application's next step where the
// data landed instead (a Send or Write of up to 16 KiB that it posts goes
// out at once, on the same goroutine, with a write that never waits: what
// the socket does not take, and anything else that could make the receive
// goroutine wait for the socket, is handed to the transmit goroutine).
// While more FPDUs are already buffered whole behind the one just handled
// (a burst of requests), what the handler posts is held and goes out when
// the burst is taken, in one write rather than one per request, as the
// responses to a burst of RDMA Reads do.
//
// fn must not block or wait for the peer: nothing more arrives on this QP
// while it runs. Nor may it Close or Disconnect the QP, which wait for this
// goroutine: hand those to another one. It may poll CQs, post WRs and read
// registered memory. A call already under way may still run after
// SetRxHandler(nil) returns.
func (qp *QP) SetRxHandler(fn func()) {
	if fn == nil {
		qp.rxFn.Store(nil)
		return
	}
	qp.rxFn.Store(&fn)
}

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
