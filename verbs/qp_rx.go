package verbs

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/goiwarp/iwarp/tcpx"
)

// rxState is owned by the receive loop.
type rxState struct {
	r   *mpa.Reader
	hdr [mpa.MaxHeader]byte // the current segment's DDP/RDMAP header
	hl  int                 // its length

	sendMSN   uint32 // next expected MSN on QN 0 (Sends, Immediate Data)
	readMSN   uint32 // next expected MSN on QN 1 (Read and Atomic Requests)
	atomicMSN uint32 // next expected MSN on QN 3 (Atomic Responses)

	// Untagged message in progress on QN 0, with the buffer it lands in.
	// Tagged and untagged contexts are separate: a Send may arrive between
	// two segments of a Read Response (Chelsio does this).
	recv    recvBuf
	recvOn  bool
	recvOff int

	readOff uint32   // octets of the oldest outstanding Read placed so far
	readJob *readJob // that Read's ORD queue slot, from its response's first segment to its pop
	readMR  *MR      // the region of that Read's sink, looked up at its first placement

	writeOpen bool // an RDMA Write has placed a segment and not yet its last (MR.Placed)

	stags stagCache // the region of the last RDMA Write

	sinceKick int // octets read since the loop last woke CQ waiters it held back (cq_mod.go)
	// seen counts the FPDUs received; rxPublish stores it in qp.rxSeen,
	// not every FPDU: a locked add per FPDU waited for the stores of the
	// payload copied before it.
	seen uint64
	// answerDue: Read or Atomic Responses were queued while more requests
	// were buffered; rxLoop has rxAnswer send them when the buffer runs
	// out of whole FPDUs, in one write.
	answerDue bool

	expectRTR    mpa.RTR // peer-to-peer responder: the RTR the first FPDU must be
	rtrSeen      bool    // the current FPDU is that RTR: close rtrDone once it checked out
	holdTillFPDU bool    // responder: the first FPDU that checks out releases the send queue

	// What the current segment does once its CRC has checked out: payload
	// may be placed before the CRC arrives, but nothing a segment causes
	// (a completion, a Read Response, an invalidation) happens before.
	act     rxAct
	actWC   WC
	actInv  bool
	actJob  readJob
	actTerm rdmap.Terminate
	actMem  []byte // an Atomic Request's target
	actImm  [8]byte
}

type rxAct uint8

const (
	actNone       rxAct = iota
	actRecvDone         // a Send's last segment: complete the receive (and invalidate)
	actReadDone         // a Read Response's last segment: complete our Read
	actReadReq          // a Read Request: queue its response
	actTerm             // a Terminate from the peer
	actAtomicReq        // an Atomic Request: perform it, queue its response
	actAtomicDone       // an Atomic Response: complete our atomic
)

// rxLoop is the receive goroutine of a connected QP.
func (qp *QP) rxLoop() {
	defer qp.loopDone()
	x := &qp.rx
	for {
		n, err := x.r.Next()
		if err == nil {
			// Counted before anything is placed or completed: an
			// application that sees this FPDU's data and answers at once
			// must find its answer sent inline (txInline).
			// Published now if the transmit side has run since the last
			// store (txSend then goes inline only if rxSeen moved on);
			// otherwise rxSeen differs from txRxSeen already.
			if x.seen++; qp.txRxSeen.Load() == qp.rxSeen.Load() {
				qp.rxPublish()
			}
			if x.sinceKick += n; x.sinceKick >= moderateMax {
				qp.rxKick()
			}
			err = qp.rxSegment(n)
		}
		if err == nil && x.r.InFPDU() { // (the data paths finish a whole FPDU with ReadLast)
			err = x.r.Finish()
		}
		if err == nil {
			if x.act != actNone || !x.r.NextBuffered() {
				qp.rxPublish() // for Stats: before a completion, and when the loop may wait
			}
			err = qp.rxCommit()
		}
		if err == nil {
			// burst: more requests wait in the buffer whole, so answers
			// wait for them (nothing below reads the stream: it holds).
			fn := qp.rxFn.Load()
			burst := (x.answerDue || fn != nil || qp.txHeld.Load()) && x.r.NextBuffered()
			if x.answerDue && !burst {
				x.answerDue = false
				qp.rxAnswer()
			}
			if fn != nil {
				in := uint32(rxInHandler)
				if burst {
					in = rxInBurst
				}
				qp.rxHandling.Store(in)
				(*fn)()
				qp.rxHandling.Store(0)
			}
			if !burst && qp.txHeld.Load() {
				qp.rxSendHeld()
			}
		}
		if err == nil && x.rtrSeen {
			x.rtrSeen = false
			close(qp.rtrDone)
			qp.releaseHold()
		}
		if err == nil && x.holdTillFPDU {
			x.holdTillFPDU = false
			qp.releaseHold() // the initiator's first FPDU checked out
		}
		if err != nil {
			qp.rxPublish()
			qp.rxKick()
			qp.rxFailed(err)
			// Keep reading until the peer closes or the linger ends, so that
			// the kernel does not answer our own Terminate with a reset.
			io.Copy(io.Discard, qp.drainConn())
			return
		}
	}
}

