package mpa

import (
	"bytes"
	"fmt"
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

func BenchmarkCRC32c(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			src := make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				CRC32c(src)
			}
		})
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
