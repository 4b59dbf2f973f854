package ddp

// Receive-side validation of tagged segments (RFC 5041 section 7.1). For a
// non-zero-length tagged segment RFC 5041 section 7.1 lists:
//
//	1. the STag is valid for this stream                    -> CodeInvalidSTag (0x00) or CodeSTagNotAssoc (0x02)
//	2. the STag has a buffer that allows Placement          -> CodeInvalidSTag (0x00)
//	3. the TO falls within the buffer                       -> CodeBaseBounds (0x01)
//	4. TO + payload length falls within the buffer          -> CodeBaseBounds (0x01)
//	5. the 64-bit sum of TO and payload length does not wrap -> CodeTOWrap (0x03)
//
// Checks 1 and 2 need the memory registry, which is the QP's: it returns
// ErrInvalidSTag or ErrSTagNotAssoc (siw also reports missing access rights as
// an invalid STag, since RFC 5041 has no code for them). CheckTagged does
// checks 5, 3 and 4, in that order: the wrap check needs no buffer, and once
// the sum wraps, check 4 has nothing meaningful to compare.
//
// RFC 5041 section 5.2: "The STag and TO fields MUST NOT be checked for a
// zero-length Tagged DDP Message", so none of these apply when n is zero.

// CheckTOWrap checks RFC 5041 section 7.1 check 5 as written: "A 64-bit
// unsigned sum of the DDP Segment payload length and the TO does not wrap".
// A segment whose last octet is at 2^64-1 makes the sum 0, so it counts as a
// wrap too.
func CheckTOWrap(to uint64, n uint32) error {
	if n != 0 && to+uint64(n) < to {
		return Errorf(ETypeTagged, CodeTOWrap, "%d octets at TO %#x wrap", n, to)
	}
	return nil
}

// CheckBounds checks that n octets placed at to lie within the tagged buffer
// whose legal offsets are [base, base+size) (RFC 5041 section 7.1 checks 3
// and 4). It assumes CheckTOWrap passed.
func CheckBounds(to uint64, n uint32, base, size uint64) error {
	if n == 0 {
		return nil
	}
	// Written so that nothing overflows, unlike base+size or to+n.
	if to < base || to-base >= size || uint64(n) > size-(to-base) {
		return Errorf(ETypeTagged, CodeBaseBounds, "%d octets at TO %#x, buffer [%#x, +%d)", n, to, base, size)
	}
	return nil
}

// CheckTagged runs CheckTOWrap then CheckBounds: everything of RFC 5041
// section 7.1 for a tagged segment once the STag has been resolved to the
// buffer [base, base+size).
func CheckTagged(to uint64, n uint32, base, size uint64) error {
	if err := CheckTOWrap(to, n); err != nil {
		return err
	}
	return CheckBounds(to, n, base, size)
}
