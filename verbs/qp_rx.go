package verbs

import (
	"encoding/binary"
	"errors"
	"io"
	"time"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
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
	recv    rqe
	recvOn  bool
	recvOff int

	readOff uint32 // octets of the oldest outstanding Read placed so far

	expectRTR mpa.RTR // peer-to-peer responder: the RTR the first FPDU must be

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
			err = qp.rxSegment(n)
		}
		if err == nil {
			err = x.r.Finish()
		}
		if err == nil {
			err = qp.rxCommit()
			qp.rxSeen.Add(1)
		}
		if err != nil {
			qp.rxFailed(err)
			// Keep reading until the peer closes or the linger ends, so that
			// the kernel does not answer our own Terminate with a reset.
			io.Copy(io.Discard, qp.conn)
			return
		}
	}
}

// rxFailed turns a receive error into the QP's fate.
func (qp *QP) rxFailed(err error) {
	var remote *rdmap.RemoteError
	switch {
	case errors.Is(err, io.EOF):
		qp.disconnected()
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
		qp.fatal(err, qp.rx.hdr[:qp.rx.hl], qp.rx.r.ULPDULen())
	}
}

// rxSegment takes apart one DDP segment of n octets.
func (qp *QP) rxSegment(n int) error {
	x := &qp.rx
	x.hl = 0
	if n < ddp.TaggedHdrLen {
		// Valid MPA framing around too little for DDP: RFC 5041 has no code
		// for it, so it is a local catastrophic error, as in ddp.Parse.
		return ddp.Errorf(ddp.ETypeCatastrophic, 0, "ULPDU of %d octets is shorter than a DDP header", n)
	}
	if err := x.r.ReadFull(x.hdr[:2]); err != nil {
		return err
	}
	x.hl = 2
	tagged := x.hdr[0]&ddp.FlagTagged != 0
	hl := ddp.UntaggedHdrLen
	if tagged {
		hl = ddp.TaggedHdrLen
	}
	if n < hl {
		return ddp.Errorf(ddp.ETypeCatastrophic, 0, "ULPDU of %d octets is shorter than its DDP header", n)
	}
	if err := x.r.ReadFull(x.hdr[2:hl]); err != nil {
		return err
	}
	x.hl = hl
	// RFC 5041 section 7.2: a wrong DDP version is reported per model.
	if x.hdr[0]&ddp.VersionMask != ddp.Version {
		if tagged {
			return ddp.Errorf(ddp.ETypeTagged, ddp.CodeTaggedVersion, "DDP version %d", x.hdr[0]&ddp.VersionMask)
		}
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeUntaggedVersion, "DDP version %d", x.hdr[0]&ddp.VersionMask)
	}
	if v := rdmap.CtrlVersion(x.hdr[1]); v != rdmap.Version {
		return rdmap.Errorf(rdmap.ETypeRemoteOperation, rdmap.CodeInvalidVersion, "RDMAP version %d", v)
	}
	op := rdmap.CtrlOpcode(x.hdr[1])
	plen := n - hl
	if x.expectRTR != mpa.RTRNone {
		if handled, err := qp.rxRTR(tagged, op, plen); handled || err != nil {
			return err
		}
	}
	if tagged {
		h := ddp.Tagged(x.hdr[:hl])
		switch op {
		case rdmap.OpWrite:
			return qp.rxWrite(h, plen)
		case rdmap.OpReadResponse:
			return qp.rxReadResponse(h, plen)
		}
		return rdmap.Errorf(rdmap.ETypeRemoteOperation, rdmap.CodeUnexpectedOpcode, "opcode %d in a tagged segment", op)
	}
	h := ddp.Untagged(x.hdr[:hl])
	switch op {
	case rdmap.OpSend, rdmap.OpSendInvalidate, rdmap.OpSendSE, rdmap.OpSendSEInvalidate:
		return qp.rxSend(h, op, plen)
	case rdmap.OpReadRequest:
		return qp.rxReadRequest(h, plen)
	case rdmap.OpTerminate:
		return qp.rxTerminate(h, plen)
	case rdmap.OpImmediateData, rdmap.OpImmediateDataSE:
		if qp.ext {
			return qp.rxImmediate(h, op, plen)
		}
	case rdmap.OpAtomicRequest:
		if qp.ext {
			return qp.rxAtomicRequest(h, plen)
		}
	case rdmap.OpAtomicResponse:
		if qp.ext {
			return qp.rxAtomicResponse(h, plen)
		}
	}
	return rdmap.Errorf(rdmap.ETypeRemoteOperation, rdmap.CodeUnexpectedOpcode, "opcode %d in an untagged segment", op)
}

