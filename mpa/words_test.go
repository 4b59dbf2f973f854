package mpa

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// AppendWords writes the octets Append writes for the same header and
// payload: with and without CRCs and markers, headers of 14 and 18 octets
// (and another length, 20, which takes Append's path), payloads around the
// fused copy's threshold and above copyMax, mixed with plain Appends, and
// enough of them that the arena fills and flushes in between.
func TestAppendWordsMatchesAppend(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	sizes := []int{0, 1, 3, fuseMin - 1, fuseMin, fuseMin + 2, 1424, 1428, copyMax, copyMax + 1, 9000}
	for _, crc := range []bool{true, false} {
		for _, markers := range []bool{false, true} {
			var want, got bytes.Buffer
			ww, wg := NewWriter(&want, crc, markers), NewWriter(&got, crc, markers)
			for i := range 600 {
				hl := []int{14, 18, 14, 18, 20}[rng.IntN(5)]
				var h [3]uint64
				for j := range h {
					h[j] = rng.Uint64()
				}
				var hb [24]byte
				binary.LittleEndian.PutUint64(hb[:], h[0])
				binary.LittleEndian.PutUint64(hb[8:], h[1])
				binary.LittleEndian.PutUint64(hb[16:], h[2])
				p := make([]byte, sizes[rng.IntN(len(sizes))])
				for j := range p {
					p[j] = byte(rng.Uint32())
				}
				require.NoError(t, ww.Append(hb[:hl], p))
				if i%7 == 3 {
					require.NoError(t, wg.Append(hb[:hl], p))
				} else {
					require.NoError(t, wg.AppendWords(hl, h[0], h[1], h[2], p))
				}
				if i%50 == 49 {
					require.NoError(t, ww.Flush())
					require.NoError(t, wg.Flush())
				}
			}
			require.NoError(t, ww.Flush())
			require.NoError(t, wg.Flush())
			require.Equal(t, want.Len(), got.Len(), "crc %v markers %v", crc, markers)
			require.True(t, bytes.Equal(want.Bytes(), got.Bytes()), "crc %v markers %v", crc, markers)
			require.Equal(t, ww.Written(), wg.Written())
		}
	}
}

// A header longer than three words is refused, not read past.
func TestAppendWordsTooLong(t *testing.T) {
	w := NewWriter(&bytes.Buffer{}, true, false)
	require.Error(t, w.AppendWords(25, 1, 2, 3, nil))
	require.Error(t, w.AppendWords(-1, 1, 2, 3, nil))
}

// AppendWords frames FPDUs that the Reader takes apart again: the header
// and payload come back, CRCs check.
func TestAppendWordsReadBack(t *testing.T) {
	var stream bytes.Buffer
	w := NewWriter(&stream, true, false)
	p := bytes.Repeat([]byte("iwarp"), 300)
	require.NoError(t, w.AppendWords(14, 0x0102030405060708, 0x0000_0a0b0c0d0e0f, 0, p))
	require.NoError(t, w.AppendWords(18, 0x1112131415161718, 0x191a1b1c1d1e1f20, 0x2122, p[:77]))
	require.NoError(t, w.Flush())
	r := NewReader(&stream, true, false, 0, nil)
	for _, c := range []struct {
		hdr []byte
		p   []byte
	}{
		{[]byte{8, 7, 6, 5, 4, 3, 2, 1, 0x0f, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a}, p},
		{[]byte{0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, 0x20, 0x1f, 0x1e, 0x1d, 0x1c, 0x1b, 0x1a, 0x19, 0x22, 0x21}, p[:77]},
	} {
		n, err := r.Next()
		require.NoError(t, err)
		require.Equal(t, len(c.hdr)+len(c.p), n)
		got := make([]byte, n)
		require.NoError(t, r.ReadFull(got))
		require.NoError(t, r.Finish())
		require.Equal(t, append(append([]byte{}, c.hdr...), c.p...), got)
	}
}

// sizeLog records the size of each write.
type sizeLog struct{ sizes []int }

func (l *sizeLog) Write(p []byte) (int, error) { l.sizes = append(l.sizes, len(p)); return len(p), nil }

// AppendWords flushes its arena where AppendV would, write for write: a
// bulk sender's write size decides how TCP packs it (see room), and the
// two must not differ.
func TestAppendWordsFlushesAsAppend(t *testing.T) {
	for _, payload := range []int{1428, 1424, 64, 4000} {
		var a, b sizeLog
		wa, wb := NewWriter(&a, true, false), NewWriter(&b, true, false)
		p := make([]byte, payload)
		var h [24]byte
		for range 10000 {
			require.NoError(t, wa.Append(h[:14], p))
			require.NoError(t, wb.AppendWords(14, 0, 0, 0, p))
		}
		require.NoError(t, wa.Flush())
		require.NoError(t, wb.Flush())
		require.Equal(t, a.sizes, b.sizes, "payload %d", payload)
		require.Greater(t, len(a.sizes), 2, "the arena filled, payload %d", payload)
	}

	// Referenced payloads (over copyMax) in between use up iovecs, not
	// the arena: the iovec bound must be the same too.
	var a, b sizeLog
	wa, wb := NewWriter(&a, true, false), NewWriter(&b, true, false)
	big, small := make([]byte, copyMax+1), make([]byte, 100)
	var h [24]byte
	for range 3000 {
		require.NoError(t, wa.Append(h[:14], big))
		require.NoError(t, wb.Append(h[:14], big))
		require.NoError(t, wa.Append(h[:14], small))
		require.NoError(t, wb.AppendWords(14, 0, 0, 0, small))
	}
	require.NoError(t, wa.Flush())
	require.NoError(t, wb.Flush())
	require.Equal(t, a.sizes, b.sizes)
}
