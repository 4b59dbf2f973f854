package ddp

import "math/bits"

// Headers as words. A sender that frames many FPDUs a second builds each
// header in registers and hands it to mpa.Writer.AppendWords, which stores
// it once next to the length field and takes its CRC from the same
// registers. Stored by AppendTagged and loaded back as words, the header
// would make the loads wait for the stores to reach the cache: a load
// that spans several stores is not forwarded from them.

// TaggedWords returns the octets AppendTagged appends, little-endian:
// octets 0-7 in w0, 8-13 in the low 48 bits of w1.
func TaggedWords(last bool, ulpCtrl byte, stag uint32, to uint64) (w0, w1 uint64) {
	t := bits.ReverseBytes64(to)
	w0 = uint64(ctrl(true, last)) | uint64(ulpCtrl)<<8 | uint64(bits.ReverseBytes32(stag))<<16 | t<<48
	return w0, t >> 16
}

// UntaggedWords returns the octets AppendUntagged appends, little-endian:
// octets 0-7 in w0, 8-15 in w1, 16-17 in the low 16 bits of w2.
func UntaggedWords(last bool, ulpCtrl byte, ulpWord, qn, msn, mo uint32) (w0, w1, w2 uint64) {
	q, m := uint64(bits.ReverseBytes32(qn)), uint64(bits.ReverseBytes32(mo))
	w0 = uint64(ctrl(false, last)) | uint64(ulpCtrl)<<8 | uint64(bits.ReverseBytes32(ulpWord))<<16 | q<<48
	w1 = q>>16 | uint64(bits.ReverseBytes32(msn))<<16 | m<<48
	return w0, w1, m >> 16
}
