package verbs

import (
	"net"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/goiwarp/iwarp/tcpx"
)

// txBatch is how many stream octets the transmit loop queues before it
// flushes them in one writev: enough to amortise the system call, small
// enough that a Terminate or Read Response does not wait long.
const txBatch = 256 << 10

// txGather: below this many queued octets the transmit loop yields once
// before it writes, to gather more WRs into the write.
const txGather = 16 << 10

// txState is owned by the transmit loop.
type txState struct {
	w         *mpa.Writer
	batch     int          // octets queued before a flush: txBatch, or 1 with SegmentPerFPDU
	align     *net.TCPConn // with SegmentPerFPDU: wait for it to send all before a flush
	hdr       [mpa.MaxHeader]byte
	pieces    [maxSGE][]byte
	sendMSN   uint32 // MSN of the last Send started (QN 0); the first is 1
	readMSN   uint32 // MSN of the last Read or Atomic Request (QN 1)
	atomicMSN uint32 // MSN of the last Atomic Response (QN 3)

	sqSeen uint64 // the SQ's sqPub when nextSQ last looked: entries below it are posted
	// next is sqNext as the transmit side has taken entries; it is stored
	// into sqNext (txPublish) when it matters to others: before
	// completions, under sqMu when a WR may be held back, and when txRun
	// returns. Stored for every WR, a locked instruction, it was 4 % of
	// write_bw -s 64 -t 128.
	next uint64

	cur    *sqe   // SQ WR in progress
	curIdx uint64 // its SQ index
	curOff int    // octets of it queued
	curMSN uint32

	rr    *readJob // Read Response in progress
	rrOff int

	flushTo   uint64 // SQ entries below this are queued whole and complete at the next flush
	writtenTo uint64 // SQ entries below this went out in full (an Append may flush first)
	copiedTo  uint64 // SQ entries below this went out or are the Writer's own copy: they may complete
	doneAt    uint64 // the writer's Written() when txCompleted last ran
	doneTo    uint64 // SQ entries below this were completed
	finSent   bool   // Disconnect's FIN has gone (txFIN)

	fpdus uint64   // FPDUs queued (Stats)
	stats *txStats // what flush publishes for Stats
}

// txStats are the transmit counters Stats reads from other goroutines.
type txStats struct {
	fpdus, octets atomic.Uint64
	answered      atomic.Uint64 // Read and Atomic Responses the receive loop sent (rxAnswer)
}

// txLoop is the transmit goroutine of a connected QP. It owns the transmit
// state whenever it holds txMu; PostSend borrows it (txInline) to send a
// small WR on the caller's goroutine when the loop is idle, which saves a
// goroutine hand-off per message on the latency path.
func (qp *QP) txLoop() {
	defer qp.loopDone()
	defer qp.txWG.Done()
	for {
		qp.txMu.Lock()
		if term := qp.takeTerm(); term != nil {
			qp.txTerminate(term)
			qp.txMu.Unlock()
			return
		}
		select {
		case <-qp.stop:
			if qp.tx.flush() == nil {
				// What went out in full completes (flushAll), as it
				// would have at a flush before the stop.
				qp.tx.writtenTo = qp.tx.flushTo
				qp.sqWritten.Store(qp.tx.writtenTo)
			}
			qp.txMu.Unlock()
			return
		default:
		}
		worked, err := qp.txRun(true)
		if err != nil {
			// Recorded before txMu is released: rxFailed waits on txMu for
			// a write that may have taken the socket's error (see there).
			qp.connLost(err)
			qp.txMu.Unlock()
			return
		}
		if qp.peerFIN.Load() && !qp.txOwed() {
			// Everything the peer asked for before its FIN is written.
			qp.peerEnded()
			qp.txMu.Unlock()
			return
		}
		qp.txFIN()
		if !worked {
			qp.tx.idle()
		}
		qp.txMu.Unlock()
		if !worked {
			qp.txParked.Store(true)
			select {
			case <-qp.wake:
			case <-qp.stop:
				// Round once more: the top writes what a poster's
				// tryFlush left (its wake may be the one not taken).
			}
			qp.txParked.Store(false)
		}
	}
}