// rxPublish stores the count of FPDUs received in rxSeen.
func (qp *QP) rxPublish() {
	if seen := qp.rx.seen; qp.rxSeen.Load() != seen {
		qp.rxSeen.Store(seen)
	}
}

// rxFailed turns a receive error into the QP's fate.
func (qp *QP) rxFailed(err error) {
	var remote *rdmap.RemoteError
	if (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) && qp.State() == StateRTS {
		// The kernel reports a reset or a timeout (ECONNRESET, ETIMEDOUT)
		// to the first call that meets it; a later read sees end of stream.
		// If that first call was the transmit side's write, our EOF is no
		// orderly close (nor a stream cut inside an FPDU that a Terminate
		// could answer): the socket is in CLOSE, not CLOSE-WAIT. The
		// transmit side records its error before it releases txMu, so
		// taking txMu once lets its errno win. (Only in RTS: once we have
		// sent our own FIN, the socket reaches CLOSE through LAST-ACK or
		// TIME-WAIT. Disconnect leaves RTS before its FIN goes, so the
		// state is asked again after the socket's: a Disconnect that ran
		// between the two would otherwise pass for a reset.)
		rxEOFHook(qp)
		if qp.sock != nil && tcpx.Reset(qp.sock) && qp.State() == StateRTS {
			qp.txMu.Lock()
			qp.txMu.Unlock()
			qp.connLost(closedCause(qp.sock))
			return
		}
	}
	switch {
	case errors.Is(err, io.EOF):
		if ts, ok := qp.conn.(*tlsStream); ok && ts.truncated() {
			qp.connLost(errTLSTruncated)
			return
		}
		qp.peerClosed()
	case errors.As(err, &remote):
		// The peer is done with us: close now rather than wait for it.
		qp.setError(&TerminateError{Remote: true, Terminate: remote.Terminate.Clone()})
		qp.conn.SetReadDeadline(time.Now())
	case qp.State() != StateRTS:
		// A failure after we started closing: nothing to tell the peer.
		qp.connLost(err)
	case isNetErr(err):
		qp.connLost(err)
	default:
		qp.rxFatal(err)
	}
}

// rxEOFHook runs where rxFailed has seen end of stream in RTS; tests use it
// to run a Disconnect in between.
var rxEOFHook = func(*QP) {}

// closedCause says why a socket that read end of stream is closed (TCP
// state CLOSE): the peer's FIN came first, which a read reports before
// the error still pending (Linux names a reset after the peer's FIN EPIPE,
// one before it ECONNRESET); or, if another call took the error, that
// much.
func closedCause(tc *net.TCPConn) error {
	err := tcpx.PendingError(tc)
	if err == nil {
		return errors.New("the connection was reset or timed out (the socket is in TCP state CLOSE)")
	}
	what := err.Error()
	switch {
	case errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNRESET):
		what = "reset by the peer"
	case errors.Is(err, syscall.ETIMEDOUT):
		what = "timed out"
	}
	return &closedError{what: what, err: err}
}

// closedError is closedCause's error; it Is its errno.
type closedError struct {
	what string
	err  error
}

func (e *closedError) Error() string {
	return fmt.Sprintf("the peer closed its side (FIN), then the connection was %s (%v)", e.what, e.err)
}

func (e *closedError) Unwrap() error { return e.err }

// rxFatal is fatal for the segment the receive loop is taking apart. A
// handler that completes a WR with an error status calls it before pushing
// the WC, so that the application polling that WC finds the cause in Err.
func (qp *QP) rxFatal(err error) {
	qp.fatal(err, qp.rx.hdr[:qp.rx.hl], qp.rx.r.ULPDULen())
}

