package mpa

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

func stdCRC32c(c uint32, p []byte) uint32 { return crc32.Update(c, castagnoli, p) }

// CopyCRC32c copies what the builtin copy would and returns the CRC32c of
// that, at every length around the kernels' thresholds and both ways short.
func TestCopyCRC32c(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, 5000)
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	for _, l := range []int{0, 1, 31, 63, 64, 255, 256, 257, 1428, 4095, 4096, 4097, 5000} {
		for _, dl := range []int{l, l + 7, l / 2} {
			s := src[len(src)-l:]
			dst := make([]byte, dl+8)
			for i := range dst {
				dst[i] = 0xee
			}
			n, crc := CopyCRC32c(dst[:dl], s)
			want := min(l, dl)
			if n != want {
				t.Fatalf("len %d into %d: copied %d, want %d", l, dl, n, want)
			}
			if crc != crc32.Checksum(s[:n], castagnoli) {
				t.Fatalf("len %d into %d: CRC %#08x, want %#08x", l, dl, crc, crc32.Checksum(s[:n], castagnoli))
			}
			if !bytes.Equal(dst[:n], s[:n]) {
				t.Fatalf("len %d into %d: copied octets differ", l, dl)
			}
			for i := n; i < len(dst); i++ {
				if dst[i] != 0xee {
					t.Fatalf("len %d into %d: octet %d beyond the copy written", l, dl, i)
				}
			}
		}
	}
}

// The RFC 3720 B.4 vectors through crc32cUpdate, at every alignment and
// continued from every split point.
func TestCRC32cUpdateVectors(t *testing.T) {
	inc, dec := make([]byte, 32), make([]byte, 32)
	for i := range inc {
		inc[i], dec[i] = byte(i), byte(31-i)
	}
	for _, tc := range []struct {
		in   []byte
		want uint32
	}{
		{make([]byte, 32), 0x8a9136aa},
		{bytes.Repeat([]byte{0xff}, 32), 0x62a8ab43},
		{inc, 0x46dd794e},
		{dec, 0x113fdb5c},
		{[]byte("123456789"), 0xe3069283},
	} {
		for off := range 8 {
			b := append(make([]byte, off), tc.in...)[off:]
			if got := crc32cUpdate(0, b); got != tc.want {
				t.Errorf("%x at offset %d: %#08x, want %#08x", tc.in, off, got, tc.want)
			}
			for i := range b {
				if got := crc32cUpdate(crc32cUpdate(0, b[:i]), b[i:]); got != tc.want {
					t.Errorf("%x split at %d: %#08x, want %#08x", tc.in, i, got, tc.want)
				}
			}
		}
	}
}

// Every length up to 2048, at random offsets and with random initial CRCs,
// and a few long ones, against hash/crc32.
func TestCRC32cLengths(t *testing.T) {
	checkCRC32cLengths(t, crc32cUpdate, 0)
}

// checkCRC32cLengths compares f with hash/crc32 for every length from min to
// 2048 and for longer buffers around the kernels' block and chunk sizes.
func checkCRC32cLengths(t *testing.T, f func(uint32, []byte) uint32, min int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 200<<10)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	check := func(n int) {
		off := rng.IntN(64)
		p := buf[off : off+n]
		c := rng.Uint32()
		if n%5 == 0 {
			c = 0
		}
		if got, want := f(c, p), stdCRC32c(c, p); got != want {
			t.Fatalf("length %d offset %d initial %#08x: %#08x, want %#08x", n, off, c, got, want)
		}
	}
	for n := min; n <= 2048; n++ {
		for range 3 {
			check(n)
		}
	}
	for _, n := range []int{4031, 4032, 4033, 9000, 65000, 65535, 65536, 65536 + 31, 65536 + 32, 65536 + 33, 3 * 65536, 150000} {
		for d := -9; d <= 9; d++ {
			if n+d >= min {
				check(n + d)
			}
		}
	}
}

