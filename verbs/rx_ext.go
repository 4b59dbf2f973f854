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
	if err := ddp.CheckMSN(h.MSN(), x.sendMSN); err != nil {
		return err
	}
	if x.recvOn {
		// That MSN is the Send still under way on QN 0: a message of its own
		// cannot have it.
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeMSNRange, "Immediate Data MSN %d inside the Send of that MSN", h.MSN())
	}
	if err := rdmap.CheckLen(op, h, n); err != nil {
		return err
	}
	if err := x.r.ReadFull(x.actImm[:]); err != nil {
		return err
	}
	if err := ddp.CheckBuffer(rdmap.QNSend, h.MSN(), qp.popRecv(&x.recv)); err != nil {
		return err
	}
	x.recvOn = true
	if x.recv.total >= 8 {
		x.recv.resolve(qp.dev)
		off := 0
		for i, s := range x.recv.segs[:x.recv.nseg] {
			if off == len(x.actImm) {
				break
			}
			if err := qp.recvLive(i, WCRecvImm); err != nil {
				return err
			}
			off += copy(s, x.actImm[off:])
		}
	}
	wc := WC{ID: x.recv.id, Opcode: WCRecvImm, Flags: WithImm, ImmData: rdmap.Immediate(x.actImm[:]).Data(), QP: qp}
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
	if err := qp.rxQN1(h, rdmap.OpAtomicRequest, n); err != nil {
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
	if err := ddp.CheckMSN(h.MSN(), x.atomicMSN); err != nil {
		return err
	}
	if err := rdmap.CheckLen(rdmap.OpAtomicResponse, h, n); err != nil {
		return err
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
