package host

import (
	"bytes"
	"sync/atomic"
	"testing"

	"github.com/goiwarp/iwarp/nvmeof/internal/testhook"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// failIO makes the target answer the next n I/O commands of opcode op
// with st, and counts the commands of that opcode it sees.
func failIO(t *testing.T, op uint8, n int32, st nvme.Status) *atomic.Int32 {
	t.Helper()
	return failIOOn(t, nil, op, n, st)
}

// failIOOn is failIO for the commands that came through port p only (nil:
// any).
func failIOOn(t *testing.T, p *target.Port, op uint8, n int32, st nvme.Status) *atomic.Int32 {
	t.Helper()
	var left, seen atomic.Int32
	left.Store(n)
	f := func(port uint16, cmd nvme.Command) nvme.Status {
		if cmd.Opcode() != op || p != nil && port != p.ID() {
			return nvme.StatusSuccess
		}
		seen.Add(1)
		if left.Add(-1) >= 0 {
			return st
		}
		return nvme.StatusSuccess
	}
	testhook.IOStatus.Store(&f)
	t.Cleanup(func() { testhook.IOStatus.Store(nil) })
	return &seen
}

// Statuses without DNR are retried, as Linux's host does: up to 5 times
// for each command, with its data (in the capsule, or read by the target
// again from the slot's buffer); statuses with DNR and reservation
// commands are not.
func TestHostRetries(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	_, n := hostNS(t, 1<<20, Config{IOQueues: 1})
	const interrupted = nvme.StatusCommandInterrupted // the host may retry
	small, big := bytes.Repeat([]byte{7}, 512), bytes.Repeat([]byte{9}, 64<<10)

	seen := failIO(t, nvme.IOWrite, 3, interrupted)
	_, err := n.WriteAtContext(ctx, small, 0)
	require.NoError(t, err, "three failures, retried")
	require.EqualValues(t, 4, seen.Load())
	seen = failIO(t, nvme.IOWrite, 2, interrupted)
	_, err = n.WriteAtContext(ctx, big, 4096)
	require.NoError(t, err, "a write whose data the target reads again")
	cmds := (len(big) + n.c.maxData - 1) / n.c.maxData
	require.EqualValues(t, cmds+2, seen.Load(), "%d commands, the first failing twice", cmds)
	got := make([]byte, len(big))
	_, err = n.ReadAtContext(ctx, got, 4096)
	require.NoError(t, err)
	require.Equal(t, big, got)

	seen = failIO(t, nvme.IORead, 6, interrupted)
	_, err = n.ReadAtContext(ctx, got[:512], 0)
	requireStatus(t, err, interrupted)
	require.EqualValues(t, 6, seen.Load(), "one try and five retries")
	seen = failIO(t, nvme.IORead, 1, interrupted)
	_, err = n.ReadAtContext(ctx, got[:512], 0)
	require.NoError(t, err)
	require.Equal(t, small, got[:512], "read data of the retry")

	seen = failIO(t, nvme.IOWrite, 1, nvme.StatusInternalError|nvme.DNR)
	_, err = n.WriteAtContext(ctx, small, 0)
	requireStatus(t, err, nvme.StatusInternalError|nvme.DNR)
	require.EqualValues(t, 1, seen.Load(), "DNR: not retried")
	seen = failIO(t, nvme.IOWrite, 2, nvme.StatusANATransition)
	_, err = n.WriteAtContext(ctx, small, 0)
	require.NoError(t, err, "a path status, on a single path: retried (Multipath's paths are not)")
	require.EqualValues(t, 3, seen.Load())
	for _, op := range []uint8{nvme.IOFlush, nvme.IOWriteZeroes, nvme.IODSM} {
		seen = failIO(t, op, 2, interrupted)
		switch op {
		case nvme.IOFlush:
			err = n.Flush(ctx)
		case nvme.IOWriteZeroes:
			err = n.WriteZeroes(ctx, 0, 4096)
		default:
			err = n.Deallocate(ctx, 0, 4096)
		}
		require.NoError(t, err, "%s", nvme.IOCommandName(op))
		require.EqualValues(t, 3, seen.Load(), "%s", nvme.IOCommandName(op))
	}
}

// Reservation commands are not retried (Linux sends them as passthrough,
// which fails fast).
func TestHostNoResvRetry(t *testing.T) {
	ctx, a, _, _, _, _ := resvHosts(t)
	seen := failIO(t, nvme.IOResvRegister, 1, nvme.StatusCommandInterrupted)
	requireStatus(t, a.RegisterKey(ctx, 1), nvme.StatusCommandInterrupted)
	require.EqualValues(t, 1, seen.Load())
	require.NoError(t, a.RegisterKey(ctx, 1))
}

// Under Multipath a path status is not sent again down the same path: the
// command goes down the other one at once.
func TestMultipathNoPathRetry(t *testing.T) {
	ctx, p1, _, m, n := mpathNS(t)
	seen := failIOOn(t, p1, nvme.IOWrite, 100, nvme.StatusANAInaccessible)
	for i := range 8 {
		_, err := n.WriteAtContext(ctx, make([]byte, 4096), int64(i)*4096)
		require.NoError(t, err)
	}
	var pathErrs uint64
	for _, p := range m.Paths() {
		pathErrs += p.PathErrors
	}
	require.Equal(t, uint64(seen.Load()), pathErrs, "each refusal through port 1 was the path's one try")
	require.Positive(t, seen.Load(), "port 1 was tried")
}
