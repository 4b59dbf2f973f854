package target

import (
	"bytes"
	"testing"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/stretchr/testify/require"
)

// A Go host against the Go target over loopback: identify, write, read
// back, flush, at sizes in the capsule, one MDTS and several.
func TestHostTargetBasic(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 8<<20, Config{})
	c := connectHost(t, addr, testNQN, host.Config{})
	require.Equal(t, testNQN, c.Info.SubNQN)
	require.Equal(t, 2, c.IOQueues())
	ids, err := c.ActiveNamespaces(testCtx(t))
	require.NoError(t, err)
	require.Equal(t, []uint32{1}, ids)
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	require.Equal(t, int64(8<<20), ns.Size())
	require.Equal(t, 512, ns.BlockSize())
	for _, n := range []int{512, 4096, 8192, 128 << 10, 1 << 20} {
		w := make([]byte, n)
		fill(w, uint64(n))
		off := int64(n) // somewhere not 0
		k, err := ns.WriteAt(w, off)
		require.NoError(t, err, "write %d", n)
		require.Equal(t, n, k)
		r := make([]byte, n)
		k, err = ns.ReadAt(r, off)
		require.NoError(t, err, "read %d", n)
		require.Equal(t, n, k)
		require.True(t, bytes.Equal(w, r), "read back %d octets differ", n)
	}
	require.NoError(t, ns.Flush(testCtx(t)))
}