// txFIN sends Disconnect's FIN once it asked for it (its SQ had drained)
// and nothing is left to write: no message half queued, no Read or Atomic
// Response owed, nothing in the Writer. The FIN goes from here, after the
// last octet, because a WR may complete while the Writer still holds its
// copy (txQueued).
func (qp *QP) txFIN() {
	t := &qp.tx
	ch := qp.finReq.Load()
	if ch == nil || t.finSent || qp.txOwed() || t.w.Buffered() > 0 {
		return
	}
	t.finSent = true
	closeWrite(qp.conn)
	close(*ch)
}

// txRun queues and flushes a batch, and more while there is work if all is
// set, and completes the WRs it wrote: when the loop runs dry, and (txFill)
// at least every completeEvery octets written, also when the writer flushed
// inside an Append, which it does for small FPDUs when its arena fills.
func (qp *QP) txRun(all bool) (bool, error) {
	t := &qp.tx
	if seen := qp.rxSeen.Load(); seen != qp.txRxSeen.Load() {
		qp.txRxSeen.Store(seen) // only when it moved: posters read it (enqueue)
	}
	t.next = qp.sqNext.Load() // flushAll, under txMu too, may have moved it
	didWork := false
	for {
		worked, err := qp.txFill()
		if err == nil && all && worked && t.w.Buffered() < txGather {
			// Let the goroutines that are ready to post run first, and
			// take what they posted into the same write: many small WRs
			// from many posters (an NVMe queue at depth) then cost one
			// system call, not one each. With nobody ready it costs
			// nothing.
			runtime.Gosched()
			var more bool
			more, err = qp.txFill()
			worked = worked || more
		}
		if err == nil && t.w.Buffered() > 0 {
			sent := true
			if all {
				err = t.flush()
			} else {
				sent, err = t.tryFlush() // a poster's goroutine: never wait
			}
			if err == nil && sent {
				t.writtenTo = t.flushTo
				// Complete what this write carried now, not when the
				// loop runs dry: under steady load that could be hundreds
				// of messages later (an NVMe target's response Sends
				// completed ~250 commands late), and a completion is what
				// frees the application's buffer.
				qp.txCompleted()
			}
		}
		if err != nil {
			qp.txPublish()
			return didWork, err
		}
		didWork = didWork || worked
		if !all || !worked || qp.termPending() || qp.stopping() {
			break
		}
	}
	qp.txCompleted()
	return didWork, nil
}

// completeEvery bounds how much the transmit loop writes before it completes
// what it wrote, so that a completion is not held back by the rest of the
// SQ: 1 MiB is under a millisecond at loopback speed, 8 ms at 1 Gbit/s.
const completeEvery = 1 << 20

// doneWhenWritten reports whether a WR of op completes once its FPDUs are
// handed to TCP; Reads and atomics wait for their responses, local
// operations complete where they run.
func (op SendOpcode) doneWhenWritten() bool {
	return op != OpRDMARead && op != OpLocalInv && op != opRegMR && op != OpAtomicFetchAdd && op != OpAtomicCmpSwap
}

// stopping reports whether the QP's loops have been told to stop.
func (qp *QP) stopping() bool {
	select {
	case <-qp.stop:
		return true
	default:
		return false
	}
}

// flush writes the queued FPDUs. With SegmentPerFPDU it first waits, a
// bounded time, until TCP has sent all it holds, so that the FPDU starts a
// segment of its own instead of joining one TCP keeps back.
func (t *txState) flush() error {
	if t.align != nil && t.w.Buffered() > 0 {
		wait := time.Microsecond
		for deadline := time.Now().Add(segmentWaitMax); time.Now().Before(deadline); {
			if n, err := tcpx.Unsent(t.align); err != nil || n == 0 {
				break
			}
			time.Sleep(wait)
			wait = min(2*wait, time.Millisecond)
		}
	}
	err := t.w.Flush()
	t.stats.fpdus.Store(t.fpdus)
	t.stats.octets.Store(t.w.Written())
	return err
}

