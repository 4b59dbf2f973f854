//go:build !purego

package mpa

import (
	"encoding/binary"
	"hash/crc32"
	"math/bits"

	"golang.org/x/sys/cpu"
)

// CRC32c kernels for amd64 (crc32c_amd64.s). Each takes and returns the raw
// CRC register (crc32.Update's value inverted) and is right for any length;
// each is fast from some length on:
//
//   - crc32cSingle: the SSE 4.2 crc32 instruction, one chain of 8-octet steps.
//     Its latency (3 cycles a step) is the bound.
//   - crc32cTriple: SSE 4.2 and PCLMULQDQ, from 32 octets (below, it is
//     crc32cSingle) up to 64 KiB + 32 (crc32cTripleChunks). After the
//     len%8 first octets, the m 8-octet words are cut into three streams
//     that run at once: (m-1)/3 words each for the first two, the rest (one
//     to three more) for the last. The first two CRCs are then shifted past
//     the q words after them with one carry-less multiply each by
//     x^(64q-33) mod P and added in with the last crc32 step. Unlike
//     hash/crc32, which interleaves only fixed 168- and 1344-octet blocks
//     and runs the rest as one chain, every word runs three-wide, whatever
//     the length.
//   - crc32cFold: AVX-512 VPCLMULQDQ, from 64 octets. It folds 64-octet
//     blocks (four 128-bit lanes) with carry-less multiplies, four registers
//     at once, then folds the lanes into one 128-bit value and reduces that
//     with two crc32 steps. The len%64 octets before the blocks go through
//     the crc32 instruction first. crc32cFoldCopy is the same that also
//     stores what it loads, for the Writer's copy into its arena. (On Intel
//     CPUs before Ice Lake, where 512-bit multiplies would lower the clock,
//     there is no VPCLMULQDQ, so this kernel is not picked.)
//
// Polynomials are bit-reflected as the crc32 instruction has them: in a
// 32-bit register bit k stands for x^(31-k), in a 64-bit word for x^(63-k).
// PCLMULQDQ of two 64-bit words then gives x·a·b in 128 bits, and crc32q(0, d)
// gives d·x^32 mod P.

// Where each kernel takes over. The CRCs of successive FPDUs do not depend
// on each other, so what counts is the time of independent calls
// (BenchmarkCRC32cKernels/mode=independent), not the latency of one: one
// chain below 64 octets, then folding where the CPU has it, else three
// streams (docs/measurements.md has the crossover figures).
const (
	singleMax = 64
	foldMin   = 64
	// tripleChunk bounds one crc32cTriple call (but for tripleMin more),
	// so that its shift constants stay within the tables below.
	tripleMin   = 32
	tripleChunk = 64 << 10
)

var (
	haveCRC32c = cpu.X86.HasSSE42 && cpu.X86.HasPCLMULQDQ
	haveFold   = haveCRC32c && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ
)

func crc32cUpdate(crc uint32, p []byte) uint32 {
	switch {
	case !haveCRC32c:
		return crc32.Update(crc, castagnoli, p)
	case len(p) < singleMax:
		return ^crc32cSingle(^crc, p)
	case haveFold && len(p) >= foldMin:
		return ^crc32cFold(^crc, p)
	}
	return ^crc32cTripleChunks(^crc, p)
}

// crc32cTripleChunks runs crc32cTriple on len(p) >= tripleMin octets in
// pieces of at most tripleChunk+tripleMin.
func crc32cTripleChunks(c uint32, p []byte) uint32 {
	for len(p) > tripleChunk+tripleMin {
		c = crc32cTriple(c, p[:tripleChunk])
		p = p[tripleChunk:]
	}
	return crc32cTriple(c, p)
}

// crc32cCopyFused says that crc32cCopy reads src once for long enough
// buffers.
var crc32cCopyFused = haveFold

// crc32cCopy copies src into dst, which must be as long at least, and
// returns crc32cUpdate(crc, src).
func crc32cCopy(crc uint32, dst, src []byte) uint32 {
	dst = dst[:len(src)]
	if len(src) >= foldMin && haveFold {
		return ^crc32cFoldCopy(^crc, dst, src)
	}
	copy(dst, src)
	return crc32cUpdate(crc, src)
}

// crc32cPrefixCopy is crc32cCopy(crc32cUpdate(crc, prefix), dst, src) in one
// call, for what a Reader places from an FPDU it holds whole: prefix is what
// lies ahead of the piece and is not in the CRC yet, usually the length field
// and the DDP header (16 or 20 octets, taken as loaded words; any other length
// goes through crc32cUpdate). Three nested calls fewer per FPDU than the two
// it stands for.
func crc32cPrefixCopy(crc uint32, prefix, dst, src []byte) uint32 {
	if !haveFold || len(src) < foldMin {
		return crc32cCopy(crc32cUpdate(crc, prefix), dst, src)
	}
	c := ^crc
	switch len(prefix) {
	case 16:
		c = crc32cWords(c, binary.LittleEndian.Uint64(prefix), binary.LittleEndian.Uint64(prefix[8:]))
	case 20:
		c = crc32cWords20(c, binary.LittleEndian.Uint64(prefix), binary.LittleEndian.Uint64(prefix[8:]), binary.LittleEndian.Uint32(prefix[16:]))
	default:
		c = ^crc32cUpdate(crc, prefix)
	}
	return ^crc32cFoldCopy(c, dst[:len(src)], src)
}

