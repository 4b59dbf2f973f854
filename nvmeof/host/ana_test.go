package host

import (
	"bytes"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

// I/O through a port where the namespace's group is not accessible fails
// with the path status (no DNR, so that Linux's host retries on another
// path), and the data is untouched; the other path serves it. Each state
// gives its own status, and the namespace comes back when the state does.
func TestANAStatus(t *testing.T) {
	ctx, sub, p1, p2, a, b := anaHosts(t)
	na, err := a.Namespace(ctx, 2)
	require.NoError(t, err)
	nb, err := b.Namespace(ctx, 2)
	require.NoError(t, err)

	data := bytes.Repeat([]byte{0x5a}, 4096)
	_, err = na.WriteAt(data, 0)
	requireStatus(t, err, nvme.StatusANAInaccessible)
	_, err = na.ReadAt(make([]byte, 512), 0)
	requireStatus(t, err, nvme.StatusANAInaccessible)
	requireStatus(t, na.Flush(ctx), nvme.StatusANAInaccessible)
	requireStatus(t, na.WriteZeroes(ctx, 0, 512), nvme.StatusANAInaccessible)
	requireStatus(t, na.Deallocate(ctx, 0, 512), nvme.StatusANAInaccessible)
	got := make([]byte, 4096)
	_, err = nb.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, make([]byte, 4096), got, "nothing written through the inaccessible path")

	_, err = nb.WriteAt(data, 0)
	require.NoError(t, err)
	for _, c := range []struct {
		s  nvme.ANAState
		st nvme.Status
	}{{nvme.ANAPersistentLoss, nvme.StatusANAPersistentLoss}, {nvme.ANAChange, nvme.StatusANATransition}, {nvme.ANAInaccessible, nvme.StatusANAInaccessible}} {
		require.NoError(t, p2.SetANAState(5, c.s))
		require.Equal(t, c.s, p2.ANAState(5))
		_, err = nb.ReadAt(got, 0)
		requireStatus(t, err, c.st)
	}
	require.NoError(t, p1.SetANAState(5, nvme.ANANonOptimized))
	_, err = na.ReadAt(got, 0)
	require.NoError(t, err, "non-optimized serves I/O")
	require.Equal(t, data, got)
	// Namespace 1 stays in group 1 throughout; moved to group 5 it goes
	// where group 5 is, and Flush of every namespace (NSID FFFFFFFFh)
	// takes no path status.
	n1, err := b.Namespace(ctx, 1)
	require.NoError(t, err)
	_, err = n1.ReadAt(got, 0)
	require.NoError(t, err)
	require.NoError(t, sub.SetANAGroup(1, 5))
	_, err = n1.ReadAt(got, 0)
	requireStatus(t, err, nvme.StatusANAInaccessible)
	st, _ := raw(t, b.io[0], func(cm nvme.Command, _ []byte) int { nvme.NewAdmin(cm, nvme.IOFlush, 0, 0xffffffff, 0, 0); return 0 })
	require.Equal(t, nvme.StatusSuccess, st)
	var se *nvme.StatusError
	_, err = n1.ReadAt(got, 0)
	require.ErrorAs(t, err, &se)
	require.Zero(t, se.Status&nvme.DNR, "a path status is to be retried elsewhere")
}

// A controller reset drops the events waiting for an AER, and their masks
// with them: the next change raises a notice (it raised none until the
// host happened to read the log).
func TestANAResetUnmasks(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	_, _, p1, _ := anaTarget(t)
	a := connectHost(t, p1.Addr().String(), testNQN, Config{IOQueues: 1})
	_, err := a.SetFeatures(ctx, nvme.FeatAsyncEvent, nvme.AECANAChange)
	require.NoError(t, err)
	require.NoError(t, p1.SetANAState(1, nvme.ANANonOptimized)) // queued, masked: no AER is posted
	require.NoError(t, a.propertySet(ctx, nvme.PropCC, 0))      // a reset
	require.NoError(t, a.enable(ctx))
	post, noticed := aerProbe(t, a, nvme.AERANAChanged)
	i := post()
	require.NoError(t, p1.SetANAState(1, nvme.ANAOptimized))
	require.True(t, noticed(i, 5*time.Second), "a notice after the reset")
}
