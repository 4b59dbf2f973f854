package rdmap

import "github.com/goiwarp/iwarp/ddp"

// Receive-side checks of RDMAP (RFC 5040 section 7.2, RFC 7306), made on the
// header views a receiver has read, in the order a queue pair of package
// verbs makes them on every segment:
//
//	ddp.Parse                 DDP header length and version (RFC 5041 section 4.1)
//	CheckCtrl                 RDMAP version, opcode, buffer model, RFC 7306 opt-in
//	CheckQN                   untagged: the stream has the queue, and it is the opcode's
//	ddp.CheckMSN, CheckMO ... untagged: sequence, offset, buffer (package ddp)
//	CheckLen                  Read Request, Atomic Request and Response, Immediate Data: one whole header
//	CheckAtomicRequest        Atomic Request: AOpCode and alignment (atomic.go)
//	CheckReadResponse         Read Response: the sink and the progress of the Read it answers
//	ParseTerminate            Terminate header (terminate.go)
//
// What needs the QP's memory (STags, protection domains, access rights,
// bounds and TO wrap, RFC 5041 section 7.1 and RFC 5040 section 7.2 item 4)
// or its queues (which Read or atomic is outstanding) is checked by the QP.
// Each function returns nil or an error that CauseOf maps to the Terminate
// cause; only a failing check allocates.

// CheckCtrl validates the RDMAP control octet of a received segment whose DDP
// header has the given T flag (RFC 5040 section 7.2: "The RDMA OpCode MUST be
// valid. The RDMA Version MUST be valid."). ext says whether the QP uses the
// RFC 7306 extensions; without them their opcodes are unexpected. An opcode
// that arrives in the wrong buffer model (a tagged Send, say) is unexpected
// too: RFC 5040 Figure 4 fixes the T flag of each message and has no closer
// code. The reserved bits are ignored (section 4.1).
func CheckCtrl(tagged bool, ctrl byte, ext bool) (Opcode, error) {
	op := CtrlOpcode(ctrl)
	if v := CtrlVersion(ctrl); v != Version {
		return op, Errorf(ETypeRemoteOperation, CodeInvalidVersion, "RV %d", v)
	}
	info := &opTable[op]
	switch {
	case !info.Known:
		return op, Errorf(ETypeRemoteOperation, CodeUnexpectedOpcode, "reserved opcode %d", uint8(op))
	case info.RFC7306 && !ext:
		return op, Errorf(ETypeRemoteOperation, CodeUnexpectedOpcode, "%v without RFC 7306", op)
	case info.Tagged != tagged:
		return op, Errorf(ETypeRemoteOperation, CodeUnexpectedOpcode, "%v with T=%t", op, tagged)
	}
	return op, nil
}

// CheckQN checks the queue number of an untagged message of opcode op, one
// that CheckCtrl accepted: first DDP's rule, that the stream has queue qn
// (ddp.CheckQN; three queues, four with the RFC 7306 extensions), then
// RDMAP's, that qn is op's queue (QNSend, QNReadRequest, QNTerminate,
// QNAtomicResponse). Both are DDP "invalid QN" (RFC 5041 section 7.2 code
// 0x01), as siw reports a Send on another queue (siw_send_check_ntoh). For a
// Terminate that means the message is no Terminate to deliver: DDP's checks
// fail before RDMAP sees it.
func CheckQN(op Opcode, qn uint32, ext bool) error {
	if err := ddp.CheckQN(qn, NumQueues(ext)); err != nil {
		return err
	}
	if want := opTable[op&0x0f].QN; qn != want {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeInvalidQN, "%v on QN %d, its queue is %d", op, qn, want)
	}
	return nil
}