//go:noescape
func crc32cSingle(c uint32, p []byte) uint32

// crc32cWords is crc32cSingle of the 16 octets w0 and w1 hold little-endian
// (as an 8-octet load from memory gives them), taken from registers.
func crc32cWords(c uint32, w0, w1 uint64) uint32

// crc32cPrefix returns crc32cUpdate(crc, the 16 octets w0 and w1 hold
// little-endian), from registers where the CPU has the crc32 instruction: a
// caller that has just stored those octets would otherwise load them back
// as words of another size, and the loads would stall until the stores
// retire.
func crc32cPrefix(crc uint32, w0, w1 uint64) uint32 {
	if !haveCRC32c {
		return crc32cPrefixGo(crc, w0, w1)
	}
	return ^crc32cWords(^crc, w0, w1)
}

// crc32cWords20 is crc32cSingle of the 20 octets w0, w1 and w2 hold
// little-endian.
func crc32cWords20(c uint32, w0, w1 uint64, w2 uint32) uint32

// crc32cPrefix20 is crc32cPrefix of 20 octets: an untagged header's FPDU
// prefix.
func crc32cPrefix20(crc uint32, w0, w1 uint64, w2 uint32) uint32 {
	if !haveCRC32c {
		return crc32cPrefix20Go(crc, w0, w1, w2)
	}
	return ^crc32cWords20(^crc, w0, w1, w2)
}

//go:noescape
func crc32cTriple(c uint32, p []byte) uint32

//go:noescape
func crc32cFold(c uint32, p []byte) uint32

//go:noescape
func crc32cFoldCopy(c uint32, dst, src []byte) uint32

// Shift constants of crc32cTriple, K(q) = x^(64q-33) mod P for a shift of q
// 8-octet words, 2 <= q < 2+64*128: crc32cKlo[q-2] for q < 66; else a
// carry-less multiply, reduced by a crc32 step (which makes a·b·x^33), of
// crc32cKlo[(q-2)%64] = K((q-2)%64+2) and crc32cKhi[(q-2)/64] =
// x^(4096((q-2)/64)-33).
var crc32cKlo, crc32cKhi = func() (lo [64]uint64, hi [128]uint64) {
	// One multiplication an entry (a few µs at start-up).
	k, step := xPowModN(95), xPowModN(64)
	for i := range lo {
		lo[i] = uint64(bits.Reverse32(k))
		k = mulMod(k, step)
	}
	k, step = xPowModN(4096-33), xPowModN(4096)
	for j := 1; j < len(hi); j++ {
		hi[j] = uint64(bits.Reverse32(k))
		k = mulMod(k, step)
	}
	return lo, hi
}()

// Fold constants of crc32cFold, pairs for the low and the high 64 bits of a
// 128-bit lane: folding a lane forward by d bits multiplies its first
// (high-order) word by x^(d+63) and its second by x^(d-1), each reduced mod P
// into the upper half of a word, so that the products stay within 96 bits.
//
//	[0:2] 2048 bits: each of four registers past the other three
//	[2:4] 1024 bits, [4:6] 512 bits: one register onto the next
//	[6:14] per lane of a register: 384, 256, 128 bits and none, to add
//	       its four lanes up into the last
var crc32cFoldK = func() (k [14]uint64) {
	for i, d := range []uint64{2048, 1024, 512, 384, 256, 128} {
		k[2*i] = uint64(xPowMod(d+63)) << 32
		k[2*i+1] = uint64(xPowMod(d-1)) << 32
	}
	return k
}()

// xPowMod returns x^e mod P, P the Castagnoli polynomial, bit-reflected.
func xPowMod(e uint64) uint32 { return bits.Reverse32(xPowModN(e)) }

// xPowModN returns x^e mod P unreflected.
func xPowModN(e uint64) uint32 {
	r, sq := uint32(1), uint32(2) // x^0 and x^1
	for ; e > 0; e >>= 1 {
		if e&1 != 0 {
			r = mulMod(r, sq)
		}
		sq = mulMod(sq, sq)
	}
	return r
}

// mulMod returns a·b mod P for unreflected a and b of degree below 32.
func mulMod(a, b uint32) uint32 {
	const p = 0x1edc6f41 // P without x^32, unreflected
	var r uint32
	for i := 31; i >= 0; i-- {
		r = r<<1 ^ p&-(r>>31)
		r ^= a & -(b >> i & 1)
	}
	return r
}