// taggedErr maps a failed memory check on a tagged segment to its DDP error
// (RFC 5041 section 7.2, in siw's mapping: RFC 5041 has no code for missing
// access rights, so that is "invalid STag").
func taggedErr(e accessErr, stag uint32, to uint64, n int) error {
	code := ddp.CodeInvalidSTag
	switch e {
	case accessPD:
		code = ddp.CodeSTagNotAssoc
	case accessTOWrap:
		code = ddp.CodeTOWrap
	case accessBounds:
		code = ddp.CodeBaseBounds
	}
	return ddp.Errorf(ddp.ETypeTagged, code, "STag %#x TO %#x len %d", stag, to, n)
}

// rxWrite places an RDMA Write segment straight into the registered region.
func (qp *QP) rxWrite(h ddp.Tagged, n int) error {
	if n == 0 {
		return nil // nothing is placed: siw's zero-length RTR Write carries a dummy STag
	}
	dst, _, e := qp.dev.check(h.STag(), qp.pd, RemoteWrite, h.TO(), n)
	if e != accessOK {
		return taggedErr(e, h.STag(), h.TO(), n)
	}
	return qp.rx.r.ReadFull(dst)
}

// rxReadResponse places a Read Response segment into the sink of our oldest
// outstanding Read; it must continue exactly where the last one ended.
func (qp *QP) rxReadResponse(h ddp.Tagged, n int) error {
	x := &qp.rx
	j := qp.ordq.front()
	if j == nil {
		return rdmap.Errorf(rdmap.ETypeRemoteOperation, rdmap.CodeUnexpectedOpcode, "Read Response with no Read outstanding")
	}
	if h.STag() != j.stag {
		return ddp.Errorf(ddp.ETypeTagged, ddp.CodeInvalidSTag, "Read Response to STag %#x, expected %#x", h.STag(), j.stag)
	}
	if h.TO() != j.to+uint64(x.readOff) || uint64(x.readOff)+uint64(n) > uint64(j.size) {
		return ddp.Errorf(ddp.ETypeTagged, ddp.CodeBaseBounds, "Read Response at TO %#x len %d outside the sink", h.TO(), n)
	}
	if err := x.r.ReadFull(j.buf[x.readOff : x.readOff+uint32(n)]); err != nil {
		return err
	}
	x.readOff += uint32(n)
	if !h.Last() {
		return nil
	}
	if x.readOff != j.size {
		return ddp.Errorf(ddp.ETypeTagged, ddp.CodeBaseBounds, "Read Response of %d octets for a Read of %d", x.readOff, j.size)
	}
	x.act = actReadDone
	return nil
}

