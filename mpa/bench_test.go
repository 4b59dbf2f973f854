package mpa

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
	"testing"
)

var benchSizes = []int{64, 1448, 9000, 65000}

// loopReader serves the same stream forever, so decode benchmarks measure
// the Reader, not a refill.
type loopReader struct {
	b []byte
	i int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := copy(p, l.b[l.i:])
	l.i = (l.i + n) % len(l.b)
	return n, nil
}

func BenchmarkCopy(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			src, dst := make([]byte, size), make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

// crcSizes: a short FPDU, the marker interval, the ULPDU of an FPDU at a
// 1448-octet MSS, a page, a jumbo frame and the largest FPDU.
var crcSizes = []int{64, 512, 1442, 4096, 9000, 65000}

// BenchmarkCRC32c runs hash/crc32's Castagnoli (impl=stdlib, the baseline)
// and the package's crc32cUpdate (impl=mpa) on the same buffers, as
// independent calls, as the CRCs of successive FPDUs are:
//
//	go test -run '^$' -bench 'CRC32c$' -count 6 ./mpa | benchstat -col /impl -
func BenchmarkCRC32c(b *testing.B) {
	for _, impl := range []struct {
		name string
		f    func(uint32, []byte) uint32
	}{
		{"stdlib", func(c uint32, p []byte) uint32 { return crc32.Update(c, castagnoli, p) }},
		{"mpa", crc32cUpdate},
	} {
		for _, size := range crcSizes {
			b.Run(fmt.Sprintf("impl=%s/size=%d", impl.name, size), func(b *testing.B) {
				// Offset by one octet: FPDUs in a stream are not 8-aligned.
				src := make([]byte, size+1)[1:]
				for i := range src {
					src[i] = byte(i * 7)
				}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				var c uint32
				for b.Loop() {
					c ^= impl.f(0, src)
				}
				crcSink = c
			})
		}
	}
}

var crcSink uint32

// BenchmarkCopyCRC32c: a payload copied into an arena after a 16-octet
// header, then one CRC pass over both (how=separate, the Writer before), or
// the header's CRC and then crc32cCopy (how=copy, the Writer for payloads
// from fuseMin on).
func BenchmarkCopyCRC32c(b *testing.B) {
	for _, how := range []string{"separate", "copy"} {
		for _, size := range []int{64, 128, 256, 512, 1434, 4096} {
			b.Run(fmt.Sprintf("how=%s/size=%d", how, size), func(b *testing.B) {
				arena := make([]byte, 256<<10)
				src := make([]byte, size+1)[1:]
				b.SetBytes(int64(size))
				off := 0
				var c uint32
				for b.Loop() {
					if off+16+size > len(arena) {
						off = 0
					}
					if how == "separate" {
						copy(arena[off+16:], src)
						c = crc32cUpdate(c, arena[off:off+16+size])
					} else {
						c = crc32cUpdate(c, arena[off:off+16])
						c = crc32cCopy(c, arena[off+16:], src)
					}
					off += 16 + size
				}
				crcSink = c
			})
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	for _, markers := range []bool{false, true} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("markers=%v/%d", markers, size), func(b *testing.B) {
				hdr, payload := make([]byte, 14), make([]byte, size-14)
				w := NewWriter(io.Discard, true, markers)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					if err := w.Append(hdr, payload); err != nil {
						b.Fatal(err)
					}
					if w.Buffered() >= 256<<10 {
						w.Flush()
					}
				}
				w.Flush()
			})
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, markers := range []bool{false, true} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("markers=%v/%d", markers, size), func(b *testing.B) {
				// A stream whose length is a multiple of the marker interval,
				// so that it can repeat with markers in the same places.
				var out bytes.Buffer
				w := NewWriter(&out, true, markers)
				hdr, payload := make([]byte, 14), make([]byte, size-14)
				for i := 0; i < 512 || out.Len()%MarkerInterval != 0; i++ {
					w.Append(hdr, payload)
					w.Flush()
				}
				r := NewReader(&loopReader{b: out.Bytes()}, true, markers, DefaultReadBuffer, nil)
				dst := make([]byte, size)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					n, err := r.Next()
					if err != nil {
						b.Fatal(err)
					}
					h, _ := r.Header(14)
					_ = h
					if err := r.ReadFull(dst[:n-14]); err != nil {
						b.Fatal(err)
					}
					if err := r.Finish(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
