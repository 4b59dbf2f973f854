package mpa

import (
	"encoding/binary"
	"hash/crc32"
)

// CRC32c of FPDUs (RFC 5044 section 6.1, the iSCSI polynomial of RFC 3720
// appendix B.4). crc32cUpdate has the meaning of crc32.Update with the
// Castagnoli table; on amd64 it runs kernels of this package
// (crc32c_amd64.s), elsewhere, with the purego build tag or on a CPU without
// SSE 4.2 and PCLMULQDQ, hash/crc32.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32c returns the CRC32c (Castagnoli) of b.
func CRC32c(b []byte) uint32 { return crc32cUpdate(0, b) }

// crc32cPrefixMem is crc32cPrefix through memory: crc32cUpdate of the 16
// octets w0 and w1 hold little-endian.
func crc32cPrefixMem(crc uint32, w0, w1 uint64) uint32 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], w0)
	binary.LittleEndian.PutUint64(b[8:], w1)
	return crc32cUpdate(crc, b[:])
}

// crc32cPrefix20Mem is crc32cPrefix20 through memory.
func crc32cPrefix20Mem(crc uint32, w0, w1 uint64, w2 uint32) uint32 {
	var b [20]byte
	binary.LittleEndian.PutUint64(b[:], w0)
	binary.LittleEndian.PutUint64(b[8:], w1)
	binary.LittleEndian.PutUint32(b[16:], w2)
	return crc32cUpdate(crc, b[:])
}
