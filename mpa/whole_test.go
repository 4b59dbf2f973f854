package mpa

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"
)

// wholeSizes are ULPDU lengths around every threshold of the Reader: the
// header, fuseMin (a piece fused with its CRC), fuseRxMin (an FPDU left to
// the fused copy), an Ethernet MSS and the read buffer's sizes.
var wholeSizes = []int{
	0, 1, 2, 3, 4, 5, 13, 14, 17, 18, 27, 28, 127, 128, 129,
	254, 255, 256, 257, 258, 300, 511, 512, 513,
	1014, 1015, 1016, 1017, 1018, 1019, 1020, 1021, 1023, 1024, 1025, 1026,
	1442, 1448, 2000, 4080, 4090, 4096, 5000, 9000, 20000, 65535,
}

// wholeOp is one step of a read plan for an FPDU.
type wholeOp struct {
	kind int // 0 Header, 1 ReadFull, 2 Skip, 3 Finish early, 4 Peek, 5 Whole and Consume, 6 ReadLast
	n    int
}

// wholeNext picks the next step of a random read plan for an FPDU with
// left ULPDU octets unread (first: nothing read yet): pieces below and
// above 256 octets, with a few calls that fail without ending the FPDU
// (reading past its end, Finish too early). It returns false when the plan
// is done.
func wholeNext(rng *rand.Rand, left int, first bool) (wholeOp, bool) {
	if first && rng.IntN(3) > 0 {
		return wholeOp{0, min(rng.IntN(MaxHeader+2), left+rng.IntN(2))}, true
	}
	if left == 0 {
		switch rng.IntN(8) {
		case 0:
			return wholeOp{1, rng.IntN(2)}, true
		case 1:
			return wholeOp{0, rng.IntN(2)}, true
		case 2:
			return wholeOp{6, rng.IntN(2)}, true // ReadLast of nothing finishes the FPDU
		}
		return wholeOp{}, false
	}
	sizes := []int{1, 3, 7, 64, 255, 256, 257, 700, 1024, 1500, 9000}
	var k int
	switch rng.IntN(4) {
	case 0:
		k = left
	case 1:
		k = left + 1 // past the end: ErrShortULPDU
	default:
		k = min(sizes[rng.IntN(len(sizes))], left)
	}
	switch rng.IntN(13) {
	case 11, 12:
		return wholeOp{6, k}, true
	case 10:
		return wholeOp{5, k}, true
	case 0:
		return wholeOp{2, k}, true
	case 1:
		return wholeOp{3, 0}, true
	case 2:
		return wholeOp{4, rng.IntN(2000)}, true
	case 3:
		return wholeOp{0, min(k, MaxHeader+1)}, true
	}
	return wholeOp{1, k}, true
}

