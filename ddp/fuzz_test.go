package ddp

import (
	"bytes"
	"testing"
)

// FuzzTagged: Parse never panics, and a header it accepts re-encodes to the
// same octets, apart from the reserved control bits, which RFC 5041 section
// 4.1 has the receiver ignore and the sender zero.
func FuzzTagged(f *testing.F) {
	f.Add(AppendTagged(nil, true, 0x40, 0x01020304, 0x0102030405060708))
	f.Add(AppendTagged(nil, false, 0x42, 0, 0))
	f.Add(append(AppendTagged(nil, true, 0x40, 0x1234, 0x1000), "written!"...))
	f.Add([]byte{0xc2, 0x40})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, tagged, err := Parse(b)
		if err != nil || !tagged {
			return
		}
		h := Tagged(b[:n])
		re := AppendTagged(nil, h.Last(), h.ULPCtrl(), h.STag(), h.TO())
		want := append([]byte(nil), b[:n]...)
		want[0] &^= ReservedMask
		if !bytes.Equal(re, want) {
			t.Fatalf("re-encoded %x, want %x", re, want)
		}
	})
}

// FuzzUntagged is FuzzTagged for the untagged header.
func FuzzUntagged(f *testing.F) {
	f.Add(AppendUntagged(nil, false, 0x4a, 0x41424344, 0x11121314, 0x21222324, 0x31323334))
	f.Add(append(AppendUntagged(nil, true, 0x43, 0, 0, 1, 0), "hello"...))
	f.Add(AppendUntagged(nil, true, 0x41, 0, 1, 1, 0))
	f.Add([]byte{0x43})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, tagged, err := Parse(b)
		if err != nil || tagged {
			return
		}
		h := Untagged(b[:n])
		re := AppendUntagged(nil, h.Last(), h.ULPCtrl(), h.ULPWord(), h.QN(), h.MSN(), h.MO())
		want := append([]byte(nil), b[:n]...)
		want[0] &^= ReservedMask
		if !bytes.Equal(re, want) {
			t.Fatalf("re-encoded %x, want %x", re, want)
		}
	})
}

// FuzzSegmenter: the segments tile the message, each within the limit, the
// last one alone has L set, and Count agrees.
func FuzzSegmenter(f *testing.F) {
	f.Add(uint32(0), uint32(0))
	f.Add(uint32(2048), uint32(1482))
	f.Add(uint32(1<<32-1), uint32(1<<31+1))
	f.Fuzz(func(t *testing.T, msgLen, max uint32) {
		if max != 0 && msgLen/max > 1<<16 {
			return // keep each run short
		}
		s := NewSegmenter(msgLen, max)
		var off uint32
		n := 0
		for seg, ok := s.Next(); ok; seg, ok = s.Next() {
			n++
			if seg.Off != off || seg.Len > max && msgLen != 0 || seg.Last != (off+seg.Len == msgLen) {
				t.Fatalf("segment %d: %+v at %d of %d (max %d)", n, seg, off, msgLen, max)
			}
			off += seg.Len
		}
		if n != NewSegmenter(msgLen, max).Count() {
			t.Fatalf("%d segments, Count %d", n, NewSegmenter(msgLen, max).Count())
		}
		if n > 0 && off != msgLen {
			t.Fatalf("covered %d of %d", off, msgLen)
		}
	})
}
