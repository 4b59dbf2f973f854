package mpa

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

// refParse is an independent, slow reading of a marker-bearing stream: every
// 4 octets at a multiple of 512 are a marker. It returns the ULPDUs and fails
// the test if any marker pointer or CRC is wrong.
func refParse(t *testing.T, raw []byte, markers bool) [][]byte {
	t.Helper()
	var out [][]byte
	p := 0 // raw offset
	// next reads n logical octets starting at raw offset p, skipping markers;
	// it returns them and the raw octets spanned.
	isMarker := func(q int) bool { return markers && q%MarkerInterval == 0 }
	type mk struct{ at, ptr int }
	for p < len(raw) {
		fpduRaw := p
		var seen []mk
		if isMarker(p) {
			seen = append(seen, mk{p, int(binary.BigEndian.Uint16(raw[p+2:]))})
			p += 4
		}
		hdrAt := p
		var logical []byte
		read := func(n int) []byte {
			start := len(logical)
			for len(logical)-start < n {
				if isMarker(p) {
					seen = append(seen, mk{p, int(binary.BigEndian.Uint16(raw[p+2:]))})
					p += 4
					continue
				}
				logical = append(logical, raw[p])
				p++
			}
			return logical[start:]
		}
		n := int(binary.BigEndian.Uint16(read(2)))
		ulpdu := append([]byte(nil), read(n)...)
		read(PadLen(n))
		if isMarker(p) {
			seen = append(seen, mk{p, int(binary.BigEndian.Uint16(raw[p+2:]))})
			p += 4
		}
		crc := binary.LittleEndian.Uint32(raw[p:])
		require.Equal(t, CRC32c(raw[fpduRaw:p]), crc, "CRC of FPDU at %d", fpduRaw)
		p += 4
		for _, m := range seen {
			want := m.at - hdrAt
			if m.at+4 == hdrAt {
				want = 0
			}
			require.Equal(t, want, m.ptr, "marker at %d (FPDU header at %d)", m.at, hdrAt)
		}
		out = append(out, ulpdu)
	}
	return out
}

func randMsgs(rng *rand.Rand, count, maxLen int) [][2][]byte {
	msgs := make([][2][]byte, count)
	for i := range msgs {
		h := make([]byte, rng.IntN(MaxHeader+1))
		p := make([]byte, rng.IntN(maxLen+1))
		for j := range h {
			h[j] = byte(rng.Uint32())
		}
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		msgs[i] = [2][]byte{h, p}
	}
	return msgs
}

func TestMarkersMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, crc := range []bool{false, true} {
		msgs := randMsgs(rng, 300, 3000)
		var out bytes.Buffer
		w := NewWriter(&out, true, true)
		w.crc = crc
		for i, m := range msgs {
			require.NoError(t, w.Append(m[0], m[1]))
			if i%7 == 0 {
				require.NoError(t, w.Flush())
			}
		}
		require.NoError(t, w.Flush())
		if crc {
			got := refParse(t, out.Bytes(), true)
			require.Len(t, got, len(msgs))
			for i, m := range msgs {
				require.Equal(t, append(append([]byte{}, m[0]...), m[1]...), got[i])
			}
		}
	}
}

// Every FPDU size class lands markers in every place: before the header,
// inside the header, inside payload, and between pad and CRC.
func TestMarkerPlacementCases(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out, true, true)
	// First FPDU starts with a marker (pointer 0).
	require.NoError(t, w.Append(make([]byte, 18), nil))
	require.NoError(t, w.Flush())
	raw := out.Bytes()
	require.Equal(t, []byte{0, 0, 0, 0, 0, 18}, raw[:6])
	// Fill so that the next marker position falls exactly after a pad.
	out.Reset()
	w = NewWriter(&out, true, true)
	// 4 (marker) + 2 + 506 + 0 pad = 512: the marker at 512 falls between pad and CRC.
	require.NoError(t, w.Append(make([]byte, 50), make([]byte, 456)))
	require.NoError(t, w.Flush())
	raw = out.Bytes()
	require.Equal(t, 4+2+506+4+4, len(raw))
	require.Equal(t, uint16(508), binary.BigEndian.Uint16(raw[514:516]), "pointer from header at 4 to marker at 512")
	refParse(t, raw, true)
}

type chunkReader struct {
	r   io.Reader
	rng *rand.Rand
	max int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	n := 1 + c.rng.IntN(c.max)
	if n < len(p) {
		p = p[:n]
	}
	return c.r.Read(p)
}

func TestReaderRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name         string
		crc, markers bool
		maxLen       int
		chunk        int
		flushes      bool // a Flush after some Appends (a CRC taken late must be in by then)
	}{
		{"plain", false, false, 3000, 1 << 20, false},
		{"crc", true, false, 3000, 1 << 20, false},
		{"markers", false, true, 3000, 1 << 20, false},
		{"crc+markers", true, true, 3000, 1 << 20, false},
		{"crc+markers small reads", true, true, 3000, 7, false},
		{"crc+markers large direct", true, true, 60000, 1 << 20, false},
		{"crc large direct", true, false, 65000, 1 << 16, false},
		{"crc small, flushes between", true, false, 300, 1 << 20, true},
		{"crc, flushes between", true, false, 3000, 1 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			msgs := randMsgs(rng, 200, tc.maxLen)
			var out bytes.Buffer
			w := NewWriter(&out, tc.crc, tc.markers)
			for _, m := range msgs {
				require.NoError(t, w.Append(m[0], m[1]))
				if tc.flushes && rng.IntN(4) == 0 {
					require.NoError(t, w.Flush())
				}
			}
			require.NoError(t, w.Flush())
			r := NewReader(&chunkReader{bytes.NewReader(out.Bytes()), rng, tc.chunk}, tc.crc, tc.markers, 4096, nil)
			readMsgs(t, r, msgs)
			_, err := r.Next()
			require.ErrorIs(t, err, io.EOF)
		})
	}
}

func TestReaderOneByte(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out, true, true)
	msgs := randMsgs(rand.New(rand.NewPCG(5, 6)), 20, 1500)
	for _, m := range msgs {
		require.NoError(t, w.Append(m[0], m[1]))
	}
	require.NoError(t, w.Flush())
	r := NewReader(iotest.OneByteReader(bytes.NewReader(out.Bytes())), true, true, 1024, nil)
	for _, m := range msgs {
		_, err := r.Next()
		require.NoError(t, err)
		require.NoError(t, r.Skip(len(m[0])+len(m[1])))
		require.NoError(t, r.Finish())
	}
}

func writeStream(t *testing.T, crc, markers bool, ulpdus ...[]byte) []byte {
	var out bytes.Buffer
	w := NewWriter(&out, crc, markers)
	for _, u := range ulpdus {
		require.NoError(t, w.Append(nil, u))
	}
	require.NoError(t, w.Flush())
	return out.Bytes()
}

func readAll(r *Reader) error {
	for {
		n, err := r.Next()
		if err != nil {
			return err
		}
		if err := r.Skip(n); err != nil {
			return err
		}
		if err := r.Finish(); err != nil {
			return err
		}
	}
}

