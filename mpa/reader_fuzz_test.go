package mpa

import (
	"bytes"
	"testing"
)

// FuzzReader feeds arbitrary octets to the FPDU reader with every CRC and
// marker setting. It must never panic or loop, and whatever it accepts must
// survive a round trip through the Writer.
func FuzzReader(f *testing.F) {
	for _, crc := range []bool{false, true} {
		for _, mk := range []bool{false, true} {
			var out bytes.Buffer
			w := NewWriter(&out, crc, mk)
			w.Append([]byte("\x41\x43header.........."), []byte("payload"))
			w.Append(make([]byte, 14), make([]byte, 600))
			w.Append(nil, nil)
			w.Flush()
			f.Add(out.Bytes(), crc, mk, uint16(0))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, crc, markers bool, split uint16) {
		r := NewReader(bytes.NewReader(data), crc, markers, 1024, nil)
		var got [][]byte
		for len(got) < 1000 {
			n, err := r.Next()
			if err != nil {
				break
			}
			u := make([]byte, n)
			h := min(int(split)%(n+1), MaxHeader)
			b, err := r.Header(h)
			if err != nil {
				break
			}
			copy(u, b)
			if err := r.ReadFull(u[h:]); err != nil {
				break
			}
			if err := r.Finish(); err != nil {
				break
			}
			got = append(got, u)
		}
		var out bytes.Buffer
		w := NewWriter(&out, crc, markers)
		for _, u := range got {
			if err := w.Append(nil, u); err != nil {
				return // a ULPDU that fits 16 bits but not an FPDU with markers
			}
		}
		w.Flush()
		r2 := NewReader(&out, crc, markers, 1024, nil)
		for i, u := range got {
			n, err := r2.Next()
			if err != nil || n != len(u) {
				t.Fatalf("re-encoded FPDU %d: n %d err %v", i, n, err)
			}
			b := make([]byte, n)
			if err := r2.ReadFull(b); err != nil || !bytes.Equal(b, u) {
				t.Fatalf("re-encoded FPDU %d differs (%v)", i, err)
			}
			if err := r2.Finish(); err != nil {
				t.Fatalf("re-encoded FPDU %d: %v", i, err)
			}
		}
	})
}
