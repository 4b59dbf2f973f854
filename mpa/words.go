package mpa

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// AppendWords is Append for a 14- or 18-octet header (DDP's tagged and
// untagged headers) given as little-endian words: octets 0-7 in h0, 8-15
// in h1, 16-17 in h2 (ddp.TaggedWords, ddp.UntaggedWords). It is the bulk
// sender's Append: the FPDU's length field and header are built in
// registers, stored once and their CRC taken from the same registers,
// rather than stored by the caller and loaded back here as words, which
// waits for the stores to reach the cache. A payload up to copyMax
// octets is copied (Copied stays true), with its CRC taken as it is
// copied where the CPU can; anything else takes AppendV's path.
func (w *Writer) AppendWords(hdrLen int, h0, h1, h2 uint64, payload []byte) error {
	if (hdrLen != prefixHdr && hdrLen != prefixHdr20) || w.markers || len(payload) > copyMax {
		return w.appendWordsV(hdrLen, h0, h1, h2, payload)
	}
	n := hdrLen + len(payload)
	total := FPDULen(n)
	if !w.hasRoom(1, total) { // where AppendV flushes (see room)
		if err := w.makeRoom(1, total); err != nil {
			return err
		}
	}
	// The rest is appendCopied's for one piece, written out: a call to a
	// shared function costs every FPDU (BenchmarkTxWrite).
	a := len(w.arena)
	w.arena = w.arena[:a+total]
	f := w.arena[a:]
	c := w.putPrefix(f, n, hdrLen, h0, h1, h2)
	k := LenFieldLen + hdrLen
	end := total - CRCLen
	from := k
	if w.crc && crc32cCopyFused && len(payload) >= fuseMin {
		c = crc32cCopy(c, f[k:], payload)
		from = k + len(payload)
	} else {
		copy(f[k:], payload)
	}
	clear(f[k+len(payload) : end]) // pad
	if w.crc && from < end {
		c = crc32cUpdate(c, f[from:end])
	}
	binary.LittleEndian.PutUint32(f[end:], c) // 0 without CRCs
	w.grew(a)
	w.pos += uint64(total)
	w.queued += total
	return nil
}

// putPrefix stores the length field of an FPDU with an n-octet ULPDU and
// its 14- or 18-octet header, given as AppendWords takes it, at the start
// of f, and returns their CRC (0 without CRCs), taken from registers.
func (w *Writer) putPrefix(f []byte, n, hdrLen int, h0, h1, h2 uint64) uint32 {
	p0 := uint64(bits.ReverseBytes16(uint16(n))) | h0<<16
	p1 := h0>>48 | h1<<16
	binary.LittleEndian.PutUint64(f, p0)
	binary.LittleEndian.PutUint64(f[8:], p1)
	if hdrLen == prefixHdr {
		if !w.crc {
			return 0
		}
		return crc32cPrefix(0, p0, p1)
	}
	p2 := uint32(h1>>48 | h2<<16)
	binary.LittleEndian.PutUint32(f[16:], p2)
	if !w.crc {
		return 0
	}
	return crc32cPrefix20(0, p0, p1, p2)
}

// hdrWords loads a 14- or 18-octet header as AppendWords takes it.
func hdrWords(hdr []byte) (h0, h1, h2 uint64) {
	h0 = binary.LittleEndian.Uint64(hdr)
	if len(hdr) == prefixHdr {
		return h0, binary.LittleEndian.Uint64(hdr[6:]) >> 16, 0
	}
	return h0, binary.LittleEndian.Uint64(hdr[8:]), uint64(binary.LittleEndian.Uint16(hdr[16:]))
}

// appendWordsV is AppendWords through AppendV: with markers, a payload
// referenced rather than copied, or a header of another length.
func (w *Writer) appendWordsV(hdrLen int, h0, h1, h2 uint64, payload []byte) error {
	if hdrLen < 0 || hdrLen > len(w.hdrWords) {
		return fmt.Errorf("mpa: AppendWords with a header of %d octets", hdrLen)
	}
	binary.LittleEndian.PutUint64(w.hdrWords[:], h0)
	binary.LittleEndian.PutUint64(w.hdrWords[8:], h1)
	binary.LittleEndian.PutUint64(w.hdrWords[16:], h2)
	return w.Append(w.hdrWords[:hdrLen], payload)
}