// wholeTrace reads src through a Reader on rd, following the plans seeded
// by seed, and returns a trace of everything the caller sees (lengths,
// octets, Left, errors) and how many FPDUs were read on the fast path.
func wholeTrace(t *testing.T, rd io.Reader, crc, markers bool, size int, seed uint64, maxULPDU int) (string, int) {
	r := NewReader(rd, crc, markers, size, nil)
	if maxULPDU > 0 {
		r.SetMaxULPDU(maxULPDU)
	}
	rng := rand.New(rand.NewPCG(seed, 99))
	var b strings.Builder
	fast := 0
	fatal := func(err error) bool {
		// Errors that leave the FPDU where it was: the caller may go on.
		return err != nil && !errors.Is(err, ErrShortULPDU) && !strings.Contains(err.Error(), "unread") && !strings.Contains(err.Error(), "exceeds")
	}
	for fpdu := 0; fpdu < 200; fpdu++ {
		n, err := r.Next()
		fmt.Fprintf(&b, "next %d %v\n", n, err)
		if err != nil {
			return b.String(), fast
		}
		if r.whole {
			fast++
		}
		if r.ULPDULen() != n || r.Left() != n {
			t.Fatalf("ULPDULen %d Left %d after Next gave %d", r.ULPDULen(), r.Left(), n)
		}
		var peeked []byte // what Peek showed at ULPDU offset peekAt
		peekAt := 0
		// saw checks octets read at ULPDU offset off against what Peek
		// showed.
		saw := func(off int, d []byte) {
			for i := range d {
				if j := off + i - peekAt; j >= 0 && j < len(peeked) && peeked[j] != d[i] {
					t.Fatalf("FPDU %d: Peek showed %#x at %d, ReadFull read %#x", fpdu, peeked[j], off+i, d[i])
				}
			}
		}
		finished := false // by ReadLast
		for i := 0; i < 10000 && !finished; i++ {
			op, ok := wholeNext(rng, r.Left(), i == 0)
			if !ok {
				break
			}
			switch op.kind {
			case 6:
				// The rest and Finish in one call; with a length other
				// than Left's, what ReadFull and Finish would say.
				off := n - r.Left()
				d := make([]byte, op.n)
				err := r.ReadLast(d)
				if err == nil || errors.Is(err, ErrCRC) {
					saw(off, d)
				}
				finished = !r.InFPDU()
				fmt.Fprintf(&b, "last %d %x %v %v\n", op.n, d, err, finished)
				if finished && err == nil && r.Left() != 0 {
					t.Fatalf("ReadLast finished with %d left", r.Left())
				}
				if finished && err != nil && !errors.Is(err, ErrCRC) || !finished && fatal(err) {
					return b.String(), fast
				}
			case 0:
				off := n - r.Left()
				h, err := r.Header(op.n)
				fmt.Fprintf(&b, "header %d %x %v\n", op.n, h, err)
				saw(off, h)
				if fatal(err) {
					return b.String(), fast
				}
			case 1, 2:
				var err error
				d := make([]byte, op.n)
				if op.kind == 1 {
					off := n - r.Left()
					err = r.ReadFull(d)
					if err == nil {
						saw(off, d)
					}
				} else {
					err = r.Skip(op.n)
				}
				fmt.Fprintf(&b, "read%d %d %x %v\n", op.kind, op.n, d, err)
				if fatal(err) {
					return b.String(), fast
				}
			case 3:
				fmt.Fprintf(&b, "early finish %v\n", r.Finish())
			case 5:
				// A header checked in place (Whole, Consume) reads as
				// ReadFull does.
				k := min(op.n, r.Left())
				off := n - r.Left()
				var d []byte
				var err error
				if w := r.Whole(); w != nil {
					if len(w) != r.Left() {
						t.Fatalf("Whole gave %d octets with %d left", len(w), r.Left())
					}
					d = append(d, w[:k]...)
					r.Consume(k)
				} else {
					d = make([]byte, k)
					err = r.ReadFull(d)
				}
				if err == nil {
					saw(off, d)
				}
				fmt.Fprintf(&b, "read1 %d %x %v\n", k, d, err)
				if fatal(err) {
					return b.String(), fast
				}
			case 4:
				// What Peek shows depends on buffering: it is checked, not
				// traced.
				peeked, peekAt = append([]byte(nil), r.Peek(op.n)...), n-r.Left()
				if len(peeked) > r.Left() {
					t.Fatalf("Peek(%d) gave %d octets with %d left", op.n, len(peeked), r.Left())
				}
			}
			fmt.Fprintf(&b, "left %d\n", r.Left())
		}
		if finished {
			if r.whole {
				t.Fatal("whole still set after ReadLast")
			}
			continue
		}
		err = r.Finish()
		fmt.Fprintf(&b, "finish %v\n", err)
		if r.whole {
			t.Fatalf("whole still set after Finish (%v)", err)
		}
		if err != nil && !errors.Is(err, ErrCRC) {
			return b.String(), fast
		}
	}
	return b.String(), fast
}

