package ddp

// Segment is one DDP segment of a message: Len payload octets starting at
// message offset Off. For an untagged message Off is the segment's MO; for a
// tagged one its TO is the message's initial TO plus Off (RFC 5041 section
// 5.2).
type Segment struct {
	Off, Len uint32
	Last     bool
}

// Segmenter splits a message into DDP segments of at most a given payload
// size (RFC 5041 section 5.2). It is a value type that allocates nothing:
//
//	s := ddp.NewSegmenter(msgLen, ddp.MaxPayload(mulpdu, tagged))
//	for seg, ok := s.Next(); ok; seg, ok = s.Next() { ... }
type Segmenter struct {
	msgLen, max, off uint32
	done             bool
}

// NewSegmenter returns a Segmenter for a message of msgLen octets carried in
// segments of at most maxPayload payload octets. RFC 5041 section 5.2 caps a
// ULP message below 2^32 octets, which the uint32 enforces. A zero-length
// message is one segment with L set ("A zero-length DDP Message is allowed and
// MUST consume exactly one DDP Segment"). A non-empty message with a zero
// maxPayload cannot be segmented and yields no segments.
func NewSegmenter(msgLen, maxPayload uint32) Segmenter {
	return Segmenter{msgLen: msgLen, max: maxPayload, done: msgLen > 0 && maxPayload == 0}
}

// Next returns the next segment, or false when there are no more.
func (s *Segmenter) Next() (Segment, bool) {
	if s.done {
		return Segment{}, false
	}
	n := s.msgLen - s.off
	if n > s.max {
		n = s.max
	}
	seg := Segment{Off: s.off, Len: n, Last: s.off+n == s.msgLen}
	s.off += n
	s.done = seg.Last
	return seg, true
}

// Count returns how many segments the message takes in all: at least one, or
// zero when it cannot be segmented.
func (s Segmenter) Count() int {
	switch {
	case s.msgLen == 0:
		return 1
	case s.max == 0:
		return 0
	}
	return int((uint64(s.msgLen) + uint64(s.max) - 1) / uint64(s.max))
}

// MaxPayload returns the payload room of a DDP segment in a ULPDU of at most
// mulpdu octets (the MULPDU that MPA advertises): RFC 5041 section 5.2's
// example "1482 = 1500 (MULPDU) - 18 (for the DDP Header)". It is zero when
// the header alone does not fit. RDMAP messages with an RDMAP header after the
// DDP header (Read Request, Terminate) are single-segment and do not use it.
func MaxPayload(mulpdu int, tagged bool) uint32 {
	n := mulpdu - HdrLen(tagged)
	if n <= 0 {
		return 0
	}
	if uint64(n) > 1<<32-1 {
		return 1<<32 - 1
	}
	return uint32(n)
}
