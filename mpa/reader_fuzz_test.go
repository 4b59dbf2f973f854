package mpa

import (
	"bytes"
	"fmt"
	"testing"
	"testing/iotest"
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
			w.Append(make([]byte, 14), make([]byte, 1500)) // CRC taken in the copy
			w.Append(nil, nil)
			w.Flush()
			f.Add(out.Bytes(), crc, mk, uint16(0))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, crc, markers bool, split uint16) {
		got, err := readULPDUs(NewReader(bytes.NewReader(data), crc, markers, 1024, nil), split)
		// Read an octet at a time, the Reader takes every CRC piece by
		// piece instead of an FPDU in one pass: it must come to the same.
		got1, err1 := readULPDUs(NewReader(iotest.OneByteReader(bytes.NewReader(data)), crc, markers, 1024, nil), split)
		if fmt.Sprint(err) != fmt.Sprint(err1) || len(got) != len(got1) {
			t.Fatalf("whole: %d ULPDUs, %v; an octet at a time: %d ULPDUs, %v", len(got), err, len(got1), err1)
		}
		for i := range got {
			if !bytes.Equal(got[i], got1[i]) {
				t.Fatalf("ULPDU %d differs read whole and an octet at a time", i)
			}
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

// readULPDUs reads up to 1000 FPDUs, taking split octets of each as a
// header first, and returns their ULPDUs and the error that stopped it.
func readULPDUs(r *Reader, split uint16) ([][]byte, error) {
	var got [][]byte
	for len(got) < 1000 {
		n, err := r.Next()
		if err != nil {
			return got, err
		}
		u := make([]byte, n)
		h := min(int(split)%(n+1), MaxHeader)
		b, err := r.Header(h)
		if err != nil {
			return got, err
		}
		copy(u, b)
		if err := r.ReadFull(u[h:]); err != nil {
			return got, err
		}
		if err := r.Finish(); err != nil {
			return got, err
		}
		got = append(got, u)
	}
	return got, nil
}