// tryFlush writes what the socket takes now and leaves the rest queued
// for the transmit loop (mpa.Writer.TryFlush); sent reports whether all
// went.
func (t *txState) tryFlush() (sent bool, err error) {
	sent, err = t.w.TryFlush()
	t.stats.fpdus.Store(t.fpdus)
	t.stats.octets.Store(t.w.Written())
	return sent, err
}

// segmentWaitMax bounds flush's wait for TCP to send what it holds.
const segmentWaitMax = time.Second

// idle is the transmit side's rest between messages: the Writer gives its
// arena back, and the payload pieces of the last FPDU framed are dropped,
// so that a QP at rest references no application memory (a region
// deregistered meanwhile can be collected).
func (t *txState) idle() {
	clear(t.pieces[:])
	t.w.Idle()
}

// txOwed reports whether a message is half written or a Read or Atomic
// Response is owed to the peer.
func (qp *QP) txOwed() bool {
	return qp.tx.cur != nil || qp.tx.rr != nil || qp.irdq.len() > 0
}

// txPending reports whether the transmit loop has work left: octets a
// tryFlush left too. WRs a poster has yet to publish in sqPub do not count
// (no sqMu, two locked instructions a message fewer): their PostSend comes
// to txInline after, which sends them or wakes the loop.
func (qp *QP) txPending() bool {
	if qp.txOwed() || qp.tx.w.Buffered() > 0 {
		return true
	}
	return qp.sqNext.Load() != qp.sqPub.Load()
}

// txFill queues FPDUs until a batch is full or nothing is ready. Messages are
// never interleaved with each other: siw rejects a tagged message inside
// another tagged one.
func (qp *QP) txFill() (worked bool, err error) {
	t := &qp.tx
	for t.w.Buffered() < t.batch && !qp.termPending() {
		switch {
		case t.rr != nil:
			err = qp.txReadResponse()
		case t.cur != nil:
			err = qp.txSQ()
		default:
			if !t.finSent && qp.nudge.Load() && qp.nudge.CompareAndSwap(true, false) { // a load is cheaper than a locked CAS per message
				h := ddp.AppendTagged(t.hdr[:0], true, rdmap.Ctrl(rdmap.OpWrite), rtrSTag, 0)
				if err = t.append(h, nil); err != nil {
					return worked, err
				}
				worked = true
				continue
			}
			if job := qp.irdq.front(); job != nil {
				if t.finSent {
					// A request that crossed Disconnect's FIN: no Response
					// can follow the FIN, and the peer, reading it, flushes
					// its Read. Answering would fail on the half-closed
					// socket and turn an orderly close into a lost one.
					qp.irdq.pop()
					continue
				}
				t.rr, t.rrOff = job, 0
				continue
			}
			e, idx := qp.nextSQ()
			if e == nil {
				return worked, nil
			}
			t.cur, t.curIdx, t.curOff = e, idx, 0
			continue
		}
		if err != nil {
			return worked, err
		}
		worked = true
		if t.w.Written()-t.doneAt >= completeEvery {
			qp.txCompleted() // what Appends flushed on the way
		}
	}
	return worked, nil
}

