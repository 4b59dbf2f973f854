package rmem

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// One Read and one Write, each larger than Depth × PieceSize and starting
// off any alignment, so that each is split into more WRs than fit at
// once and slots are reused within the call.
func TestLargeReadWrite(t *testing.T) {
	checkRoutines(t)
	p := newPair(t, pairOpts{size: 1 << 20, cfg: Config{Depth: 8, PieceSize: 4096}})
	ctx := context.Background()
	const off, n = 12345, 300000
	got := make([]byte, n)
	k, err := p.b.ReadAt(ctx, got, off)
	require.NoError(t, err)
	require.Equal(t, n, k)
	want := initialMem(1 << 20)
	requireSame(t, want[off:off+n], got, "read")

	data := make([]byte, n)
	fill(data, 2)
	k, err = p.b.WriteAt(ctx, data, off+1)
	require.NoError(t, err)
	require.Equal(t, n, k)
	back := make([]byte, n)
	_, err = p.b.ReadAt(ctx, back, off+1) // a Read after the Writes on the QP sees them
	require.NoError(t, err)
	requireSame(t, data, back, "read back")
	p.placed(t, (n+4095)/4096)
	requireSame(t, data, p.mr.Buf()[off+1:off+1+n], "the server's memory")
	require.Equal(t, Stats{Depth: 8, ORD: p.b.ord, PieceSize: 4096}, p.b.Stats())
}