// rxCommit carries out what the segment just checked asks for.
func (qp *QP) rxCommit() error {
	x := &qp.rx
	act := x.act
	x.act = actNone
	switch act {
	case actReadDone:
		j := qp.ordq.front()
		idx, rtr := j.sqIdx, j.rtr
		x.readOff = 0
		qp.ordq.pop()
		if !rtr {
			qp.completeSQ(idx, Success)
		}
		wake(qp.wake) // a fenced WR or a Read held back by the ORD may go now
	case actReadReq:
		x.readMSN++
		qp.irdq.push(x.actJob)
		x.actJob = readJob{}
		wake(qp.wake)
	case actRecvDone:
		wc := x.actWC
		x.recvOn = false
		x.recv = rqe{}
		x.sendMSN++
		if x.actInv {
			stag := wc.InvalidatedRKey
			if !qp.dev.invalidate(stag, qp.pd, true) {
				qp.recvCQ.push(WC{ID: wc.ID, Status: RemInvReqErr, Opcode: WCRecv, QP: qp})
				return rdmap.Errorf(rdmap.ETypeRemoteOperation, rdmap.CodeCannotInvalidate, "STag %#x", stag)
			}
		}
		if !qp.recvCQ.push(wc) {
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
		wake(qp.wake)
	case actAtomicDone:
		j := qp.ordq.front()
		putOriginal(j.buf, rdmap.AtomicResponse(x.hdr[ddp.UntaggedHdrLen:x.hl]).Original())
		idx := j.sqIdx
		x.atomicMSN++
		qp.ordq.pop()
		qp.completeSQ(idx, Success)
		wake(qp.wake)
	}
	return nil
}

// rxSend places a Send segment into the posted receive buffer (RFC 5041
// section 5.3 untagged model; checks as section 7.2).
func (qp *QP) rxSend(h ddp.Untagged, op rdmap.Opcode, n int) error {
	x := &qp.rx
	if h.QN() != rdmap.QNSend {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeInvalidQN, "Send on QN %d", h.QN())
	}
	if h.MSN() != x.sendMSN {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeMSNRange, "MSN %d, expected %d", h.MSN(), x.sendMSN)
	}
	mo := int(h.MO())
	if !x.recvOn {
		if mo != 0 {
			return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeInvalidMO, "first segment at MO %d", mo)
		}
		ok := false
		if qp.srq != nil {
			ok = qp.srq.q.pop(&x.recv)
		} else {
			ok = qp.rq.pop(&x.recv)
		}
		if !ok {
			// iWARP has no receiver-not-ready retry: this is fatal.
			return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeMSNNoBuffer, "no receive posted for MSN %d", h.MSN())
		}
		x.recvOn, x.recvOff = true, 0
	} else if mo != x.recvOff {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeInvalidMO, "MO %d, expected %d", mo, x.recvOff)
	}
	if mo+n > x.recv.total {
		qp.recvCQ.push(WC{ID: x.recv.id, Status: LocLenErr, Opcode: WCRecv, QP: qp})
		x.recvOn = false
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeMsgTooLong, "message exceeds the %d-octet receive buffer", x.recv.total)
	}
	// Scatter into the receive buffer's elements.
	off, left := mo, n
	for _, s := range x.recv.segs[:x.recv.nseg] {
		if left == 0 {
			break
		}
		if off >= len(s) {
			off -= len(s)
			continue
		}
		k := min(len(s)-off, left)
		if err := x.r.ReadFull(s[off : off+k]); err != nil {
			return err
		}
		off, left = 0, left-k
	}
	x.recvOff += n
	if !h.Last() {
		return nil
	}
	wc := WC{ID: x.recv.id, Opcode: WCRecv, ByteLen: uint32(x.recvOff), QP: qp}
	if op == rdmap.OpSendSE || op == rdmap.OpSendSEInvalidate {
		wc.Flags |= SolicitedEvent
	}
	x.actInv = op == rdmap.OpSendInvalidate || op == rdmap.OpSendSEInvalidate
	if x.actInv {
		wc.Flags |= WithInv
		wc.InvalidatedRKey = h.ULPWord()
	}
	x.actWC, x.act = wc, actRecvDone
	return nil
}

