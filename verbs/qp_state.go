package verbs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/goiwarp/iwarp/tcpx"
)

// Reasons a QP leaves RTS, from QP.Err.
var (
	// ErrConnLost: the TCP connection failed (reset, timeout, broken pipe).
	ErrConnLost = errors.New("verbs: connection lost")
	// ErrDisconnected: the connection was closed in an orderly way, by us or
	// by the peer.
	ErrDisconnected = errors.New("verbs: disconnected")
	// ErrAborted: this side reset the connection: QP.Abort, or a
	// Disconnect whose ctx ended. It Is ErrDisconnected too (no failure
	// ended the QP), but the peer saw a reset, not an orderly close.
	ErrAborted = errors.New("verbs: connection reset by this side")
)

// abortedError is a reset of our own: ErrAborted, which Is ErrDisconnected.
type abortedError struct{ err error }

func (e *abortedError) Error() string   { return e.err.Error() }
func (e *abortedError) Unwrap() []error { return []error{e.err, ErrDisconnected} }

// ErrUnanswered: the peer closed its stream (FIN) while RDMA Reads or
// atomics of ours awaited their responses, or were posted and not yet
// sent, which can then never be answered: a
// peer that crashed (the kernel closes a killed process's sockets with a
// FIN) or closed without waiting for them. No orderly close, then: the
// QP's error Is ErrConnLost too, and those WRs flush.
var ErrUnanswered = errors.New("verbs: the peer closed the connection with RDMA Reads or atomics unanswered")

// lostError is a QP's error that has a cause of its own and Is ErrConnLost.
type lostError struct{ err error }

func (e *lostError) Error() string   { return e.err.Error() }
func (e *lostError) Unwrap() []error { return []error{e.err, ErrConnLost} }

// TerminateError is a QP's fatal error that went through a Terminate
// message: one we sent (Remote false) for an error we detected, or one the
// peer sent (Remote true), which we never echo.
type TerminateError struct {
	Remote    bool
	Terminate rdmap.Terminate
	Err       error // the local error behind a Terminate we sent
}

func (e *TerminateError) Error() string {
	if e.Remote {
		c := e.Terminate.Cause()
		s := "verbs: peer sent Terminate: " + c.String()
		if c == (rdmap.Cause{Layer: rdmap.LayerDDP, EType: uint8(ddp.ETypeTagged), Code: ddp.CodeInvalidSTag}) {
			s += " (a wrong STag, or a region registered without the access the operation needs: " +
				"RFC 5041 has one code for both)"
		}
		return s
	}
	return fmt.Sprintf("verbs: sent Terminate (%s): %v", e.Terminate.Cause().String(), e.Err)
}

func (e *TerminateError) Unwrap() error { return e.Err }

// Is makes a Terminate we sent because the TCP stream broke inside an FPDU
// (RFC 5044 LLP error 0x01, "TCP connection closed, terminated or lost")
// match ErrConnLost, so that errors.Is(qp.Err(), ErrConnLost) finds every
// lost connection, wherever in the stream it broke.
func (e *TerminateError) Is(target error) bool {
	return target == ErrConnLost && !e.Remote && errors.Is(e.Err, &mpa.Error{Code: mpa.CodeStreamLost})
}

// setError records the first fatal cause and moves the QP to ERROR. It
// reports whether this call was the first.
func (qp *QP) setError(err error) bool {
	first := false
	qp.errOnce.Do(func() {
		first = true
		qp.err = err
		qp.errSet.Store(true)
		qp.state.Store(int32(StateError))
		qp.stopLoops()
		if qp.conn != nil {
			// Give the peer termLinger to close; never wait for it longer.
			qp.conn.SetDeadline(time.Now().Add(termLinger))
		}
	})
	return first
}

// fatal handles a protocol error we detected: the Terminate goes to the
// transmit loop, which sends it and half-closes; the QP moves to TERMINATE
// and then ERROR. hdr is the offending segment's DDP/RDMAP header as far as
// it was read, ulpduLen its length.
func (qp *QP) fatal(err error, hdr []byte, ulpduLen int) {
	qp.errOnce.Do(func() {
		t, _ := rdmap.NewTerminate(err, hdr, ulpduLen)
		qp.err = &TerminateError{Terminate: t, Err: err}
		qp.errSet.Store(true)
		qp.state.Store(int32(StateTerminate))
		qp.termMu.Lock()
		qp.term = t.Append(nil)
		qp.termMu.Unlock()
		qp.termSet.Store(true)
		wake(qp.wake)
		// Bound the exchange: the peer gets termLinger to read the Terminate
		// and close.
		qp.conn.SetDeadline(time.Now().Add(termLinger))
	})
}