// nextSQ hands the transmit loop the next SQ entry, unless a fence or the
// ORD holds it back. It sees how far the posters have got in sqPub and
// takes sqMu only for the entries that may be held back: a stream of
// Writes or Sends takes no lock here.
func (qp *QP) nextSQ() (*sqe, uint64) {
	t := &qp.tx
	if qp.peerFIN.Load() || qp.holdSQ.Load() || t.finSent {
		// The peer has closed (peerClosed), we may not send first
		// (holdFirst), or Disconnect's FIN is out: a WR posted since
		// flushes when the QP ends.
		return nil, 0
	}
	idx := t.next
	if idx >= t.sqSeen {
		if t.sqSeen = qp.sqPub.Load(); idx >= t.sqSeen {
			return nil, 0
		}
	}
	// The entry was filled before the poster stored sqPub past it, and we
	// loaded that after: its fields are ours to read.
	e := &qp.sq[idx%uint64(len(qp.sq))]
	if e.fence || e.op.responded() {
		// Under sqMu, so that wakeHeld, which a completing Read calls after
		// freeing its ORD slot, sees sqNext still behind a WR held here.
		qp.sqMu.Lock()
		defer qp.sqMu.Unlock()
		if e.fence && qp.ordq.len() > 0 || e.op.responded() && qp.ordq.len() >= qp.ord {
			// Held: a fence waits for every Read to complete, and RFC
			// 5040 section 6.5 and RFC 7306 section 5.2 allow no more
			// than ORD outstanding. rx wakes us when a Read completes.
			qp.txPublish()
			return nil, 0
		}
		t.next = idx + 1
		qp.txPublish()
		return e, idx
	}
	t.next = idx + 1
	return e, idx
}

// txPublish stores the entries the transmit side has taken into sqNext,
// for those that read it: retirement, the posters, wakeHeld, txPending.
func (qp *QP) txPublish() {
	if qp.sqNext.Load() != qp.tx.next {
		qp.sqNext.Store(qp.tx.next)
	}
}

// append queues an FPDU (mpa.Writer.Append). If the writer flushed what it
// held first, the WRs queued whole before have gone out: writtenTo says so.
func (t *txState) append(hdr, payload []byte) error {
	q, w := t.flushTo, t.w.Written()
	t.fpdus++
	err := t.w.Append(hdr, payload)
	if t.w.Written() != w {
		t.appendFlushed(q)
	}
	return err
}

// appendFlushed records a flush inside an Append: the WRs below q went out
// in full, and so did every FPDU but the one just queued, which Stats
// shows now rather than at the loop's next flush (a stream that keeps the
// SQ full may not reach one).
func (t *txState) appendFlushed(q uint64) {
	t.writtenTo = q
	t.stats.fpdus.Store(t.fpdus - 1)
	t.stats.octets.Store(t.w.Written())
}

// appendWords is append with the header as words (mpa.Writer.AppendWords).
func (t *txState) appendWords(hdrLen int, w0, w1, w2 uint64, payload []byte) error {
	q, w := t.flushTo, t.w.Written()
	t.fpdus++
	err := t.w.AppendWords(hdrLen, w0, w1, w2, payload)
	if t.w.Written() != w {
		t.appendFlushed(q)
	}
	return err
}

// onePiece returns a gather list of at most one piece as that piece.
func onePiece(p [][]byte) []byte {
	if len(p) == 0 {
		return nil
	}
	return p[0]
}

// appendV is append with a gather list.
func (t *txState) appendV(hdr []byte, payload [][]byte) error {
	q, w := t.flushTo, t.w.Written()
	t.fpdus++
	err := t.w.AppendV(hdr, payload)
	if t.w.Written() != w {
		t.appendFlushed(q)
	}
	return err
}

// segment gathers the payload of the next FPDU of a WR with gather list
// segs, starting at off: as much as an FPDU of mulpdu octets with a header
// of hdrLen holds, less what fit takes off.
func (t *txState) segment(segs [][]byte, off, mulpdu, hdrLen int) ([][]byte, int) {
	if len(segs) == 1 && t.align == nil {
		// One SGE, the usual WR: a slice of it.
		s := segs[0][off:]
		s = s[:min(len(s), mulpdu-hdrLen)]
		t.pieces[0] = s
		return t.pieces[:1], len(s)
	}
	p, n := t.segPayload(segs, off, mulpdu-hdrLen)
	if m := t.fit(n, hdrLen); m != n {
		p, n = t.segPayload(segs, off, m)
	}
	return p, n
}

