package verbs

import (
	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/rdmap"
)

// The receive loop's RFC 7306 messages: Immediate Data and atomics.

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
	if !qp.popRecv(&x.recv) {
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
	if err := qp.rxQN1(h, n, rdmap.AtomicRequestLen, "Atomic Request"); err != nil {
		return err
	}
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
	if !h.Last() || h.MO() != 0 || n > rdmap.AtomicResponseLen {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeMsgTooLong, "Atomic Response of %d octets", n)
	}
	if n < rdmap.AtomicResponseLen {
		// Fits any buffer: a malformed RDMAP header, as for Immediate Data.
		return rdmap.Errorf(rdmap.ETypeRemoteOperation, rdmap.CodeUnspecified, "Atomic Response of %d octets", n)
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
