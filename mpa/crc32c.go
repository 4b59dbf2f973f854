package mpa

import "hash/crc32"

// CRC32c of FPDUs (RFC 5044 section 6.1, the iSCSI polynomial of RFC 3720
// appendix B.4). crc32cUpdate has the meaning of crc32.Update with the
// Castagnoli table; on amd64 it runs kernels of this package
// (crc32c_amd64.s), elsewhere, with the purego build tag or on a CPU without
// SSE 4.2 and PCLMULQDQ, hash/crc32.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32c returns the CRC32c (Castagnoli) of b.
func CRC32c(b []byte) uint32 { return crc32cUpdate(0, b) }

// CopyCRC32c copies from src into dst as the builtin copy does and returns
// the number of octets copied and their CRC32c: what a Reader does with each
// payload it places. Where the CPU allows it reads src once for both.
func CopyCRC32c(dst, src []byte) (n int, crc uint32) {
	n = min(len(dst), len(src))
	return n, crc32cCopy(0, dst, src[:n])
}

// crc32cPrefixGo is crc32cPrefix in Go: crc32cUpdate of the 16 octets w0
// and w1 hold little-endian, by slicing-by-8 from registers. Through
// hash/crc32 the octets would have to be in memory, and a stack array handed
// to it escapes (it calls through a function variable): an allocation an
// FPDU.
func crc32cPrefixGo(crc uint32, w0, w1 uint64) uint32 {
	return ^crc32cWord(crc32cWord(^crc, w0), w1)
}

// crc32cPrefix20Go is crc32cPrefixGo of 20 octets.
func crc32cPrefix20Go(crc uint32, w0, w1 uint64, w2 uint32) uint32 {
	return ^crc32cHalfWord(crc32cWord(crc32cWord(^crc, w0), w1), w2)
}

// castagnoli8 are slicing-by-8 tables: castagnoli8[k][b] is the CRC
// register's change for octet b followed by k zero octets.
var castagnoli8 = func() (t [8][256]uint32) {
	t[0] = *castagnoli
	for b := range 256 {
		c := t[0][b]
		for k := 1; k < 8; k++ {
			c = t[0][byte(c)] ^ c>>8
			t[k][b] = c
		}
	}
	return t
}()

// crc32cWord advances the raw CRC register c over the 8 octets w holds
// little-endian.
func crc32cWord(c uint32, w uint64) uint32 {
	w ^= uint64(c)
	t := &castagnoli8
	return t[7][byte(w)] ^ t[6][byte(w>>8)] ^ t[5][byte(w>>16)] ^ t[4][byte(w>>24)] ^
		t[3][byte(w>>32)] ^ t[2][byte(w>>40)] ^ t[1][byte(w>>48)] ^ t[0][byte(w>>56)]
}

// crc32cHalfWord advances c over the 4 octets w holds little-endian.
func crc32cHalfWord(c, w uint32) uint32 {
	w ^= c
	t := &castagnoli8
	return t[3][byte(w)] ^ t[2][byte(w>>8)] ^ t[1][byte(w>>16)] ^ t[0][byte(w>>24)]
}
