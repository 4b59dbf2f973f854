package mpa

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// NextBuffered, between FPDUs, must say exactly whether the next FPDU is
// buffered whole, trailer included: read in random pieces, it is checked
// against the octets the Reader holds, and a true must mean that Next and
// the ULPDU's reads take nothing from the stream.
func TestNextBuffered(t *testing.T) {
	for _, markers := range []bool{false, true} {
		var out bytes.Buffer
		w := NewWriter(&out, true, markers)
		var sizes []int
		rng := rand.New(rand.NewPCG(5, 6))
		for range 400 {
			n := 1 + rng.IntN(300)
			sizes = append(sizes, n)
			require.NoError(t, w.Append(make([]byte, 14), make([]byte, n-min(n, 14))))
		}
		require.NoError(t, w.Flush())
		src := &countReader{r: &chunkReader{r: bytes.NewReader(out.Bytes()), rng: rng, max: 700}}
		r := NewReader(src, true, markers, 4<<10, nil)
		trues := 0
		for i := range sizes {
			buffered := r.NextBuffered()
			if markers {
				require.False(t, buffered)
			} else if k := r.tail - r.head; k >= LenFieldLen {
				n := int(r.buf[r.head])<<8 | int(r.buf[r.head+1])
				require.Equal(t, k >= FPDULen(n), buffered, "FPDU %d", i)
			} else {
				require.False(t, buffered)
			}
			reads := src.n
			n, err := r.Next()
			require.NoError(t, err)
			require.Equal(t, max(sizes[i], 14), n)
			require.NoError(t, r.ReadFull(make([]byte, n)))
			require.NoError(t, r.Finish())
			if buffered {
				trues++
				require.Equal(t, reads, src.n, "FPDU %d was buffered whole, yet the Reader read", i)
			}
		}
		require.False(t, r.NextBuffered(), "the stream is at its end")
		if !markers {
			require.Greater(t, trues, 100)
		}
	}
}

// countReader counts the reads that reach it.
type countReader struct {
	r io.Reader
	n int
}

func (c *countReader) Read(p []byte) (int, error) { c.n++; return c.r.Read(p) }
