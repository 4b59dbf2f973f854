package ddp

// Receive-side validation of untagged segments (RFC 5041 section 7.1). RFC
// 5041 section 7.1 lists five checks for a non-zero-length untagged segment and
// section 7.2 numbers their errors:
//
//	1. the QN is valid for this stream              -> CodeInvalidQN (0x01)
//	2. the QN and MSN have an associated buffer     -> CodeMSNNoBuffer (0x02)
//	3. the MO falls within the buffer               -> CodeInvalidMO (0x04)
//	4. MO + payload length falls within the buffer  -> CodeMsgTooLong (0x05)
//	5. the MSN falls in the legal range of the QN   -> CodeMSNRange (0x03)
//
// CheckQN does 1, Queue.CheckMSN does 2 and 5, CheckMO does 3 and 4. They
// return nil or a *Error, and allocate only for the error.

// CheckQN checks that qn names one of the stream's nq untagged queues,
// numbered from zero (RFC 5041 section 7.1 check 1). Which queues exist is up
// to the ULP: three for RDMAP, four with the RFC 7306 extensions.
func CheckQN(qn, nq uint32) error {
	if qn >= nq {
		return Errorf(ETypeUntagged, CodeInvalidQN, "QN %d, stream has %d queues", qn, nq)
	}
	return nil
}

// Queue is the Data Sink's view of one untagged queue's message sequence
// numbers (RFC 5041 sections 4.3 and 7.1). Messages are Delivered in order
// (section 5.3), so the legal MSNs are a window: from the MSN of the oldest
// message not yet completed, through one per posted buffer. Window bounds how
// far ahead a peer may ever be, typically the receive queue depth, or IRD for
// the Read Request queue.
//
// Queue is a plain value the QP keeps per QN; it is not safe for concurrent
// use.
type Queue struct {
	next   uint32 // MSN of the oldest message not yet completed
	posted uint32 // buffers posted for MSNs next, next+1, ...
	window uint32 // most buffers that can ever be posted
}

// NewQueue returns the state of a queue that has no buffers posted yet and
// accepts at most window of them. Its first message has MSN 1 (RFC 5041
// section 4.3: "The initial value for MSN MUST be one").
func NewQueue(window uint32) Queue { return Queue{next: 1, window: window} }

// Next returns the MSN of the oldest message not yet completed.
func (q *Queue) Next() uint32 { return q.next }

// Posted returns how many buffers are posted, counting the one of Next.
func (q *Queue) Posted() uint32 { return q.posted }

// Post records n more posted buffers. It reports false, and records nothing,
// if that would exceed the window.
func (q *Queue) Post(n uint32) bool {
	if uint64(q.posted)+uint64(n) > uint64(q.window) {
		return false
	}
	q.posted += n
	return true
}

// Complete records that the message with MSN Next was completed and its
// buffer consumed. The MSN wraps from 0xFFFFFFFF to 0 (RFC 5041 section 4.3).
func (q *Queue) Complete() {
	if q.posted == 0 {
		return
	}
	q.posted--
	q.next++
}

// Slot returns msn's position among the posted buffers: 0 for Next's buffer.
// It is meaningful only after CheckMSN accepted msn.
func (q *Queue) Slot(msn uint32) uint32 { return msn - q.next }

// CheckMSN checks that a segment's MSN has a posted buffer (RFC 5041 section
// 7.1 checks 2 and 5). An MSN within the window but beyond the posted buffers
// needs a buffer that is not there: "Invalid MSN - no buffer available". Any
// other MSN, behind Next (an old message) or beyond the window, is outside the
// legal range: "Invalid MSN - MSN range is not valid". Arithmetic is modulo
// 2^32, as MSNs are.
//
// RFC 5041 requires the check for non-zero-length segments; RDMAP (RFC 5040
// section 5.3) also has every Send consume a buffer, so a QP calls it for
// zero-length Sends too.
func (q *Queue) CheckMSN(msn uint32) error {
	d := msn - q.next
	switch {
	case d < q.posted:
		return nil
	case d < q.window:
		return Errorf(ETypeUntagged, CodeMSNNoBuffer, "MSN %d, %d buffers posted from MSN %d", msn, q.posted, q.next)
	}
	return Errorf(ETypeUntagged, CodeMSNRange, "MSN %d outside %d..%d", msn, q.next, q.next+q.window-1)
}

// CheckMO checks that a segment's n payload octets at message offset mo fit a
// buffer of bufLen octets (RFC 5041 section 7.1 checks 3 and 4). A zero-length
// segment places nothing and is not checked (section 7.1 covers
// "non-zero-length Untagged DDP Segments").
func CheckMO(mo, n, bufLen uint32) error {
	switch {
	case n == 0:
		return nil
	case mo >= bufLen:
		return Errorf(ETypeUntagged, CodeInvalidMO, "MO %d, buffer of %d octets", mo, bufLen)
	case uint64(mo)+uint64(n) > uint64(bufLen):
		return Errorf(ETypeUntagged, CodeMsgTooLong, "%d octets at MO %d, buffer of %d octets", n, mo, bufLen)
	}
	return nil
}
