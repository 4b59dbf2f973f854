package verbs

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/goiwarp/iwarp/tcpx"
)

// rtrSTag is the STag of zero-length RTR Writes and Reads: never 0, which
// Chelsio rejects; siw uses 1 as well.
const rtrSTag = 1

// claim reserves an open IDLE QP for one Dial or Accept, before anything of
// theirs goes on the wire: a second start-up on the same QP, or one on a
// closed QP, is refused there rather than after our Request or Reply has
// gone out (the peer would then see a connection die at once, and a
// request taken by Accept could not be accepted with another QP). unclaim
// ends it; start, which the claim leads to, checks closed again, since
// Close may come in between.
func (qp *QP) claim(verb string) error {
	if qp.dev.isClosed() { // before startMu: no lock is taken under startMu but the QP's own
		return fmt.Errorf("%w: %s on a QP of a closed device", ErrClosed, verb)
	}
	qp.startMu.Lock()
	defer qp.startMu.Unlock()
	switch {
	case qp.closed:
		return fmt.Errorf("%w: %s on a closed QP", ErrClosed, verb)
	case qp.claimed:
		return fmt.Errorf("%w: %s on a QP another Dial or Accept is connecting", ErrQPState, verb)
	case qp.State() != StateIdle || qp.conn != nil:
		return fmt.Errorf("%w: %s on a QP in %s", ErrQPState, verb, qp.State())
	}
	qp.claimed = true
	return nil
}

func (qp *QP) unclaim() {
	qp.startMu.Lock()
	qp.claimed = false
	qp.startMu.Unlock()
}

// start moves an IDLE QP to RTS on an established MPA connection and starts
// its loops. initiator says which side of the start-up we were.
func (qp *QP) start(conn net.Conn, p mpa.Params, cfg ConnConfig, initiator bool) error {
	qp.startMu.Lock()
	defer qp.startMu.Unlock()
	if qp.closed {
		return fmt.Errorf("%w: QP is closed", ErrClosed)
	}
	if qp.State() != StateIdle || qp.conn != nil {
		return fmt.Errorf("%w: QP in %s", ErrQPState, qp.State())
	}
	// Everything is set up before the state says RTS: PostSend reads it
	// without a lock.
	qp.conn = conn
	qp.sock = sockOf(conn)
	if ts, ok := conn.(*tlsStream); ok {
		st := ts.ConnectionState()
		qp.tlsState = &st
	}
	qp.params = p
	emss := 1460 // RFC 5044 section 4.5 lets MPA fall back on the MTU's MSS
	if qp.sock != nil {
		if n, err := tcpx.EMSS(qp.sock); err == nil && n > 0 {
			emss = n
		}
	}
	qp.mulpdu = mpa.MULPDU(emss, p.MarkersTx)
	if cfg.MaxFPDU > 0 {
		qp.mulpdu = min(qp.mulpdu, mpa.MULPDU(cfg.MaxFPDU, p.MarkersTx))
	}
	// An FPDU must carry the largest header and some payload.
	qp.mulpdu = max(qp.mulpdu, 128)
	qp.ird, qp.ord = int(p.IRD), int(p.ORD)
	qp.ext = cfg.RFC7306
	qp.irdq.init(qp.ird)
	qp.ordq.init(qp.ord + 1) // one more for a Read RTR
	qp.tx.w = mpa.NewWriter(conn, p.CRC, p.MarkersTx)
	qp.tx.stats = &qp.txStats
	qp.tx.batch = txBatch
	if cfg.SegmentPerFPDU {
		qp.tx.batch = 1
		qp.tx.align = qp.sock
	}
	qp.rx.r = mpa.NewReader(conn, p.CRC, p.MarkersRx, cfg.ReadBuffer, nil)
	qp.rx.r.SetOnWait(qp.rxKick)
	qp.rx.sendMSN, qp.rx.readMSN, qp.rx.atomicMSN = 1, 1, 1
	qp.rtrDone = make(chan struct{})
	if p.P2P && !initiator {
		qp.rx.expectRTR = p.RTR
	} else {
		close(qp.rtrDone)
	}
	qp.holdFirst(p, cfg.FirstFPDUHold, initiator)
	if p.P2P && initiator {
		if err := qp.sendRTR(p.RTR); err != nil {
			qp.unstart()
			return err
		}
	}
	qp.loopsLeft.Store(2)
	qp.wg.Add(1)
	qp.txWG.Add(1)
	qp.state.Store(int32(StateRTS))
	qp.startRespWatch(cfg.ResponseTimeout) // before the loops, whose end stops it
	go qp.txLoop()
	go qp.rxLoop()
	return nil
}