// FuzzCRC32c compares crc32cUpdate with hash/crc32 for any input and initial
// CRC, whole and split in two.
func FuzzCRC32c(f *testing.F) {
	f.Add([]byte("123456789"), uint32(0), uint16(4))
	f.Add(make([]byte, 32), uint32(0), uint16(0))
	f.Add(bytes.Repeat([]byte{0xff}, 1442), uint32(0xffffffff), uint16(721))
	f.Add(make([]byte, 4096+37), uint32(0x8a9136aa), uint16(100))
	f.Fuzz(func(t *testing.T, p []byte, c uint32, split uint16) {
		want := stdCRC32c(c, p)
		if got := crc32cUpdate(c, p); got != want {
			t.Fatalf("%d octets from %#08x: %#08x, want %#08x", len(p), c, got, want)
		}
		s := int(split) % (len(p) + 1)
		if got := crc32cUpdate(crc32cUpdate(c, p[:s]), p[s:]); got != want {
			t.Fatalf("%d octets from %#08x split at %d: %#08x, want %#08x", len(p), c, s, got, want)
		}
		// The copying kernel, into a destination as misaligned as split says.
		off := int(split) % 64
		dst := make([]byte, off+len(p))
		if got := crc32cCopy(c, dst[off:], p); got != want || !bytes.Equal(dst[off:], p) {
			t.Fatalf("%d octets from %#08x copied to offset %d: %#08x, want %#08x", len(p), c, off, got, want)
		}
	})
}

// The Writer's CRC, however it takes it (one pass after the copy, while
// copying, piece by piece around a payload it references), against
// hash/crc32, for FPDUs that follow others in the arena. One Writer takes
// every case, so that its arena holds the octets of earlier ones: a pad
// must be zeroed, not left. With CRCs off the field is zero.
func TestWriterCRC(t *testing.T) {
	for _, crc := range []bool{true, false} {
		testWriterCRC(t, crc)
	}
}

func testWriterCRC(t *testing.T, crc bool) {
	rng := rand.New(rand.NewPCG(5, 6))
	var out bytes.Buffer
	w := NewWriter(&out, crc, false)
	for _, sizes := range [][]int{
		{}, {0}, {5}, {255}, {256}, {1434}, {4096}, {4097}, {65000},
		{300, 7, 1000}, {5000, 256, 3}, {64, 64, 64, 64}, {255, 256, 257}, {1, 4096, 4097},
		{1, 2}, {3}, {2, 2, 2},
	} {
		out.Reset()
		var want [][]byte
		for lead := range 3 {
			hdr := make([]byte, 14+lead)
			pieces := make([][]byte, len(sizes))
			ulpdu := append([]byte(nil), hdr...)
			for i, n := range sizes {
				pieces[i] = make([]byte, n)
				for j := range pieces[i] {
					pieces[i][j] = byte(rng.Uint32()) | 1
				}
				ulpdu = append(ulpdu, pieces[i]...)
			}
			if err := w.AppendV(hdr, pieces); err != nil {
				t.Fatal(err)
			}
			want = append(want, ulpdu)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		f := out.Bytes()
		for i, u := range want {
			n := FPDULen(len(u))
			fpdu := f[:n]
			f = f[n:]
			if got := binary.BigEndian.Uint16(fpdu); int(got) != len(u) || !bytes.Equal(fpdu[2:2+len(u)], u) {
				t.Fatalf("pieces %v, FPDU %d: wrong ULPDU", sizes, i)
			}
			if pad := fpdu[2+len(u) : n-CRCLen]; !bytes.Equal(pad, zeros[:len(pad)]) {
				t.Fatalf("pieces %v, FPDU %d: pad % x", sizes, i, pad)
			}
			want := stdCRC32c(0, fpdu[:n-CRCLen])
			if !crc {
				want = 0
			}
			if got := binary.LittleEndian.Uint32(fpdu[n-CRCLen:]); got != want {
				t.Fatalf("pieces %v, FPDU %d: CRC %#08x, want %#08x", sizes, i, got, want)
			}
		}
	}
}