// fit returns how much of n payload octets the next FPDU carries: all of
// them, but when FPDUs are aligned with segments (SegmentPerFPDU) and the
// FPDU would end where a marker is due, one word less, so that the marker
// falls inside the next FPDU (see mpa.Writer.EndsAtMarker). An FPDU without
// four octets of payload to spare keeps its length.
func (t *txState) fit(n, hdrLen int) int {
	if t.align != nil && n >= 4 && t.w.EndsAtMarker(hdrLen+n) {
		return n - 4
	}
	return n
}

// segPayload gathers up to max octets of segs starting at off.
func (t *txState) segPayload(segs [][]byte, off, max int) ([][]byte, int) {
	n, k := 0, 0
	for _, s := range segs {
		if off >= len(s) {
			off -= len(s)
			continue
		}
		s = s[off:]
		off = 0
		if len(s) > max-n {
			s = s[:max-n]
		}
		t.pieces[k] = s
		k++
		n += len(s)
		if n == max {
			break
		}
	}
	return t.pieces[:k], n
}

// txSQ queues FPDUs of the SQ WR in progress.
func (qp *QP) txSQ() error {
	t := &qp.tx
	e := t.cur
	switch e.op {
	case OpSend, OpSendWithInv:
		if t.curOff == 0 {
			t.sendMSN++
			t.curMSN = t.sendMSN
		}
		op := rdmap.OpSend
		switch {
		case e.op == OpSendWithInv && e.solicit:
			op = rdmap.OpSendSEInvalidate
		case e.op == OpSendWithInv:
			op = rdmap.OpSendInvalidate
		case e.solicit:
			op = rdmap.OpSendSE
		}
		for t.w.Buffered() < t.batch {
			p, n := t.segment(qp.payload(e, t.curIdx), t.curOff, qp.mulpdu, ddp.UntaggedHdrLen)
			last := t.curOff+n == int(e.length)
			var err error
			if len(p) <= 1 {
				w0, w1, w2 := ddp.UntaggedWords(last, rdmap.Ctrl(op), e.invKey, rdmap.QNSend, t.curMSN, uint32(t.curOff))
				err = t.appendWords(ddp.UntaggedHdrLen, w0, w1, w2, onePiece(p))
			} else {
				h := ddp.AppendUntagged(t.hdr[:0], last, rdmap.Ctrl(op), e.invKey, rdmap.QNSend, t.curMSN, uint32(t.curOff))
				err = t.appendV(h, p)
			}
			if err != nil {
				return err
			}
			t.curOff += n
			if last {
				qp.txQueued()
				return nil
			}
		}
	case OpRDMAWrite, OpRDMAWriteWithImm:
		for t.w.Buffered() < t.batch {
			p, n := t.segment(qp.payload(e, t.curIdx), t.curOff, qp.mulpdu, ddp.TaggedHdrLen)
			last := t.curOff+n == int(e.length)
			var err error
			if len(p) <= 1 {
				w0, w1 := ddp.TaggedWords(last, rdmap.Ctrl(rdmap.OpWrite), e.rkey, e.raddr+uint64(t.curOff))
				err = t.appendWords(ddp.TaggedHdrLen, w0, w1, 0, onePiece(p))
			} else {
				h := ddp.AppendTagged(t.hdr[:0], last, rdmap.Ctrl(rdmap.OpWrite), e.rkey, e.raddr+uint64(t.curOff))
				err = t.appendV(h, p)
			}
			if err != nil {
				return err
			}
			t.curOff += n
			if last {
				if e.op == OpRDMAWriteWithImm {
					if err := qp.txImmediate(e, qp.sqExtAt(t.curIdx).imm); err != nil {
						return err
					}
				}
				qp.txQueued()
				return nil
			}
		}
	case OpImmediate:
		if err := qp.txImmediate(e, qp.sqExtAt(t.curIdx).imm); err != nil {
			return err
		}
		qp.txQueued()
	case OpAtomicFetchAdd, OpAtomicCmpSwap:
		t.readMSN++
		reqID := uint32(t.curIdx)
		qp.ordq.push(readJob{sqIdx: t.curIdx, buf: qp.sqSlot(t.curIdx)[0], stag: e.sinkKey, atomic: true, reqID: reqID})
		aop, addSwap, addSwapMask, cmp, cmpMask := qp.sqExtAt(t.curIdx).atomic.wire(e.op)
		h := ddp.AppendUntagged(t.hdr[:0], true, rdmap.Ctrl(rdmap.OpAtomicRequest), 0, rdmap.QNReadRequest, t.readMSN, 0)
		h = rdmap.AppendAtomicRequest(h, aop, reqID, e.rkey, e.raddr, addSwap, addSwapMask, cmp, cmpMask)
		if err := t.append(h, nil); err != nil {
			return err
		}
		t.cur = nil // completes when the Atomic Response arrives
	case OpRDMARead:
		t.readMSN++
		// The ORD entry goes in before the request leaves, so the response
		// can never overtake it.
		qp.ordq.push(readJob{sqIdx: t.curIdx, buf: qp.sqSlot(t.curIdx)[0], stag: e.sinkKey, to: e.sinkTO, size: e.length})
		h := ddp.AppendUntagged(t.hdr[:0], true, rdmap.Ctrl(rdmap.OpReadRequest), 0, rdmap.QNReadRequest, t.readMSN, 0)
		h = rdmap.AppendReadRequest(h, e.sinkKey, e.sinkTO, e.length, e.rkey, e.raddr)
		if err := t.append(h, nil); err != nil {
			return err
		}
		t.cur = nil // completes when the last Read Response segment is placed
	case OpLocalInv, opRegMR:
		// Local operations take effect in SQ order, when the WRs before them
		// have been queued.
		ok, key := false, e.invKey
		if e.op == OpLocalInv {
			ok = qp.dev.invalidate(e.invKey, qp.pd, false)
		} else {
			x := qp.sqExtAt(t.curIdx)
			ok, key = qp.dev.fastReg(x.regMR, qp.pd, x.regBuf, x.regAcc, x.regSTag), x.regSTag
			// Dropped here, where the WR is ours, rather than at
			// retirement: a flush may retire it while we run.
			x.regMR, x.regBuf = nil, nil
		}
		t.cur = nil
		if !ok {
			// An error completion ends an RC QP, as in ibverbs (siw sends
			// a local catastrophic Terminate too): the WRs after it flush.
			// (e.op read first: once completed, the slot may be refilled.)
			op := e.op
			qp.txPublish() // retireLocked goes up to sqNext
			qp.completeSQ(t.curIdx, LocProtErr, false)
			qp.fatal(rdmap.Errorf(rdmap.ETypeLocalCatastrophic, rdmap.CodeCatastrophicStream,
				"%v of STag %#x failed", op, key), nil, 0)
			return nil
		}
		qp.txPublish()
		qp.completeSQ(t.curIdx, Success, false)
	}
	return nil
}