// unstart undoes what start set up before it failed, so that the QP is
// IDLE as before it: the caller closes conn, and the QP may connect again
// (nothing of this attempt, such as the Read RTR on the ORD queue or the
// MSNs it used, may reach the next), or Close flushes it.
func (qp *QP) unstart() {
	qp.stopHold()
	qp.holdSQ.Store(false)
	qp.nudge.Store(false)
	qp.ordq.clear()
	qp.irdq.clear()
	qp.tx, qp.rx = txState{}, rxState{} // the Writer, Reader and conn with them
	qp.conn, qp.sock, qp.tlsState = nil, nil, nil
}

// holdFirst holds the send queue back when this side must not send first
// (see ConnConfig.FirstFPDUHold): released by releaseHold on the event, or
// by the fallback timer.
func (qp *QP) holdFirst(p mpa.Params, fallback time.Duration, initiator bool) {
	expire := qp.releaseHold
	switch {
	case !initiator && p.P2P:
		fallback = -1 // the RTR or nothing: awaitRTR bounds the wait
	case !initiator:
		qp.rx.holdTillFPDU = true
	case p.P2P && p.RTR == mpa.RTRRead:
		expire = func() { qp.nudgeRTR(fallback) }
	default:
		return
	}
	qp.holdSQ.Store(true)
	if fallback > 0 {
		qp.holdMu.Lock()
		qp.holdTimer = time.AfterFunc(fallback, expire)
		qp.holdMu.Unlock()
	}
}

// nudgeRTR runs when our Read RTR has gone unanswered for a fallback: the
// transmit loop sends a zero-length RDMA Write (RFC 5041 section 5.2: a
// zero-length tagged message names no buffer and is not checked), whose
// arrival makes a peer that left the RTR unread read both — Linux siw
// (6.1) does when the RTR arrived before its QP took the socket, and would
// otherwise never answer, nor report the connection established, until we
// sent something else. One more fallback for the answer, then the hold
// ends anyway.
func (qp *QP) nudgeRTR(fallback time.Duration) {
	if !qp.holdSQ.Load() {
		return
	}
	qp.nudge.Store(true)
	wake(qp.wake)
	qp.holdMu.Lock()
	qp.holdTimer = time.AfterFunc(fallback, qp.releaseHold)
	qp.holdMu.Unlock()
}

// stopHold stops a hold's fallback timer.
func (qp *QP) stopHold() {
	qp.holdMu.Lock()
	if qp.holdTimer != nil {
		qp.holdTimer.Stop()
	}
	qp.holdMu.Unlock()
}

// releaseHold lets the send queue go.
func (qp *QP) releaseHold() {
	if qp.holdSQ.CompareAndSwap(true, false) {
		wake(qp.wake)
	}
}

// sendRTR sends the initiator's RTR message, the first FPDU of a
// peer-to-peer connection (RFC 6581 section 9.2).
func (qp *QP) sendRTR(r mpa.RTR) error {
	t := &qp.tx
	var h []byte
	switch r {
	case mpa.RTRSend:
		t.sendMSN = 1
		h = ddp.AppendUntagged(t.hdr[:0], true, rdmap.Ctrl(rdmap.OpSend), 0, rdmap.QNSend, 1, 0)
	case mpa.RTRWrite:
		h = ddp.AppendTagged(t.hdr[:0], true, rdmap.Ctrl(rdmap.OpWrite), rtrSTag, 0)
	case mpa.RTRRead:
		t.readMSN = 1
		qp.ordq.push(readJob{rtr: true, stag: rtrSTag})
		h = ddp.AppendUntagged(t.hdr[:0], true, rdmap.Ctrl(rdmap.OpReadRequest), 0, rdmap.QNReadRequest, 1, 0)
		h = rdmap.AppendReadRequest(h, rtrSTag, 0, 0, rtrSTag, 0)
	default:
		return fmt.Errorf("verbs: no RTR type negotiated")
	}
	if err := t.append(h, nil); err != nil {
		return err
	}
	return t.flush()
}

