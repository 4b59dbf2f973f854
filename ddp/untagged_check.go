package ddp

// Receive-side checks of untagged segments (RFC 5041 section 7.1), for a Data
// Sink that reads its stream in order (MPA over TCP) and has at most one
// message under way per queue, as a QP does. Section 7.1 lists five checks for
// a non-zero-length untagged segment and section 7.2 numbers their errors:
//
//	1. the QN is valid for this stream              -> CodeInvalidQN (0x01)    CheckQN
//	2. the QN and MSN have an associated buffer     -> CodeMSNNoBuffer (0x02)  CheckBuffer
//	3. the MO falls within the buffer               -> CodeInvalidMO (0x04)    CheckMO
//	4. MO + payload length falls within the buffer  -> CodeMsgTooLong (0x05)   CheckMsgLen
//	5. the MSN falls in the legal range of the QN   -> CodeMSNRange (0x03)     CheckMSN
//
// A QP makes them in the order 1, 5, 3, 2, 4: the MSN and MO are the header's
// own rules, and only a segment that passes them has a buffer to look for.
// RDMAP (RFC 5040 section 5.3) has every Send consume a buffer, zero-length
// ones too, so a QP checks zero-length segments as well, except for 4, which
// has nothing to place. Each check is a comparison the compiler inlines; only
// a failing one allocates, for its error.
//
// # Which MSN error
//
// Section 7.1 defines the legal MSN range of check 5 as lying between the MSN
// of the first and that of the last available buffer of the queue, and its
// implementation note puts the lower limit at the messages already completed
// and the upper one at the buffers available. Check 2's 0x02 ("no buffer
// available") is about the buffer of an MSN in that range.
//
// On a stream the range has one member. The Data Source transmits a queue's
// messages in the order they were submitted (section 5.3), the stream
// delivers their segments in that order, and the Data Sink delivers a message
// only after every earlier one (sections 5.3 and 5.4). A segment can
// therefore only continue the message under way or start the next one; a
// segment of any later message would mean that the messages before it were
// skipped. So:
//
//   - any MSN but the expected one, behind or ahead, whether or not a buffer
//     is posted for it, is 0x03 "MSN range is not valid" (CheckMSN);
//   - the expected MSN with no buffer posted for it is 0x02 "no buffer
//     available" (CheckBuffer).
//
// Linux siw behaves the same way (drivers/infiniband/sw/siw/siw_qp_rx.c):
// siw_send_check_ntoh and siw_init_rresp answer any MSN but the expected one
// with DDP_ECODE_UT_INVALID_MSN_RANGE, and siw_proc_send answers a Send that
// finds no receive with DDP_ECODE_UT_INVALID_MSN_NOBUF. siw takes the receive
// before it reads the MSN, so there a wrong MSN with nothing posted is 0x02;
// here the MSN comes first: an MSN outside the range has no buffer to speak
// of, and were check 2 made first, every wrong MSN would fail it and 0x03
// could never be sent. The range ends at the last buffer available, not at
// the receive queue's depth: nothing read in order can place a message ahead
// of one not yet received.

// CheckQN checks that qn names one of the stream's nq untagged queues,
// numbered from zero (RFC 5041 section 7.1 check 1). Which queues exist is up
// to the ULP: three for RDMAP, four with the RFC 7306 extensions (package
// rdmap's CheckQN also checks that a message came on its opcode's queue).
func CheckQN(qn, nq uint32) error {
	if qn >= nq {
		return errQN(qn, nq)
	}
	return nil
}

func errQN(qn, nq uint32) error {
	return Errorf(ETypeUntagged, CodeInvalidQN, "QN %d, stream has %d queues", qn, nq)
}

// CheckMSN checks the MSN of a segment against next, the MSN of the message
// under way on its queue or, if none is, of the next one (RFC 5041 section
// 7.1 check 5). Only next is legal (see "Which MSN error" above); any other
// MSN is "Invalid MSN - MSN range is not valid". A queue's first message has
// MSN 1 (section 4.3), and MSNs wrap from 0xFFFFFFFF to 0.
func CheckMSN(msn, next uint32) error {
	if msn != next {
		return errMSN(msn, next)
	}
	return nil
}

func errMSN(msn, next uint32) error {
	return Errorf(ETypeUntagged, CodeMSNRange, "MSN %d, expected %d", msn, next)
}

// CheckBuffer reports RFC 5041 section 7.1 check 2 for message msn of queue
// qn, whose MSN CheckMSN accepted: posted says whether the ULP has a buffer
// for it. Without one it is "Invalid MSN - no buffer available". Section 7.1
// lets an implementation treat the missing buffer as a fault of the ULP and
// disable the stream; iWARP has no receiver-not-ready retry, so a QP does.
func CheckBuffer(qn, msn uint32, posted bool) error {
	if !posted {
		return errNoBuffer(qn, msn)
	}
	return nil
}

func errNoBuffer(qn, msn uint32) error {
	return Errorf(ETypeUntagged, CodeMSNNoBuffer, "no buffer posted on QN %d for MSN %d", qn, msn)
}

// CheckMO checks a segment's message offset against want, the octets of its
// message that arrived before it: 0 for a message's first segment (RFC 5041
// section 7.1 check 3, in the form it takes on a stream). Section 5.3 has the
// Data Source send the segments of a message with increasing MOs (a SHOULD),
// and the stream keeps them in order, so a QP, which places as it reads,
// takes every MO but want for "Invalid MO", as siw does (siw_send_check_ntoh). An MO that continues a message at the end of its
// buffer is no error here: what is wrong with that message is its length
// (CheckMsgLen).
func CheckMO(mo, want uint32) error {
	if mo != want {
		return errMO(mo, want)
	}
	return nil
}

func errMO(mo, want uint32) error {
	return Errorf(ETypeUntagged, CodeInvalidMO, "MO %d, expected %d", mo, want)
}

// CheckMsgLen checks that a segment's n payload octets at message offset mo
// fit a buffer of bufLen octets (RFC 5041 section 7.1 check 4): "DDP Message
// too long for available buffer" otherwise. A zero-length segment places
// nothing and always fits. The sum is taken in 64 bits: nothing wraps.
func CheckMsgLen(mo, n, bufLen uint32) error {
	if n != 0 && uint64(mo)+uint64(n) > uint64(bufLen) {
		return errMsgLen(mo, n, bufLen)
	}
	return nil
}

func errMsgLen(mo, n, bufLen uint32) error {
	return Errorf(ETypeUntagged, CodeMsgTooLong, "%d octets at MO %d, buffer of %d octets", n, mo, bufLen)
}