// wholeStream returns a stream of FPDUs of the given ULPDU lengths with
// random contents.
func wholeStream(t *testing.T, rng *rand.Rand, crc, markers bool, lens []int) []byte {
	var out bytes.Buffer
	w := NewWriter(&out, crc, markers)
	for _, n := range lens {
		u := make([]byte, n)
		for i := range u {
			u[i] = byte(rng.Uint32())
		}
		if err := w.Append(nil, u); err != nil {
			continue // too long for markers
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// FPDUs read straight from the buffer (whole) and read an octet at a time
// (never whole) give the same octets, the same Left after every call and
// the same errors, for any split of the reads, with CRC on or off, on clean
// and corrupted streams. (Where the CPU fuses the CRC with a copy, ULPDUs
// from fuseRxMin on take it in ReadFull's copies, shorter ones in Next's
// one pass.)
func TestReaderWholeMatchesPieces(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	totalFast := 0
	for _, crc := range []bool{false, true} {
		for _, markers := range []bool{false, true} {
			for _, size := range []int{1024, 4096, DefaultReadBuffer} {
				rounds := 12
				if raceEnabled {
					rounds = 3
				}
				for round := 0; round < rounds; round++ {
					lens := make([]int, 40)
					for i := range lens {
						lens[i] = wholeSizes[rng.IntN(len(wholeSizes))]
					}
					clean := wholeStream(t, rng, crc, markers, lens)
					streams := [][]byte{clean, clean[:rng.IntN(len(clean)+1)]}
					for k := 0; k < 4; k++ {
						c := bytes.Clone(clean)
						c[rng.IntN(len(c))] ^= byte(1 + rng.IntN(255))
						streams = append(streams, c)
					}
					for si, s := range streams {
						seed := rng.Uint64()
						maxULPDU := 0
						if round%3 == 2 {
							maxULPDU = 1 + rng.IntN(3000)
						}
						want, _ := wholeTrace(t, iotest.OneByteReader(bytes.NewReader(s)), crc, markers, size, seed, maxULPDU)
						for ri, rd := range []io.Reader{
							bytes.NewReader(s),
							iotest.HalfReader(bytes.NewReader(s)),
							iotest.DataErrReader(bytes.NewReader(s)),
							&chunkReader{bytes.NewReader(s), rand.New(rand.NewPCG(seed, 1)), 3000},
						} {
							got, fast := wholeTrace(t, rd, crc, markers, size, seed, maxULPDU)
							totalFast += fast
							if markers && fast != 0 {
								t.Fatalf("fast path with markers")
							}
							if got != want {
								t.Fatalf("crc %v markers %v buf %d round %d stream %d reader %d: traces differ:\n%s", crc, markers, size, round, si, ri, firstDiff(want, got))
							}
						}
					}
				}
			}
		}
	}
	if totalFast == 0 {
		t.Fatal("no FPDU took the fast path")
	}
	t.Logf("%d FPDUs on the fast path", totalFast)
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			trim := func(s string) string {
				if len(s) > 300 {
					return s[:300] + "..."
				}
				return s
			}
			return fmt.Sprintf("line %d:\n octet at a time: %s\n other:           %s", i, trim(al[i]), trim(bl[i]))
		}
	}
	return fmt.Sprintf("lengths %d, %d lines", len(al), len(bl))
}

// Every split of an FPDU's header and payload, at every offset, and every
// corrupted octet of a short stream, reads the same whole and an octet at
// a time.
func TestReaderWholeEverySplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	for _, crc := range []bool{false, true} {
		for _, n := range []int{0, 1, 3, 18, 28, 255, 256, 257, 300, 1030, 1448} {
			s := wholeStream(t, rng, crc, false, []int{n, n, 7})
			// last: the last piece with ReadLast, traced as the ReadFull
			// and Finish it stands for.
			read := func(rd io.Reader, split, piece int, last bool) string {
				r := NewReader(rd, crc, false, 4096, nil)
				var b strings.Builder
				for {
					m, err := r.Next()
					fmt.Fprintf(&b, "next %d %v %d\n", m, err, r.Left())
					if err != nil {
						return b.String()
					}
					h, err := r.Header(min(split, m, MaxHeader))
					fmt.Fprintf(&b, "h %x %v %d\n", h, err, r.Left())
					finished := false
					for r.Left() > 0 && err == nil {
						d := make([]byte, min(piece, r.Left()))
						if last && len(d) == r.Left() {
							err = r.ReadLast(d)
							if r.Left() > 0 { // in the payload: ReadFull's error
								fmt.Fprintf(&b, "p %x %v %d\n", d, err, r.Left())
								return b.String()
							}
							fmt.Fprintf(&b, "p %x %v %d\n", d, nil, r.Left())
							fmt.Fprintf(&b, "f %v\n", err)
							finished = true
							break
						}
						err = r.ReadFull(d)
						fmt.Fprintf(&b, "p %x %v %d\n", d, err, r.Left())
					}
					if finished {
						if err != nil && !errors.Is(err, ErrCRC) {
							return b.String()
						}
						continue
					}
					if err != nil {
						return b.String()
					}
					err = r.Finish()
					fmt.Fprintf(&b, "f %v\n", err)
					if err != nil && !errors.Is(err, ErrCRC) {
						return b.String()
					}
				}
			}
			stride := 1 // every octet and split; a sample under the race detector
			if raceEnabled {
				stride = 7
			}
			for _, piece := range []int{1, 5, 255, 256, 257, 1024, 1 << 16} {
				for split := 0; split <= min(n, MaxHeader); split += 1 + split/8 + stride - 1 {
					want := read(iotest.OneByteReader(bytes.NewReader(s)), split, piece, false)
					for _, last := range []bool{false, true} {
						if got := read(bytes.NewReader(s), split, piece, last); got != want {
							t.Fatalf("crc %v n %d split %d piece %d ReadLast %v:\n%s", crc, n, split, piece, last, firstDiff(want, got))
						}
					}
				}
			}
			for i := 0; i < len(s); i += stride {
				c := bytes.Clone(s)
				c[i] ^= 0x5a
				want := read(iotest.OneByteReader(bytes.NewReader(c)), 14, 300, false)
				for _, last := range []bool{false, true} {
					if got := read(bytes.NewReader(c), 14, 300, last); got != want {
						t.Fatalf("crc %v n %d octet %d corrupted, ReadLast %v:\n%s", crc, n, i, last, firstDiff(want, got))
					}
				}
			}
		}
	}
}