// rxReadRequest checks a Read Request against the source region and queues
// the response for the transmit loop (RFC 5040 section 4.4).
func (qp *QP) rxReadRequest(h ddp.Untagged, n int) error {
	x := &qp.rx
	if h.QN() != rdmap.QNReadRequest {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeInvalidQN, "Read Request on QN %d", h.QN())
	}
	if h.MSN() != x.readMSN {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeMSNRange, "Read Request MSN %d, expected %d", h.MSN(), x.readMSN)
	}
	if !h.Last() || h.MO() != 0 || n != rdmap.ReadRequestLen {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeMsgTooLong, "Read Request of %d octets", n)
	}
	// The IRD is the number of buffers posted on QN 1: a Read Request beyond
	// it finds none.
	if qp.irdq.len() >= qp.ird {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeMSNNoBuffer, "Read Request beyond IRD %d", qp.ird)
	}
	if err := x.r.ReadFull(x.hdr[x.hl : x.hl+n]); err != nil {
		return err
	}
	x.hl += n
	rr := rdmap.ReadRequest(x.hdr[ddp.UntaggedHdrLen:x.hl])
	size := rr.Size()
	var src []byte
	if size > 0 {
		b, _, e := qp.dev.check(rr.SrcSTag(), qp.pd, RemoteRead, rr.SrcTO(), int(size))
		if e != accessOK {
			return readSrcErr(e, rr.SrcSTag(), rr.SrcTO(), size)
		}
		src = b
	}
	x.actJob = readJob{buf: src, stag: rr.SinkSTag(), to: rr.SinkTO(), size: size}
	x.act = actReadReq
	return nil
}

// rxImmediate takes an Immediate Data message (RFC 7306 section 6.3): it
// consumes a posted receive, and its 8 octets go into the buffer (when they
// fit) and into the completion.
func (qp *QP) rxImmediate(h ddp.Untagged, op rdmap.Opcode, n int) error {
	x := &qp.rx
	if h.QN() != rdmap.QNSend {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeInvalidQN, "Immediate Data on QN %d", h.QN())
	}
	if h.MSN() != x.sendMSN || x.recvOn {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeMSNRange, "Immediate Data MSN %d, expected %d", h.MSN(), x.sendMSN)
	}
	if n != rdmap.ImmediateLen || !h.Last() || h.MO() != 0 {
		// "The Remote Peer MUST check that ... exactly 8 bytes".
		return rdmap.Errorf(rdmap.ETypeRemoteOperation, rdmap.CodeUnspecified, "Immediate Data of %d octets", n)
	}
	if err := x.r.ReadFull(x.actImm[:]); err != nil {
		return err
	}
	ok := false
	if qp.srq != nil {
		ok = qp.srq.q.pop(&x.recv)
	} else {
		ok = qp.rq.pop(&x.recv)
	}
	if !ok {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeMSNNoBuffer, "no receive posted for Immediate Data MSN %d", h.MSN())
	}
	x.recvOn = true
	if x.recv.total >= 8 {
		off := 0
		for _, s := range x.recv.segs[:x.recv.nseg] {
			off += copy(s, x.actImm[off:])
		}
	}
	wc := WC{ID: x.recv.id, Opcode: WCRecvImm, Flags: WithImm, ImmData: be64(x.actImm[:]), QP: qp}
	if op == rdmap.OpImmediateDataSE {
		wc.Flags |= SolicitedEvent
	}
	x.actWC, x.actInv, x.act = wc, false, actRecvDone
	return nil
}

// rxAtomicRequest checks an Atomic Request (RFC 7306 section 5.2.1); the
// operation itself runs once the CRC has checked out.
func (qp *QP) rxAtomicRequest(h ddp.Untagged, n int) error {
	x := &qp.rx
	if h.QN() != rdmap.QNReadRequest {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeInvalidQN, "Atomic Request on QN %d", h.QN())
	}
	if h.MSN() != x.readMSN {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeMSNRange, "Atomic Request MSN %d, expected %d", h.MSN(), x.readMSN)
	}
	if !h.Last() || h.MO() != 0 || n != rdmap.AtomicRequestLen {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeMsgTooLong, "Atomic Request of %d octets", n)
	}
	if qp.irdq.len() >= qp.ird {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeMSNNoBuffer, "Atomic Request beyond IRD %d", qp.ird)
	}
	if err := x.r.ReadFull(x.hdr[x.hl : x.hl+n]); err != nil {
		return err
	}
	x.hl += n
	r := rdmap.AtomicRequest(x.hdr[ddp.UntaggedHdrLen:x.hl])
	if err := rdmap.CheckAtomicRequest(r, r.TO()); err != nil {
		return err
	}
	mem, _, e := qp.dev.check(r.STag(), qp.pd, RemoteAtomic, r.TO(), 8)
	if e != accessOK {
		return readSrcErr(e, r.STag(), r.TO(), 8)
	}
	x.actJob, x.actMem, x.act = readJob{atomic: true, reqID: r.ReqID()}, mem, actAtomicReq
	return nil
}

