package mpa

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// Peek shows what ReadFull reads next, never past the ULPDU, the buffer or
// a marker, and consumes nothing: the CRC still covers every octet.
func TestReaderPeek(t *testing.T) {
	ulpdus := [][]byte{bytes.Repeat([]byte{0xa1}, 40), make([]byte, 1500), []byte("x"), nil}
	for i := range ulpdus[1] {
		ulpdus[1][i] = byte(i * 13)
	}
	for _, markers := range []bool{false, true} {
		for _, most := range []int{1, 7, 300, 1 << 16} {
			src := writeStream(t, true, markers, ulpdus...)
			peeked := 0
			r := NewReader(&chunkReader{bytes.NewReader(src), rand.New(rand.NewPCG(2, uint64(most))), most}, true, markers, 4096, nil)
			for i, u := range ulpdus {
				n, err := r.Next()
				require.NoError(t, err)
				require.Equal(t, len(u), n)
				got := make([]byte, 0, n)
				for len(got) < n {
					p := r.Peek(5)
					require.LessOrEqual(t, len(p), min(5, n-len(got)), "ULPDU %d at %d", i, len(got))
					require.Equal(t, u[len(got):len(got)+len(p)], p, "ULPDU %d at %d: what ReadFull reads next", i, len(got))
					peeked += len(p)
					k := max(len(p), 1)
					b := make([]byte, min(k, n-len(got)))
					require.NoError(t, r.ReadFull(b))
					got = append(got, b...)
				}
				require.Empty(t, r.Peek(5), "nothing past the ULPDU")
				require.NoError(t, r.Finish(), "markers %v, reads of %d", markers, most)
			}
			_, err := r.Next()
			require.ErrorIs(t, err, io.EOF)
			if most > 1 {
				require.Positive(t, peeked, "markers %v, reads of %d: Peek saw buffered octets", markers, most)
			}
		}
	}
}
