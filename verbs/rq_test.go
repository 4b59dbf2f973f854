package verbs

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// A receive queue takes exactly the WRs it was made for and gives them back
// in order with their buffers, lap after lap, at any fill level.
func TestRecvQueueSizes(t *testing.T) {
	d := openDev(DeviceAttr{})
	pd := d.AllocPD()
	mr, err := pd.RegMR(make([]byte, 4096), LocalWrite)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{1, 3, 5, 100, 128, 129} {
		var q recvQueue
		q.init(size, 2)
		post := func(id uint64) error {
			off := int(id % 2000)
			_, err := q.post(pd, []RecvWR{{ID: id, SGL: []SGE{mr.SGE(off, 7), mr.SGE(off+100, 9)}}}, nil, nil)
			return err
		}
		var next, want uint64
		for range 20 * size {
			for range rng.IntN(size + 2) {
				if next-want == uint64(size) {
					require.ErrorIs(t, post(next), ErrQueueFull, "size %d: %d posted", size, size)
					break
				}
				require.NoError(t, post(next), "size %d", size)
				next++
			}
			for range rng.IntN(size + 2) {
				var b recvBuf
				if want == next {
					require.False(t, q.pop(&b), "size %d: empty", size)
					break
				}
				require.True(t, q.pop(&b))
				require.Equal(t, want, b.id, "size %d: in order", size)
				off := int(want % 2000)
				require.Equal(t, 2, b.nseg)
				require.Equal(t, 16, b.total)
				require.Same(t, &mr.Buf()[off], &b.segs[0][0], "size %d: its first buffer", size)
				require.Same(t, &mr.Buf()[off+100], &b.segs[1][0], "size %d: its second buffer", size)
				want++
			}
		}
	}
}
