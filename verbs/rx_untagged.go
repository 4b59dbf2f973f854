package verbs

import (
	"fmt"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
)

// The receive loop's untagged buffer model: Sends into posted receives,
// Read Requests, Terminates (RFC 5041 section 5.3, RFC 5040 section 4).

// rxSend places a Send segment into the posted receive buffer (RFC 5041
// section 5.3 untagged model). rxSegment checked its QN; the checks of
// section 7.1 that remain go in package ddp's order: MSN, MO, buffer, length.
func (qp *QP) rxSend(h ddp.Untagged, op rdmap.Opcode, n int) error {
	x := &qp.rx
	// The fields are read before the payload: h may lie in the Reader's
	// buffer (rxSegment).
	msn, mo32, last, ulp := h.MSN(), h.MO(), h.Last(), h.ULPWord()
	if err := ddp.CheckMSN(msn, x.sendMSN); err != nil {
		return err
	}
	var want uint32 // a message's first segment is at MO 0
	if x.recvOn {
		want = uint32(x.recvOff)
	}
	if err := ddp.CheckMO(mo32, want); err != nil {
		return err
	}
	if !x.recvOn {
		// iWARP has no receiver-not-ready retry: no receive is fatal.
		if err := ddp.CheckBuffer(rdmap.QNSend, msn, qp.popRecv(&x.recv)); err != nil {
			return err
		}
		x.recvOn, x.recvOff = true, 0
		x.recv.resolve(qp.dev)
	}
	mo := int(mo32)
	if err := ddp.CheckMsgLen(mo32, uint32(n), clampU32(x.recv.total)); err != nil {
		return qp.failRecv(err, LocLenErr, WCRecv)
	}
	// Scatter into the receive buffer's elements.
	off, left := mo, n
	for i, s := range x.recv.segs[:x.recv.nseg] {
		if left == 0 {
			break
		}
		if off >= len(s) {
			off -= len(s)
			continue
		}
		if err := qp.recvLive(i, WCRecv); err != nil {
			return err
		}
		k := min(len(s)-off, left)
		var err error
		if k == left && x.r.Whole() != nil {
			err = x.r.ReadLast(s[off : off+k]) // the segment's last piece, as in rxWrite
		} else {
			err = x.r.ReadFull(s[off : off+k])
		}
		if err != nil {
			return err
		}
		off, left = 0, left-k
	}
	x.recvOff += n
	if !last {
		return nil
	}
	wc := WC{ID: x.recv.id, Opcode: WCRecv, ByteLen: uint32(x.recvOff), QP: qp}
	if op == rdmap.OpSendSE || op == rdmap.OpSendSEInvalidate {
		wc.Flags |= SolicitedEvent
	}
	x.actInv = op == rdmap.OpSendInvalidate || op == rdmap.OpSendSEInvalidate
	if x.actInv {
		wc.Flags |= WithInv
		wc.InvalidatedRKey = ulp
	}
	x.actWC, x.act = wc, actRecvDone
	return nil
}

// resolve looks up the regions of the receive's elements, which it was
// posted through (nil for one dead already), for recvLive.
func (b *recvBuf) resolve(d *Device) {
	for i := range b.nseg {
		b.mrs[i], _ = d.lookup(b.keys[i])
	}
}

// recvLive checks, before a piece is placed into element i of the
// receive under way, that the element's region still lives (MR.live). If
// it was invalidated (a peer's Send with Invalidate, a local one) or
// deregistered since the receive was posted, the receive completes with
// LocProtErr and the stream ends in a catastrophic error, as siw answers
// (siw_proc_send).
func (qp *QP) recvLive(i int, op WCOpcode) error {
	x := &qp.rx
	if mr := x.recv.mrs[i]; mr != nil && mr.live(x.recv.keys[i]) {
		return nil
	}
	err := ddp.Errorf(ddp.ETypeCatastrophic, 0, "receive %#x: lkey %#x no longer valid", x.recv.id, x.recv.keys[i])
	return qp.failRecv(err, LocProtErr, op)
}

