package rmem

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// The adapter as the io package uses it: io.ReadFull over an
// io.SectionReader of the whole region, ReadAt across its end (the part
// there is, and io.EOF), fmt.Fprintf through an io.OffsetWriter at an odd
// offset.
func TestIOAdapters(t *testing.T) {
	checkRoutines(t)
	const size = 100000
	p := newPair(t, pairOpts{size: size, cfg: Config{PieceSize: 8192}})
	a := p.b.IO(context.Background())
	require.EqualValues(t, size, a.Size())

	got := make([]byte, size)
	n, err := io.ReadFull(io.NewSectionReader(a, 0, a.Size()), got)
	require.NoError(t, err)
	require.Equal(t, size, n)
	requireSame(t, initialMem(size), got, "io.ReadFull")

	buf := make([]byte, 100)
	n, err = a.ReadAt(buf, size-40)
	require.Equal(t, 40, n)
	require.ErrorIs(t, err, io.EOF)
	requireSame(t, initialMem(size)[size-40:], buf[:40], "the last octets")
	n, err = a.ReadAt(buf, size)
	require.Zero(t, n)
	require.ErrorIs(t, err, io.EOF)
	_, err = a.ReadAt(buf, -1)
	require.ErrorIs(t, err, ErrOutOfRange)

	w := io.NewOffsetWriter(a, 12345)
	_, err = fmt.Fprintf(w, "hello, %s", "remote memory")
	require.NoError(t, err)
	_, err = fmt.Fprintf(w, " (%d)", 42)
	require.NoError(t, err)
	back := make([]byte, 26)
	_, err = a.ReadAt(back, 12345)
	require.NoError(t, err)
	require.Equal(t, "hello, remote memory (42)", string(back[:25]))
	require.Equal(t, initialMem(size)[12345+25], back[25])

	_, err = a.WriteAt(make([]byte, 10), size-5)
	require.ErrorIs(t, err, ErrOutOfRange, "no Write past the end")
}