// connLost records a failed connection.
func (qp *QP) connLost(err error) {
	if qp.setError(fmt.Errorf("%w: %w", ErrConnLost, err)) {
		qp.conn.SetDeadline(time.Now()) // unblock the other loop
	}
}

// disconnected records an orderly close (end of stream between FPDUs).
func (qp *QP) disconnected() {
	qp.setError(ErrDisconnected)
}

// peerEnded records the end of a connection the peer closed, once what
// it asked for before its FIN is written: an orderly close, unless Reads or
// atomics of ours are left that no response can now answer (a crashed
// peer's kernel sends the same FIN), or the start-up's Read RTR, which a
// peer that runs always answers. A FIN that answers Disconnect's is
// orderly: Disconnect waited for our Reads, and an RTR still unanswered
// then is no loss. Called with txMu held.
//
// Reads and atomics posted but not yet sent count too: the FIN of a peer
// killed an instant after they were posted is the same FIN, and the user
// sees them flush all the same.
func (qp *QP) peerEnded() {
	if qp.tx.finSent {
		qp.disconnected()
		return
	}
	n, unsent := qp.ordq.len(), qp.unsentResponded()
	if n == 0 && unsent == 0 {
		qp.disconnected()
		return
	}
	ops := qp.ordq.ops()
	detail := fmt.Sprintf("%d outstanding", ops)
	if ops < n {
		detail = fmt.Sprintf("the start-up's Read RTR and %d more outstanding", ops)
	}
	if unsent > 0 {
		detail += fmt.Sprintf(", %d posted and not yet sent", unsent)
	}
	qp.setError(&lostError{fmt.Errorf("%w (%s)", ErrUnanswered, detail)})
}

// unsentResponded counts the Reads and atomics in the SQ that the
// transmit side has not taken yet. Called with txMu held.
func (qp *QP) unsentResponded() int {
	qp.sqMu.Lock()
	defer qp.sqMu.Unlock()
	n := 0
	for i := qp.tx.next; i < qp.sqTail; i++ {
		if qp.sq[i%uint64(len(qp.sq))].op.responded() {
			n++
		}
	}
	return n
}

// peerClosed handles the peer's orderly close (FIN between FPDUs, seen by
// the receive loop). A half-closed TCP connection still carries data the
// other way (RFC 9293 section 3.6), so the work the peer asked for before
// its FIN is not dropped: the transmit loop finishes the message it is in,
// sends every Read and Atomic Response owed, starts no new WR, and then
// records the close (txLoop). Whether a WR completes or flushes is thus
// decided by what was written, never by a clock; the write deadline only
// bounds a peer that stops reading.
func (qp *QP) peerClosed() {
	qp.conn.SetWriteDeadline(time.Now().Add(termLinger))
	qp.peerFIN.Store(true)
	wake(qp.wake)
}

// termPending reports whether a Terminate is due or was sent; the transmit
// path asks once per FPDU, so it takes no lock.
func (qp *QP) termPending() bool { return qp.termSet.Load() }

// takeTerm returns the Terminate to send, once.
func (qp *QP) takeTerm() []byte {
	qp.termMu.Lock()
	defer qp.termMu.Unlock()
	t := qp.term
	if t != nil {
		qp.term = []byte{} // non-nil: still pending for termPending, but sent
	}
	if len(t) == 0 {
		return nil
	}
	return t
}

func (qp *QP) stopLoops() {
	qp.stopOnce.Do(func() { close(qp.stop) })
}