// failRecv ends the QP for err and completes the receive under way with
// st: the cause first, so that the application polling the WC finds it
// in Err (rxFatal), and the count before the completion, as rxLoop does.
func (qp *QP) failRecv(err error, st WCStatus, op WCOpcode) error {
	x := &qp.rx
	x.recvOn = false
	qp.rxFatal(err)
	qp.rxPublish()
	qp.recvCQ.push(WC{ID: x.recv.id, Status: st, Opcode: op, QP: qp})
	x.recv.release()
	return err
}

// clampU32 is n as a buffer length for ddp's 32-bit checks: a receive of
// 4 GiB or more holds any message.
func clampU32(n int) uint32 { return uint32(min(uint64(n), 1<<32-1)) }

// rxQN1 checks a request on queue 1 (RDMA Read Request, RFC 7306 Atomic
// Request) and reads its RDMAP header after the DDP header.
func (qp *QP) rxQN1(h ddp.Untagged, op rdmap.Opcode, n int) error {
	x := &qp.rx
	if err := ddp.CheckMSN(h.MSN(), x.readMSN); err != nil {
		return err
	}
	if err := rdmap.CheckLen(op, h, n); err != nil {
		return err
	}
	// The IRD is the number of buffers posted on QN 1: a request beyond it
	// finds none (RFC 7306 section 5.2: atomics share it).
	if err := ddp.CheckBuffer(rdmap.QNReadRequest, h.MSN(), qp.irdq.len() < qp.ird); err != nil {
		return err
	}
	if err := x.r.ReadFull(x.hdr[x.hl : x.hl+n]); err != nil {
		return err
	}
	x.hl += n
	return nil
}

// popRecv takes the next posted receive, from the SRQ if the QP has one.
func (qp *QP) popRecv(dst *recvBuf) bool {
	if qp.srq != nil {
		return qp.srq.q.pop(dst)
	}
	return qp.rq.pop(dst)
}

// rxReadRequest checks a Read Request against the source region and queues
// the response for the transmit loop (RFC 5040 section 4.4).
func (qp *QP) rxReadRequest(h ddp.Untagged, n int) error {
	x := &qp.rx
	if err := qp.rxQN1(h, rdmap.OpReadRequest, n); err != nil {
		return err
	}
	rr := rdmap.ReadRequest(x.hdr[ddp.UntaggedHdrLen:x.hl])
	size := rr.Size()
	if x.rtrSeen && size != 0 {
		return &mpa.Error{Code: mpa.CodeNoMatchingRTR, Msg: fmt.Sprintf("the Read RTR asks for %d octets; an RTR Read has none", size)}
	}
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

// rxTerminate decodes a Terminate from the peer (on QN 2: rxSegment checked
// it). It is never answered with a Terminate (RFC 5040 section 5.3).
func (qp *QP) rxTerminate(n int) error {
	x := &qp.rx
	// Whatever a Terminate carries, it is never answered: read what the
	// header buffer holds (more than the longest Terminate, RFC 5040
	// section 4.8: 4 + 2 + 18 + 28 octets) and discard the rest.
	k := min(n, len(x.hdr)-x.hl)
	if err := x.r.ReadFull(x.hdr[x.hl : x.hl+k]); err != nil {
		return err
	}
	if err := x.r.Skip(n - k); err != nil {
		return err
	}
	t, err := rdmap.ParseTerminate(x.hdr[x.hl : x.hl+k])
	x.hl += k
	if err != nil {
		// Still a Terminate: the peer is done with us, even if it says so badly.
		t = rdmap.Terminate{Layer: rdmap.LayerRDMAP, EType: rdmap.ETypeLocalCatastrophic, Code: rdmap.CodeUnspecified}
	}
	x.actTerm, x.act = t, actTerm
	return nil
}