// txImmediate queues the Immediate Data message of e (RFC 7306 section 6):
// untagged, QN 0, the next Send MSN, 8 octets.
func (qp *QP) txImmediate(e *sqe, imm uint64) error {
	t := &qp.tx
	op := rdmap.OpImmediateData
	if e.solicit {
		op = rdmap.OpImmediateDataSE
	}
	t.sendMSN++
	h := ddp.AppendUntagged(t.hdr[:0], true, rdmap.Ctrl(op), 0, rdmap.QNSend, t.sendMSN, 0)
	h = rdmap.AppendImmediate(h, imm)
	return t.append(h, nil)
}

// txQueued records that the WR in progress is queued whole: it completes
// once the flush that carries its last octets succeeds, or, when the Writer
// holds its own copy of everything queued, possibly at once (below).
//
// A Send or Write completion means that the application's buffer is free
// again, nothing about the peer (iWARP, as siw: data handed to TCP is not
// yet delivered either). When its payload was copied (small payloads and
// inline data, mpa.Writer.Copied) that is true before the write, so the WR
// completes then, and the poster refills the queue while the write runs,
// which is a system call with, on loopback, the receiver's TCP work in it:
// a stream of small Writes at perftest's window of 128 went 1.2-1.3x
// faster. What such WRs leave in the Writer still goes out before our FIN
// (Close, Disconnect: txFIN) unless the connection fails, as what TCP holds
// would. A small signaled WR completes at once while the loop is gathering
// (less than txGather queued) and more wait behind it, so that the write
// is not imminent. Otherwise it completes at the write: a WR the
// write follows at once, so that waking its waiter does not delay it on
// the wire, and large messages, whose queue holds more than a batch, so
// that the poster is woken once a write rather than once a message (64 KiB
// Sends cost 7 % more CPU completing early). Silent WRs retire with the
// next completion or at the write.
func (qp *QP) txQueued() {
	t := &qp.tx
	idx := t.curIdx
	t.flushTo = idx + 1
	t.cur = nil
	if t.w.Copied() {
		t.copiedTo = t.flushTo
		e := &qp.sq[idx%uint64(len(qp.sq))]
		if e.signaled && e.length < txGather && t.w.Buffered() < txGather && t.flushTo < t.sqSeen {
			qp.txCompleted()
		}
	}
}