// rxSegment takes apart one DDP segment of n octets. Its headers are read
// into x.hdr and checked there, on views, by packages ddp and rdmap, the one
// implementation of each wire rule; what needs the QP's state (memory, posted
// buffers, outstanding Reads) is checked here, in the handlers.
func (qp *QP) rxSegment(n int) error {
	x := &qp.rx
	x.hl = 0
	if u := x.r.Whole(); len(u) >= ddp.TaggedHdrLen && x.expectRTR == mpa.RTRNone {
		// The header is copied for a Terminate to quote, but not read
		// through the Reader.
		if op, ok := taggedFast(u[0], u[1]); ok {
			x.hl = copy(x.hdr[:], u[:ddp.TaggedHdrLen])
			x.r.Consume(ddp.TaggedHdrLen)
			h := ddp.Tagged(x.hdr[:ddp.TaggedHdrLen])
			if op == rdmap.OpWrite {
				return qp.rxWrite(h, n-ddp.TaggedHdrLen)
			}
			return qp.rxReadResponse(h, n-ddp.TaggedHdrLen)
		}
		if len(u) >= ddp.UntaggedHdrLen {
			if op, ok := sendFast(u[0], u[1], ddp.Untagged(u[:ddp.UntaggedHdrLen]).QN()); ok {
				// In two copies the compiler writes out inline: one
				// of 18 octets would be a call to memmove.
				copy(x.hdr[:16], u[:16])
				copy(x.hdr[16:ddp.UntaggedHdrLen], u[16:ddp.UntaggedHdrLen])
				x.hl = ddp.UntaggedHdrLen
				x.r.Consume(ddp.UntaggedHdrLen)
				// Its fields are read where the kernel put them, not from
				// the copy just stored: MO's 4-octet load would span the
				// two stores, and a load that spans stores is not
				// forwarded from them: it waits for them to retire.
				return qp.rxSend(ddp.Untagged(u[:ddp.UntaggedHdrLen]), op, n-ddp.UntaggedHdrLen)
			}
		}
	}
	// The first octet's T flag says how long the DDP header is; a segment
	// too short for its header is read whole, for ddp.Parse to judge. The
	// Reader usually holds that octet already: then one read takes the
	// header.
	k := min(n, 2)
	if p := x.r.Peek(1); len(p) == 1 {
		k = min(n, ddp.HdrLen(p[0]&ddp.FlagTagged != 0))
	}
	if err := x.r.ReadFull(x.hdr[:k]); err != nil {
		return err
	}
	if hl := min(n, ddp.HdrLen(x.hdr[0]&ddp.FlagTagged != 0)); k > 0 && hl > k {
		// The first octet was not buffered: the rest of the header now.
		if err := x.r.ReadFull(x.hdr[k:hl]); err != nil {
			return err
		}
		k = hl
	}
	x.hl = k
	hl, tagged, err := ddp.Parse(x.hdr[:k])
	if err != nil {
		return err
	}
	op, err := rdmap.CheckCtrl(tagged, x.hdr[1], qp.ext)
	if err != nil {
		return err
	}
	if !tagged {
		if err := rdmap.CheckQN(op, ddp.Untagged(x.hdr[:hl]).QN(), qp.ext); err != nil {
			return err
		}
	}
	plen := n - hl
	if x.expectRTR != mpa.RTRNone {
		if handled, err := qp.rxRTR(tagged, op, plen); handled || err != nil {
			return err
		}
	}
	if tagged {
		h := ddp.Tagged(x.hdr[:hl])
		if op == rdmap.OpWrite {
			return qp.rxWrite(h, plen)
		}
		return qp.rxReadResponse(h, plen) // the other tagged message CheckCtrl lets through
	}
	h := ddp.Untagged(x.hdr[:hl])
	switch op {
	case rdmap.OpReadRequest:
		return qp.rxReadRequest(h, plen)
	case rdmap.OpTerminate:
		return qp.rxTerminate(plen)
	case rdmap.OpImmediateData, rdmap.OpImmediateDataSE:
		return qp.rxImmediate(h, op, plen)
	case rdmap.OpAtomicRequest:
		return qp.rxAtomicRequest(h, plen)
	case rdmap.OpAtomicResponse:
		return qp.rxAtomicResponse(h, plen)
	}
	return qp.rxSend(h, op, plen) // the four Sends
}

// taggedFast says whether a DDP control octet ddpCtrl and the RDMAP control
// octet after it are an RDMA Write's or a Read Response's, with the versions
// we speak: what ddp.Parse and rdmap.CheckCtrl would accept for those two
// opcodes (T set, DV 1, RV 1; the L flag and the reserved bits are not
// checked on receive). A stream of them, the bulk of most traffic, then
// skips the general checks; any other segment takes them.
func taggedFast(ddpCtrl, rdmapCtrl byte) (rdmap.Opcode, bool) {
	const (
		ddpMask   = ddp.FlagTagged | ddp.VersionMask
		ddpWant   = ddp.FlagTagged | ddp.Version
		rdmapMask = rdmap.CtrlVersionMask | rdmap.CtrlOpcodeMask&^byte(rdmap.OpReadResponse)
		rdmapWant = rdmap.Version << 6 // opcode 0 (Write) or 2 (Read Response)
	)
	op := rdmap.CtrlOpcode(rdmapCtrl)
	return op, ddpCtrl&ddpMask == ddpWant && rdmapCtrl&rdmapMask == rdmapWant
}

