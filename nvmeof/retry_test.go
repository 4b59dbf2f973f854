package nvmeof

import (
	"bytes"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// failIO makes the target answer the next n I/O commands of opcode op
// with st, and counts the commands of that opcode it sees.
func failIO(t *testing.T, op uint8, n int32, st Status) *atomic.Int32 {
	t.Helper()
	var left, seen atomic.Int32
	left.Store(n)
	f := func(cmd Command) Status {
		if cmd.Opcode() != op {
			return StatusSuccess
		}
		seen.Add(1)
		if left.Add(-1) >= 0 {
			return st
		}
		return StatusSuccess
	}
	testIOStatus.Store(&f)
	t.Cleanup(func() { testIOStatus.Store(nil) })
	return &seen
}

// Statuses without DNR are retried, as Linux's host does: up to 5 times
// for each command, with its data (in the capsule, or read by the target
// again from the slot's buffer); statuses with DNR, path statuses and
// reservation commands are not.
func TestHostRetries(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	_, n := hostNS(t, 1<<20, HostConfig{IOQueues: 1})
	const interrupted = Status(0x21) // Command Interrupted: the host may retry
	small, big := bytes.Repeat([]byte{7}, 512), bytes.Repeat([]byte{9}, 64<<10)

	seen := failIO(t, IOWrite, 3, interrupted)
	_, err := n.WriteAtContext(ctx, small, 0)
	require.NoError(t, err, "three failures, retried")
	require.EqualValues(t, 4, seen.Load())
	seen = failIO(t, IOWrite, 2, interrupted)
	_, err = n.WriteAtContext(ctx, big, 4096)
	require.NoError(t, err, "a write whose data the target reads again")
	cmds := (len(big) + n.c.maxData - 1) / n.c.maxData
	require.EqualValues(t, cmds+2, seen.Load(), "%d commands, the first failing twice", cmds)
	got := make([]byte, len(big))
	_, err = n.ReadAtContext(ctx, got, 4096)
	require.NoError(t, err)
	require.Equal(t, big, got)

	seen = failIO(t, IORead, 6, interrupted)
	_, err = n.ReadAtContext(ctx, got[:512], 0)
	requireStatus(t, err, interrupted)
	require.EqualValues(t, 6, seen.Load(), "one try and five retries")
	seen = failIO(t, IORead, 1, interrupted)
	_, err = n.ReadAtContext(ctx, got[:512], 0)
	require.NoError(t, err)
	require.Equal(t, small, got[:512], "read data of the retry")

	seen = failIO(t, IOWrite, 1, StatusInternalError|DNR)
	_, err = n.WriteAtContext(ctx, small, 0)
	requireStatus(t, err, StatusInternalError|DNR)
	require.EqualValues(t, 1, seen.Load(), "DNR: not retried")
	seen = failIO(t, IOWrite, 1, StatusANAInaccessible)
	_, err = n.WriteAtContext(ctx, small, 0)
	requireStatus(t, err, StatusANAInaccessible)
	require.EqualValues(t, 1, seen.Load(), "a path status: not retried on the path")
	for _, op := range []uint8{IOFlush, IOWriteZeroes, IODSM} {
		seen = failIO(t, op, 2, interrupted)
		switch op {
		case IOFlush:
			err = n.Flush(ctx)
		case IOWriteZeroes:
			err = n.WriteZeroes(ctx, 0, 4096)
		default:
			err = n.Deallocate(ctx, 0, 4096)
		}
		require.NoError(t, err, "%s", opNames[op])
		require.EqualValues(t, 3, seen.Load(), "%s", opNames[op])
	}
}

// Reservation commands are not retried (Linux sends them as passthrough,
// which fails fast).
func TestHostNoResvRetry(t *testing.T) {
	ctx, a, _, _, _, _ := resvHosts(t)
	seen := failIO(t, IOResvRegister, 1, Status(0x21))
	requireStatus(t, a.RegisterKey(ctx, 1), Status(0x21))
	require.EqualValues(t, 1, seen.Load())
	require.NoError(t, a.RegisterKey(ctx, 1))
}