// loopDone runs as each loop exits; the last one closes the socket and
// flushes every outstanding WR.
func (qp *QP) loopDone() {
	if qp.loopsLeft.Add(-1) != 0 {
		return
	}
	qp.setError(ErrDisconnected) // no-op when a cause is recorded
	qp.state.Store(int32(StateError))
	qp.stopHold()
	qp.stopRespWatch()
	if ts, ok := qp.conn.(*tlsStream); ok && (orderly(qp.Err()) || qp.peerFIN.Load()) {
		// An orderly end of ours (a Close without Disconnect too), or
		// our FIN answering the peer's orderly one, even when its FIN
		// left Reads of ours unanswered (ErrUnanswered is our verdict,
		// not the peer's): the peer tells these from a truncation by the
		// close_notify (tls_close.go).
		ts.closeNotify(tlsCloseNotifyWait)
	}
	qp.conn.Close()
	// A send in progress on another goroutine (PostSend's txInline, the
	// receive loop's rxAnswer) holds txMu and reads its WR's gather list,
	// which retiring clears: wait for it. Its write fails at once on the
	// closed socket.
	qp.txMu.Lock()
	qp.flushAll()
	qp.txMu.Unlock()
	close(qp.done)
	qp.wg.Done()
}

// flushAll completes every outstanding WR with WRFlushErr, in order, and
// makes later posts flush at once.
func (qp *QP) flushAll() {
	blamed, blame := qp.blamedWR()
	qp.sqMu.Lock()
	written := qp.sqWritten.Load()
	for i := qp.sqHead; i < qp.sqTail; i++ {
		e := &qp.sq[i%uint64(len(qp.sq))]
		switch {
		case qp.sqeDone(i, e):
		case i < written && e.op.doneWhenWritten():
			e.done = true // written in full before the error: a success, as it would have been
		case i == blamed && blame != Success:
			e.done, e.status = true, blame
		default:
			e.done, e.status = true, WRFlushErr
		}
	}
	qp.sqNext.Store(qp.sqTail)
	qp.retireLocked(false)
	qp.sqFlushed = true
	// The STag caches let go of their regions: an application that holds
	// on to the dead QP must not keep a deregistered region's memory
	// alive through it. (Nothing looks them up any more: the loops are
	// done, and posts flush.)
	qp.sqStags = stagCache{}
	qp.sqMu.Unlock()
	qp.rx.stags = stagCache{}

	flushRecv := func(id uint64) { qp.recvCQ.push(WC{ID: id, Status: WRFlushErr, Opcode: WCRecv, QP: qp}) }
	if qp.rx.recvOn {
		flushRecv(qp.rx.recv.id)
		qp.rx.recvOn = false
		qp.rx.recv.release()
	}
	if qp.srq == nil {
		qp.rq.drain(flushRecv)
	}
	qp.irdq.clear()
	qp.ordq.clear()
}

// blamedWR returns the SQ index of the WR a peer's Terminate blames, and the
// status it completes with, as ibverbs reports the failing request with a
// remote status and flushes the rest. A Terminate blames a request of ours
// only when it carries it: with R, our Read Request header, or a terminated
// untagged DDP header on the Read Request queue (QN 1): then our oldest
// outstanding Read or atomic, the one the peer was checking, completes with
// RemAccessErr for a remote protection error, RemInvReqErr for a DDP error
// (no IRD left, a bad MSN) and RemOpErr otherwise. Anything else blames
// none: a Write or Send completed when it was handed to TCP, as in siw.
func (qp *QP) blamedWR() (uint64, WCStatus) {
	j := qp.ordq.front()
	if errors.Is(qp.err, ErrResponseTimeout) && j != nil && !j.rtr {
		return j.sqIdx, RetryExcErr // the one the peer left unanswered longest
	}
	te, ok := qp.err.(*TerminateError)
	if !ok || !te.Remote || j == nil || j.rtr {
		return 0, Success
	}
	t := te.Terminate
	onQN1 := len(t.DDPHdr) >= ddp.UntaggedHdrLen && t.DDPHdr[0]&ddp.FlagTagged == 0 &&
		ddp.Untagged(t.DDPHdr).QN() == rdmap.QNReadRequest
	if !(t.R && len(t.RDMAPHdr) >= rdmap.ReadRequestLen) && !onQN1 {
		return 0, Success
	}
	switch {
	case t.Layer == rdmap.LayerRDMAP && t.EType == rdmap.ETypeRemoteProtection:
		return j.sqIdx, RemAccessErr
	case t.Layer == rdmap.LayerDDP:
		return j.sqIdx, RemInvReqErr
	}
	return j.sqIdx, RemOpErr
}

// completeSQ marks SQ entry idx done and retires what it can; rx: the
// receive loop calls, which may hold the CQ's wake-up back (cq_mod.go).
func (qp *QP) completeSQ(idx uint64, st WCStatus, rx bool) {
	qp.sqMu.Lock()
	e := &qp.sq[idx%uint64(len(qp.sq))]
	e.done, e.status = true, st
	qp.retireLocked(rx)
	qp.sqMu.Unlock()
}

