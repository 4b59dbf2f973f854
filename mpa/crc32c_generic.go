//go:build !amd64 || purego

package mpa

import "hash/crc32"

func crc32cUpdate(crc uint32, p []byte) uint32 { return crc32.Update(crc, castagnoli, p) }

const crc32cCopyFused = false

func crc32cCopy(crc uint32, dst, src []byte) uint32 {
	copy(dst[:len(src)], src)
	return crc32cUpdate(crc, src)
}

// crc32cPrefix returns crc32cUpdate(crc, the 16 octets w0 and w1 hold
// little-endian).
func crc32cPrefix(crc uint32, w0, w1 uint64) uint32 { return crc32cPrefixGo(crc, w0, w1) }

// crc32cPrefix20 is crc32cPrefix of the 20 octets w0, w1 and w2 hold.
func crc32cPrefix20(crc uint32, w0, w1 uint64, w2 uint32) uint32 {
	return crc32cPrefix20Go(crc, w0, w1, w2)
}

// crc32cPrefixCopy is crc32cCopy(crc32cUpdate(crc, prefix), dst, src).
func crc32cPrefixCopy(crc uint32, prefix, dst, src []byte) uint32 {
	return crc32cCopy(crc32cUpdate(crc, prefix), dst, src)
}