// rxAtomicResponse matches an Atomic Response with our oldest outstanding
// request (RFC 7306 section 5.2.2).
func (qp *QP) rxAtomicResponse(h ddp.Untagged, n int) error {
	x := &qp.rx
	if h.QN() != rdmap.QNAtomicResponse {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeInvalidQN, "Atomic Response on QN %d", h.QN())
	}
	if h.MSN() != x.atomicMSN {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeMSNRange, "Atomic Response MSN %d, expected %d", h.MSN(), x.atomicMSN)
	}
	if !h.Last() || h.MO() != 0 || n != rdmap.AtomicResponseLen {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeMsgTooLong, "Atomic Response of %d octets", n)
	}
	if err := x.r.ReadFull(x.hdr[x.hl : x.hl+n]); err != nil {
		return err
	}
	x.hl += n
	j := qp.ordq.front()
	if j == nil || !j.atomic || j.reqID != rdmap.AtomicResponse(x.hdr[ddp.UntaggedHdrLen:x.hl]).ReqID() {
		return rdmap.Errorf(rdmap.ETypeRemoteOperation, rdmap.CodeUnexpectedOpcode, "Atomic Response matches no outstanding request")
	}
	x.act = actAtomicDone
	return nil
}

// readSrcErr maps a failed check of a Read Request's source to the RDMAP
// remote protection error (RFC 5040 section 7.4.1).
func readSrcErr(e accessErr, stag uint32, to uint64, size uint32) error {
	code := rdmap.CodeInvalidSTag
	switch e {
	case accessPD:
		code = rdmap.CodeSTagNotAssoc
	case accessRights:
		code = rdmap.CodeAccessRights
	case accessTOWrap:
		code = rdmap.CodeTOWrap
	case accessBounds:
		code = rdmap.CodeBaseBounds
	}
	return rdmap.Errorf(rdmap.ETypeRemoteProtection, code, "Read source STag %#x TO %#x size %d", stag, to, size)
}

// rxTerminate decodes a Terminate from the peer. It is never answered with
// a Terminate (RFC 5040 section 5.3).
func (qp *QP) rxTerminate(h ddp.Untagged, n int) error {
	x := &qp.rx
	if h.QN() != rdmap.QNTerminate {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeInvalidQN, "Terminate on QN %d", h.QN())
	}
	if n > len(x.hdr)-x.hl {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeMsgTooLong, "Terminate of %d octets", n)
	}
	if err := x.r.ReadFull(x.hdr[x.hl : x.hl+n]); err != nil {
		return err
	}
	t, err := rdmap.ParseTerminate(x.hdr[x.hl : x.hl+n])
	x.hl += n
	if err != nil {
		// Still a Terminate: the peer is done with us, even if it says so badly.
		t = rdmap.Terminate{Layer: rdmap.LayerRDMAP, EType: rdmap.ETypeLocalCatastrophic, Code: rdmap.CodeUnspecified}
	}
	x.actTerm, x.act = t, actTerm
	return nil
}

var errCQOverrun = rdmap.Errorf(rdmap.ETypeLocalCatastrophic, rdmap.CodeCatastrophicStream, "completion queue overrun")

var be64 = binary.BigEndian.Uint64