// CheckLen checks that an untagged segment h, with n octets after its DDP
// header, is a whole message of op, for the opcodes whose message is nothing
// but a fixed-length RDMAP header (OpInfo.HdrLen): RDMA Read Request (RFC 5040
// section 4.4), Atomic Request and Response (RFC 7306 sections 5.2.1 and
// 5.2.2) and Immediate Data (section 6.2). A receiver reads that header whole
// from the segment once CheckLen accepted it, and views it (ReadRequest,
// AtomicRequest, AtomicResponse, Immediate) without further length checks.
// For any other opcode CheckLen returns nil.
//
// Immediate Data: RFC 7306 section 6.3, "The Remote Peer MUST check that
// Immediate Data and Immediate Data with SE Messages include exactly 8 bytes
// of data from the DDP layer". Anything but one segment of 8 octets at MO 0
// with L set is a remote operation error, unspecified: the RFC names no code.
//
// The others are placed in buffers of one header each (the IRD's for
// requests, the ORD's for responses), so DDP's untagged checks apply: an MO
// other than 0 is "invalid MO" (ddp.CheckMO), and a message longer than the
// header, or one that goes on past this segment (L clear), is "DDP message
// too long for available buffer" (ddp.CheckMsgLen). One shorter than the
// header fits any buffer; it is a malformed RDMAP header, which RFC 5040 has
// no code for: remote operation error, unspecified (0xFF).
func CheckLen(op Opcode, h ddp.Untagged, n int) error {
	want := opTable[op&0x0f].HdrLen - ddp.UntaggedHdrLen
	switch op {
	case OpImmediateData, OpImmediateDataSE:
		if n != want || !h.Last() || h.MO() != 0 {
			return Errorf(ETypeRemoteOperation, CodeUnspecified, "%v of %d octets at MO %d, L %t: want one segment of %d",
				op, n, h.MO(), h.Last(), want)
		}
		return nil
	case OpReadRequest, OpAtomicRequest, OpAtomicResponse:
	default:
		return nil
	}
	if err := ddp.CheckMO(h.MO(), 0); err != nil {
		return err
	}
	if !h.Last() {
		return ddp.Errorf(ddp.ETypeUntagged, ddp.CodeMsgTooLong, "%v goes on past its %d-octet header", op, want)
	}
	if err := ddp.CheckMsgLen(0, uint32(n), uint32(want)); err != nil {
		return err
	}
	if n < want {
		return errMalformed(op.String(), n, want)
	}
	return nil
}

// CheckReadResponse checks a segment of an RDMA Read Response, h with n
// payload octets, against the Read it answers, the oldest one outstanding
// (Read Responses come back in the order of the requests): its Data Sink is
// STag stag at TO to, size octets long, and off of them have arrived.
//
//   - A zero-length Read is answered by one zero-length segment with L set,
//     whose STag and TO are not looked at: RFC 5041 section 5.2, "The STag
//     and TO fields MUST NOT be checked for a zero-length Tagged DDP
//     Message" (a Read RTR names no sink).
//   - A Read Response goes to the Data Sink STag and TO of its request (RFC
//     5040 section 4.4): another STag is DDP "invalid STag", even one that
//     names a valid region.
//   - Its segments continue where the last one ended and stay within the
//     size, and the one with L set completes it exactly: anything else is
//     DDP "base or bounds violation".
//
// siw uses the same codes (siw_rresp_check_ntoh).
func CheckReadResponse(h ddp.Tagged, n uint32, stag uint32, to uint64, size, off uint32) error {
	if n == 0 && h.Last() && off == 0 && size == 0 {
		return nil
	}
	if h.STag() != stag {
		return ddp.Errorf(ddp.ETypeTagged, ddp.CodeInvalidSTag, "Read Response to STag %#x, the sink is %#x", h.STag(), stag)
	}
	end := uint64(off) + uint64(n)
	if h.TO() != to+uint64(off) || end > uint64(size) {
		return ddp.Errorf(ddp.ETypeTagged, ddp.CodeBaseBounds, "Read Response of %d octets at TO %#x; %d of %d octets at TO %#x came before",
			n, h.TO(), off, size, to)
	}
	if h.Last() && end != uint64(size) {
		return ddp.Errorf(ddp.ETypeTagged, ddp.CodeBaseBounds, "Read Response of %d octets for a Read of %d", end, size)
	}
	return nil
}
