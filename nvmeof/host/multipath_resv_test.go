package host

import (
	"context"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// A Multipath watching reservation notifications learns it was fenced
// from each path (each path's controller records its own page), and
// from the path that is left when one is taken out; without the watch,
// and after Close, WaitReservationNotice says so.
func TestMultipathReservationNotices(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	sub, tg, _ := serveNamespaces(t, target.NamespaceConfig{Reservations: true})
	_, addrs := listenPorts(t, tg, sub, 2)
	m := connectMultipathCfg(t, MultipathConfig{Config: Config{IOQueues: 1, WatchReservations: true}}, addrs...)
	n, err := m.Namespace(ctx, 1)
	require.NoError(t, err)
	other := connectHost(t, addrs[0], testNQN, Config{IOQueues: 1, HostID: [16]byte{0xbb}})
	b, err := other.Namespace(ctx, 1)
	require.NoError(t, err)
	const ka, kb = 0xa, 0xb
	wait := func(want int) []PathNotice {
		t.Helper()
		var got []PathNotice
		for len(got) < want {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			ns, err := m.WaitReservationNotice(wctx)
			cancel()
			require.NoError(t, err, "got %v", got)
			got = append(got, ns...)
		}
		require.Len(t, got, want, "%v", got)
		return got
	}

	require.NoError(t, n.RegisterKey(ctx, ka))
	require.NoError(t, n.Reserve(ctx, ka, nvme.ResvWriteExclusiveRegsOnly))
	require.NoError(t, b.RegisterKey(ctx, kb))
	require.NoError(t, b.Preempt(ctx, kb, ka, nvme.ResvWriteExclusiveRegsOnly, true))
	got := wait(2)
	seen := map[string]bool{}
	for _, pn := range got {
		require.Equal(t, nvme.ResvNoticeRegPreempted, pn.Type)
		require.EqualValues(t, 1, pn.NSID)
		require.EqualValues(t, 1, pn.Count, "each path's first page")
		seen[pn.Addr] = true
	}
	require.Len(t, seen, 2, "a page from each path: %v", got)
	_, err = n.WriteAt(make([]byte, 512), 0)
	requireStatus(t, err, nvme.StatusReservationConflict|nvme.DNR)

	// One path taken out: the other still tells.
	m.mu.Lock()
	c0 := m.paths[0].c
	m.mu.Unlock()
	m.fail(m.paths[0], c0, context.Canceled)
	require.NoError(t, n.RegisterKey(ctx, ka))
	require.NoError(t, b.Release(ctx, kb, nvme.ResvWriteExclusiveRegsOnly))
	got = wait(1)
	require.Equal(t, addrs[1], got[0].Addr)
	require.Equal(t, nvme.ResvNoticeReleased, got[0].Type)

	require.NoError(t, m.Close())
	_, err = m.WaitReservationNotice(ctx)
	require.ErrorIs(t, err, ErrClosed)

	plain := connectMultipath(t, addrs...)
	_, err = plain.WaitReservationNotice(ctx)
	require.ErrorIs(t, err, ErrNoWatch)
}