// txCompleted completes the Sends and Writes a successful flush handed to
// TCP (iWARP completes them then, as siw does), and those the Writer holds
// copies of (txQueued).
func (qp *QP) txCompleted() {
	t := &qp.tx
	qp.txPublish() // retireLocked goes up to sqNext
	t.doneAt = t.w.Written()
	if qp.sqWritten.Load() != t.writtenTo { // a locked store only when it moved (txRun calls twice)
		qp.sqWritten.Store(t.writtenTo)
	}
	to := max(t.writtenTo, t.copiedTo)
	if t.doneTo >= to {
		return
	}
	qp.sqMu.Lock()
	t.doneTo = to
	qp.sqDoneTo = to
	qp.retireLocked(false)
	qp.sqMu.Unlock()
}

// txReadResponse queues FPDUs of the Read Response in progress, or the
// Atomic Response (RFC 7306: untagged, QN 3) when the job is an atomic.
func (qp *QP) txReadResponse() error {
	t := &qp.tx
	j := t.rr
	if j.atomic {
		t.atomicMSN++
		h := ddp.AppendUntagged(t.hdr[:0], true, rdmap.Ctrl(rdmap.OpAtomicResponse), 0, rdmap.QNAtomicResponse, t.atomicMSN, 0)
		h = rdmap.AppendAtomicResponse(h, j.reqID, j.orig)
		if err := t.append(h, nil); err != nil {
			return err
		}
		t.rr = nil
		qp.irdq.pop()
		return nil
	}
	for t.w.Buffered() < t.batch {
		n := t.fit(min(len(j.buf)-t.rrOff, qp.mulpdu-ddp.TaggedHdrLen), ddp.TaggedHdrLen)
		last := t.rrOff+n == len(j.buf)
		w0, w1 := ddp.TaggedWords(last, rdmap.Ctrl(rdmap.OpReadResponse), j.stag, j.to+uint64(t.rrOff))
		if err := t.appendWords(ddp.TaggedHdrLen, w0, w1, 0, j.buf[t.rrOff:t.rrOff+n]); err != nil {
			return err
		}
		t.rrOff += n
		if last {
			t.rr = nil
			qp.irdq.pop() // frees an IRD slot for the peer
			return nil
		}
	}
	return nil
}

// termLinger bounds how long a Terminate may take to leave, and how long we
// wait for the peer to close after it.
const termLinger = 2 * time.Second

// txTerminate sends the Terminate, then half-closes the stream
// (RFC 5040 section 5.3: the stream is closed after a Terminate).
func (qp *QP) txTerminate(term []byte) {
	t := &qp.tx
	qp.conn.SetWriteDeadline(time.Now().Add(termLinger))
	t.flush() // FPDUs already queued go first, as on the wire they would
	t.append(rdmap.AppendTerminateDDP(t.hdr[:0]), term)
	t.flush()
	closeWrite(qp.conn)
}
