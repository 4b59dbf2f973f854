package target

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/stretchr/testify/require"
)

// Write Zeroes and Deallocate on a file namespace are fallocate, as in
// Linux's nvmet: zeros in place, and a hole punched (the blocks freed).
// Both read as zeros. They wrote zeros, on the queue's goroutine: a
// gigabyte written for each discarded, and allocated what a host asked to
// free.
func TestFileZeroFallocate(t *testing.T) {
	checkRoutines(t)
	path := filepath.Join(t.TempDir(), "ns.img")
	require.NoError(t, os.WriteFile(path, nil, 0o644))
	require.NoError(t, os.Truncate(path, 8<<20)) // sparse
	fb, err := OpenFileBackend(path)
	require.NoError(t, err)
	defer fb.Close()
	_, _, addr := newBackendTarget(t, fb, Config{})
	c := connectHost(t, addr, testNQN, host.Config{IOQueues: 1})
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	allocated := func() int64 {
		require.NoError(t, fb.Flush())
		var st syscall.Stat_t
		require.NoError(t, syscall.Stat(path, &st))
		return st.Blocks * 512
	}
	data := bytes.Repeat([]byte{0x5a}, 4<<20)
	_, err = ns.WriteAt(data, 0)
	require.NoError(t, err)
	full := allocated()
	require.GreaterOrEqual(t, full, int64(4<<20))
	ctx := testCtx(t)
	require.NoError(t, ns.WriteZeroes(ctx, 2<<20, 1<<20))
	require.GreaterOrEqual(t, allocated(), full, "Write Zeroes keeps the range allocated, as nvmet's ZERO_RANGE")
	require.NoError(t, ns.Deallocate(ctx, 0, 2<<20))
	require.LessOrEqual(t, allocated(), full-(2<<20), "blocks still allocated after Deallocate (before: %d)", full)
	got := make([]byte, len(data))
	_, err = ns.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, make([]byte, 3<<20), got[:3<<20], "the zeroed 3 MiB")
	require.Equal(t, data[3<<20:], got[3<<20:], "the MiB after them")
}