// retireLocked delivers completions from the head of the SQ, in order:
// ibverbs promises RC send completions in posting order even though an
// RDMA Read completes later than a Write posted after it.
func (qp *QP) retireLocked(rx bool) {
	for next := qp.sqNext.Load(); qp.sqHead != next; {
		e := &qp.sq[qp.sqHead%uint64(len(qp.sq))]
		if !qp.sqeDone(qp.sqHead, e) {
			break
		}
		if e.signaled || e.status != Success {
			if !qp.sendCQ.add(WC{ID: e.id, Status: e.status, Opcode: e.op.wcOp(), ByteLen: uint32(e.length), QP: qp}, rx) {
				qp.fatal(errCQOverrun, nil, 0) // takes no lock of the SQ's
			}
		}
		qp.sqHead++
	}
	if qp.sqHead == qp.sqPub.Load() { // sqTail, on the posters' line
		// Drop the retired WRs' references to user memory once the SQ is
		// empty, not one WR at a time: a poster on another core refills
		// those slots, and would take each line back from this one.
		// While WRs remain (a stream, an outstanding Read), a retired
		// slot keeps its references until the SQ empties or a post
		// reuses the slot, a lap at most: posters clear what a WR leaves
		// unused (enqueue, PostRegMR).
		from := max(qp.sqCleared, qp.sqHead-min(qp.sqHead, uint64(len(qp.sq))))
		for i := from; i < qp.sqHead; i++ {
			clear(qp.sqSlot(i))
		}
		qp.sqCleared = qp.sqHead
		if qp.sqIdle != nil {
			close(qp.sqIdle) // Disconnect waits for it
			qp.sqIdle = nil
		}
	}
}

// sqeDone reports whether SQ entry e, index idx, is done: marked so, or
// below sqDoneTo and complete once written. Called with sqMu held.
func (qp *QP) sqeDone(idx uint64, e *sqe) bool {
	return e.done || idx < qp.sqDoneTo && e.op.doneWhenWritten()
}

// Close closes the QP: if it is connected, the connection ends in order
// (FIN, as net.Conn's Close: octets already handed to TCP still go out, and
// so do those the stack holds of WRs that completed from its copy, which
// the transmit loop writes first, for 2 s at most), work requests not yet
// written and posted receives complete with WRFlushErr, and the QP's
// goroutines are gone when Close returns; the QP's slot goes back to the
// device. It does not wait for the peer: Disconnect does, and for the send
// queue to drain. A QP that never connected goes to ERROR the same way:
// its receives flush, Err wraps ErrClosed and Done closes. Safe to call
// more than once.
func (qp *QP) Close() error { return qp.close(nil) }

// Abort is Close with a reset (RST) instead of a FIN, as ibverbs users
// know from destroying a QP in RTS: octets still queued in TCP are lost.
// Err then Is ErrAborted (and ErrDisconnected), unless the QP had ended
// before.
func (qp *QP) Abort() error { return qp.close(&abortedError{ErrAborted}) }

// close ends the QP with a FIN, or with a reset if aborted is the error to
// record.
func (qp *QP) close(aborted error) error {
	qp.startMu.Lock()
	conn := qp.conn
	if conn == nil {
		// In the same critical section as the look: a Dial or Accept
		// under way now fails in start rather than run a QP that nothing
		// tracks any more.
		qp.closed = true
	}
	qp.startMu.Unlock()
	if conn == nil {
		qp.closeIdle()
		qp.closeResources()
		return nil
	}
	why := ErrDisconnected
	if aborted != nil {
		why = aborted
	}
	if qp.setError(why) {
		if aborted != nil {
			abort(conn)
		} else {
			// The transmit loop writes what it holds first: WRs that
			// completed from the Writer's copy may be among it (txQueued).
			// setError's deadline bounds that write.
			qp.txWG.Wait()
			if ts, ok := conn.(*tlsStream); ok {
				ts.closeNotify(tlsCloseNotifyWait) // as loopDone: orderly
			}
			conn.Close()
		}
	}
	qp.wg.Wait()
	qp.closeResources()
	return nil
}