func TestReaderErrors(t *testing.T) {
	good := writeStream(t, true, true, make([]byte, 700), []byte("second"))

	t.Run("bad CRC", func(t *testing.T) {
		b := bytes.Clone(good)
		b[100] ^= 1
		err := readAll(NewReader(bytes.NewReader(b), true, true, 0, nil))
		require.ErrorIs(t, err, ErrCRC)
		var e *Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, CodeCRC, e.Code)
	})
	t.Run("bad CRC without markers", func(t *testing.T) {
		// Every octet after the length field of a 701-octet ULPDU (3 pad
		// octets), read from a buffer that holds the whole FPDU (one CRC
		// pass) and one octet at a time (a pass per piece).
		plain := writeStream(t, true, false, make([]byte, 701), []byte("second"))
		for i := LenFieldLen; i < FPDULen(701); i++ {
			b := bytes.Clone(plain)
			b[i] ^= 0x40
			require.ErrorIs(t, readAll(NewReader(bytes.NewReader(b), true, false, 0, nil)), ErrCRC, "octet %d, whole", i)
			require.ErrorIs(t, readAll(NewReader(iotest.OneByteReader(bytes.NewReader(b)), true, false, 0, nil)), ErrCRC,
				"octet %d, one at a time", i)
		}
		require.ErrorIs(t, readAll(NewReader(bytes.NewReader(plain), true, false, 0, nil)), io.EOF)
	})
	t.Run("bad CRC in a payload copied with its CRC", func(t *testing.T) {
		// A ULPDU long enough that ReadFull takes its CRC while copying it
		// out of the buffer (where the CPU fuses the two), read into one
		// destination, or as a receive loop does: a 2- and a 12-octet
		// header first (their CRC joins the payload's, crcLazy), then the
		// payload; whole, one octet at a time, and in 300-octet reads.
		const n = 1501
		plain := writeStream(t, true, false, make([]byte, n), []byte("second"))
		split := false
		read := func(src io.Reader) error {
			r := NewReader(src, true, false, 4096, nil)
			dst := make([]byte, n)
			for {
				m, err := r.Next()
				if err != nil {
					return err
				}
				k := 0
				for _, h := range []int{2, 12} {
					if split && k+h <= m {
						if err := r.ReadFull(dst[k : k+h]); err != nil {
							return err
						}
						k += h
					}
				}
				if err := r.ReadFull(dst[k:m]); err != nil {
					return err
				}
				if err := r.Finish(); err != nil {
					return err
				}
			}
		}
		readers := map[string]func([]byte) io.Reader{
			"whole":  func(b []byte) io.Reader { return bytes.NewReader(b) },
			"octets": func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) },
			"by 300": func(b []byte) io.Reader { return &chunkReader{bytes.NewReader(b), rand.New(rand.NewPCG(1, 1)), 300} },
		}
		for _, split = range []bool{false, true} {
			for name, mk := range readers {
				for i := LenFieldLen; i < FPDULen(n); i++ {
					b := bytes.Clone(plain)
					b[i] ^= 0x10
					require.ErrorIs(t, read(mk(b)), ErrCRC, "octet %d, %s, header apart %v", i, name, split)
				}
				require.ErrorIs(t, read(mk(plain)), io.EOF, name)
			}
		}
	})
	t.Run("CRC not checked when off", func(t *testing.T) {
		b := writeStream(t, false, false, []byte("x"))
		b[len(b)-1] = 0xee
		require.ErrorIs(t, readAll(NewReader(bytes.NewReader(b), false, false, 0, nil)), io.EOF)
	})
	t.Run("marker pointer wrong", func(t *testing.T) {
		b := bytes.Clone(good)
		b[512+3] += 4
		require.ErrorIs(t, readAll(NewReader(bytes.NewReader(b), true, true, 0, nil)), ErrMarker)
	})
	t.Run("leading marker not zero", func(t *testing.T) {
		b := bytes.Clone(good)
		b[3] = 8
		require.ErrorIs(t, readAll(NewReader(bytes.NewReader(b), true, true, 0, nil)), ErrMarker)
	})
	t.Run("length over maximum", func(t *testing.T) {
		r := NewReader(bytes.NewReader(good), true, true, 0, nil)
		r.SetMaxULPDU(600)
		require.ErrorIs(t, readAll(r), ErrMarker)
	})
	t.Run("every truncation", func(t *testing.T) {
		for i := 1; i < len(good); i++ {
			err := readAll(NewReader(bytes.NewReader(good[:i]), true, true, 0, nil))
			require.Error(t, err, "prefix %d", i)
			if i == 4+2+700+4 || i == len(good) {
				continue
			}
			if !errors.Is(err, io.EOF) {
				require.ErrorIs(t, err, ErrStreamLost, "prefix %d", i)
			}
		}
	})
	t.Run("short ULPDU", func(t *testing.T) {
		r := NewReader(bytes.NewReader(writeStream(t, true, false, []byte("abc"))), true, false, 0, nil)
		_, err := r.Next()
		require.NoError(t, err)
		_, err = r.Header(4)
		require.ErrorIs(t, err, ErrShortULPDU)
	})
}

// EndsAtMarker predicts, before each Append, whether the FPDU will end
// where a marker is due; the writer's stream offset after the Append says.
func TestWriterEndsAtMarker(t *testing.T) {
	w := NewWriter(io.Discard, true, true)
	rng := rand.New(rand.NewPCG(1, 2))
	hits := 0
	for i := 0; i < 20000; i++ {
		n := 4 + rng.IntN(1500)
		if i%3 == 0 {
			n = 28 // header-only FPDUs of one size, as Read Requests
		}
		want := w.EndsAtMarker(n)
		require.NoError(t, w.Append(nil, make([]byte, n)))
		require.Equal(t, want, w.pos%MarkerInterval == 0, "FPDU %d (ULPDU %d) at stream offset %d", i, n, w.pos)
		if want {
			hits++
		}
		if i%100 == 0 {
			require.NoError(t, w.Flush())
		}
	}
	require.Positive(t, hits, "no FPDU ended at a marker: the test proves nothing")
	require.False(t, NewWriter(io.Discard, true, false).EndsAtMarker(506), "without markers")
}

// readMsgs reads msgs off r and checks them.
func readMsgs(t *testing.T, r *Reader, msgs [][2][]byte) {
	t.Helper()
	for i, m := range msgs {
		n, err := r.Next()
		require.NoError(t, err, "FPDU %d", i)
		require.Equal(t, len(m[0])+len(m[1]), n)
		h, err := r.Header(len(m[0]))
		require.NoError(t, err)
		require.Equal(t, m[0], h)
		p := make([]byte, len(m[1]))
		require.NoError(t, r.ReadFull(p))
		require.Equal(t, m[1], p)
		require.NoError(t, r.Finish())
	}
}