// sendFast is taggedFast for the four Sends: an untagged DDP control octet
// of version 1, an RDMAP control octet of version 1 with a Send's opcode,
// and the Send queue (what ddp.Parse, rdmap.CheckCtrl and rdmap.CheckQN
// accept for them).
func sendFast(ddpCtrl, rdmapCtrl byte, qn uint32) (rdmap.Opcode, bool) {
	const (
		ddpMask   = ddp.FlagTagged | ddp.VersionMask
		rdmapMask = rdmap.CtrlVersionMask
		rdmapWant = rdmap.Version << 6
	)
	op := rdmap.CtrlOpcode(rdmapCtrl)
	return op, ddpCtrl&ddpMask == ddp.Version && rdmapCtrl&rdmapMask == rdmapWant &&
		op >= rdmap.OpSend && op <= rdmap.OpSendSEInvalidate && qn == rdmap.QNSend
}

// rxCommit carries out what the segment just checked asks for.
func (qp *QP) rxCommit() error {
	x := &qp.rx
	act := x.act
	x.act = actNone
	switch act {
	case actReadDone:
		j := x.readJob
		idx, rtr := j.sqIdx, j.rtr
		x.readOff, x.readJob, x.readMR = 0, nil, nil
		qp.ordq.pop()
		if rtr {
			qp.releaseHold() // our Read RTR answered: the responder reads
		} else {
			qp.completeSQ(idx, Success, true)
		}
		qp.wakeHeld() // a fenced WR or a Read held back by the ORD may go now
	case actReadReq:
		x.readMSN++
		qp.irdq.push(x.actJob)
		x.actJob = readJob{}
		x.answerDue = true
	case actRecvDone:
		wc := x.actWC
		x.recvOn = false
		x.recv.release()
		x.sendMSN++
		if x.actInv {
			stag := wc.InvalidatedRKey
			if !qp.dev.invalidate(stag, qp.pd, true) {
				err := rdmap.Errorf(rdmap.ETypeRemoteOperation, rdmap.CodeCannotInvalidate, "STag %#x", stag)
				qp.rxFatal(err)
				qp.recvCQ.push(WC{ID: wc.ID, Status: RemInvReqErr, Opcode: WCRecv, QP: qp})
				return err
			}
		}
		if !qp.recvCQ.add(wc, true) {
			return errCQOverrun
		}
	case actTerm:
		return &rdmap.RemoteError{Terminate: x.actTerm}
	case actAtomicReq:
		j := x.actJob
		j.orig = execAtomic(x.actMem, rdmap.AtomicRequest(x.hdr[ddp.UntaggedHdrLen:x.hl]))
		x.actJob, x.actMem = readJob{}, nil
		x.readMSN++
		qp.irdq.push(j)
		x.answerDue = true
	case actAtomicDone:
		j := qp.ordq.front()
		if mr, _ := qp.dev.lookup(j.stag); mr == nil {
			// The result buffer's region died since the atomic was posted
			// (dead STags stay dead, as for a Read's sink).
			return qp.failSQ(ddp.Errorf(ddp.ETypeCatastrophic, 0, "atomic result: lkey %#x no longer valid", j.stag), j.sqIdx)
		}
		putOriginal(j.buf, rdmap.AtomicResponse(x.hdr[ddp.UntaggedHdrLen:x.hl]).Original())
		idx := j.sqIdx
		x.atomicMSN++
		qp.ordq.pop()
		qp.completeSQ(idx, Success, true)
		qp.wakeHeld()
	}
	return nil
}

var errCQOverrun = rdmap.Errorf(rdmap.ETypeLocalCatastrophic, rdmap.CodeCatastrophicStream, "completion queue overrun")

// wakeHeld wakes the transmit loop after a Read or atomic completed, if WRs
// wait in the SQ: a fence or the ORD may have held them back. Waking it
// for nothing costs a goroutine wake-up per Read, often on another thread,
// which is most of a Read's round trip at queue depth 1. (The transmit loop
// decides in nextSQ under sqMu and leaves sqNext behind the WR it held;
// the ORD slot was freed before this looks.)
func (qp *QP) wakeHeld() {
	qp.sqMu.Lock()
	held := qp.sqNext.Load() != qp.sqTail
	qp.sqMu.Unlock()
	if held {
		wake(qp.wake)
	}
}