// closeIdle ends a QP that never connected as loopDone ends a connected
// one: ERROR, receives posted before flushed, later posts flushed at once,
// Err set and Done closed, so that code waiting on Done (an SRQ's user,
// Device.Close's caller) does not wait for a connection that cannot come.
func (qp *QP) closeIdle() {
	// Flushed before ERROR is seen: PostSend and PostRegMR refuse an IDLE
	// QP, so nothing is on the SQ, and a post that sees ERROR finds it
	// flushed and completes at once rather than wait for loops that never
	// run.
	qp.sqMu.Lock()
	qp.sqFlushed = true
	qp.sqMu.Unlock()
	if !qp.setError(fmt.Errorf("%w: QP closed before it connected", ErrClosed)) {
		return // closed before
	}
	if qp.srq == nil {
		qp.rq.drain(func(id uint64) { qp.recvCQ.push(WC{ID: id, Status: WRFlushErr, Opcode: WCRecv, QP: qp}) })
	}
	close(qp.done)
}

// closeResources gives the QP's slot back to the device, once, and keeps a
// closed, never-connected QP from connecting later.
func (qp *QP) closeResources() {
	qp.closeOnce.Do(func() {
		qp.startMu.Lock()
		qp.closed = true
		qp.startMu.Unlock()
		qp.dev.mu.Lock()
		qp.dev.nqp--
		delete(qp.dev.qps, qp)
		qp.unuse()
		qp.dev.mu.Unlock()
	})
}

// Disconnect closes the connection in order and waits for both sides: once
// every posted send WR has completed it sends FIN, the peer (which sends
// what it owes us first) closes its side, and both QPs reach ERROR,
// flushing the receives still posted; then it releases the QP as Close. If
// ctx ends first, the connection is reset (Abort), the error wraps
// ctx.Err(), and Err Is ErrAborted. If the QP has failed, before or
// during Disconnect, it returns Err: nil means the orderly close happened.
func (qp *QP) Disconnect(ctx context.Context) error {
	conn := qp.connOf()
	if conn == nil {
		return fmt.Errorf("%w: not connected", ErrQPState)
	}
	qp.state.CompareAndSwap(int32(StateRTS), int32(StateClosing))
	qp.sqMu.Lock()
	drained := qp.sqHead == qp.sqTail
	if !drained && qp.sqIdle == nil {
		qp.sqIdle = make(chan struct{})
	}
	idle := qp.sqIdle
	qp.sqMu.Unlock()
	if !drained {
		if err := qp.disconnectWait(ctx, idle, "waiting for the send queue"); err != nil {
			return err
		}
	}
	// The transmit loop sends the FIN after what it still holds (txFIN).
	fin := make(chan struct{})
	if !qp.finReq.CompareAndSwap(nil, &fin) {
		fin = *qp.finReq.Load()
	}
	wake(qp.wake)
	if err := qp.disconnectWait(ctx, fin, "waiting to write what is queued"); err != nil {
		return err
	}
	if err := qp.disconnectWait(ctx, qp.done, "waiting for the peer to close"); err != nil {
		return err
	}
	qp.Close()
	if err := qp.Err(); !errors.Is(err, ErrDisconnected) || errors.Is(err, ErrAborted) {
		return err // failed, or reset, before the orderly close could finish
	}
	return nil
}

// disconnectWait waits for ch or the QP's end; if ctx ends first it resets
// the connection and says what Disconnect was waiting for.
func (qp *QP) disconnectWait(ctx context.Context, ch <-chan struct{}, what string) error {
	select {
	case <-ch:
	case <-qp.done:
	case <-ctx.Done():
		// The QP's error names the cause but does not wrap ctx.Err(): other
		// goroutines that ask Err must not take the deadline for theirs.
		qp.close(&abortedError{fmt.Errorf("%w: Disconnect %s: %v", ErrAborted, what, ctx.Err())})
		return fmt.Errorf("verbs: disconnect: %s: %w; connection reset", what, ctx.Err())
	}
	return nil
}

// closeWrite half-closes a TCP connection (FIN).
func closeWrite(c net.Conn) {
	if tc, ok := c.(interface{ CloseWrite() error }); ok {
		tc.CloseWrite()
		return
	}
	c.Close()
}

// abort closes a connection with a reset (tcpx.Abort).
func abort(c net.Conn) {
	if tc := sockOf(c); tc != nil {
		tcpx.Abort(tc)
		return
	}
	c.Close()
}

func isNetErr(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe)
}