// rxRTR checks that the first FPDU of a peer-to-peer connection is the RTR
// message we agreed on; anything else is "no matching RTR option".
func (qp *QP) rxRTR(tagged bool, op rdmap.Opcode, n int) (handled bool, err error) {
	x := &qp.rx
	want := x.expectRTR
	x.expectRTR = mpa.RTRNone
	if !tagged && op == rdmap.OpTerminate {
		// RFC 6581 section 9.2: an initiator that can send none of our RTRs
		// sends a Terminate instead. It is the peer's: never echo it; the
		// usual path records it and closes, and Accept reports it.
		return false, nil
	}
	ok := n == 0 || (want == mpa.RTRRead && n == rdmap.ReadRequestLen)
	switch want {
	case mpa.RTRSend:
		ok = ok && !tagged && op == rdmap.OpSend
		if ok {
			if err := ddp.CheckMSN(ddp.Untagged(x.hdr[:x.hl]).MSN(), x.sendMSN); err != nil {
				return true, err
			}
			x.sendMSN++ // the RTR Send takes MSN 1 but no receive buffer
			x.rtrSeen = true
			return true, nil
		}
	case mpa.RTRWrite:
		ok = ok && tagged && op == rdmap.OpWrite
	case mpa.RTRRead:
		ok = ok && !tagged && op == rdmap.OpReadRequest
	}
	if !ok {
		return true, &mpa.Error{Code: mpa.CodeNoMatchingRTR, Msg: fmt.Sprintf("first message is %v, agreed RTR %v", op, want)}
	}
	x.rtrSeen = true
	return false, nil // a zero-length Write or Read Request: the usual path handles it
}

// awaitRTR waits for the initiator's RTR message. rtrDone is closed only for
// an RTR that passed all checks, its CRC included (RFC 5044 section 7.1.2
// rule 4: "receive and validate"); anything else ends the QP, and Accept
// reports why.
func (qp *QP) awaitRTR(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ctx.Done():
		qp.Abort()
		return fmt.Errorf("verbs: waiting for the RTR message: %w", ctx.Err())
	case <-qp.rtrDone:
		// The RTR checked out: Accept succeeds unless the QP has already
		// ended (a failure just after it is the connected QP's to report).
		select {
		case <-qp.done:
			return qp.Err()
		default:
			return nil
		}
	case <-qp.done:
		return qp.Err()
	case <-t.C:
		qp.fatal(&mpa.Error{Code: mpa.CodeNoMatchingRTR, Msg: "no RTR message in time"}, nil, 0)
		<-qp.done
		return qp.Err()
	}
}

// terminateFPDU returns the DDP header and body of a Terminate for err,
// with no offending segment (start-up errors).
func terminateFPDU(err error) (hdr, body []byte) {
	hdr = rdmap.AppendTerminateDDP(nil)
	t, _ := rdmap.NewTerminate(err, nil, 0)
	return hdr, t.Append(nil)
}

// earlyData returns the octets queued on conn beyond the MPA Request (0 if
// the platform cannot tell); inside TLS, whether there are any.
func earlyData(conn net.Conn) int {
	if ts, ok := conn.(*tlsStream); ok {
		return tlsEarlyData(ts)
	}
	n, err := tcpx.Buffered(conn.(*net.TCPConn))
	if err != nil {
		return 0
	}
	return n
}

// startupTerminate sends the Terminate for a start-up error (layer LLP) as
// the first and only FPDU, with markers if the responder asked for them (RFC
// 5044 section 7.1.2 rule 7: then the first octets are the marker).
func startupTerminate(conn net.Conn, crc, markers bool, err error) {
	w := mpa.NewWriter(conn, crc, markers)
	hdr, term := terminateFPDU(err)
	conn.SetWriteDeadline(time.Now().Add(time.Second))
	w.Append(hdr, term)
	w.Flush()
}
