package host

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// Reservation Register's CPTPL turns PTPL on (11b) and off (10b); 01b is
// refused, and leaves no registration. Without a reservation file CPTPL
// is not looked at (Linux's host sets it on every registration), and the
// feature cannot be turned on.
func TestReservationsCPTPL(t *testing.T) {
	checkRoutines(t)
	file := filepath.Join(t.TempDir(), "ns1.resv")
	ctx, a, b, _, _ := ptplTarget(t, file)
	register := func(n *Namespace, cdw10 uint32, key uint64) error {
		return n.resvKeys(ctx, nvme.IOResvRegister, cdw10, 0, key)
	}
	requireStatus(t, register(a, 1<<30, 0xa), nvme.StatusInvalidField|nvme.DNR)
	require.Empty(t, report(t, ctx, a).Registrants)
	require.NoError(t, register(a, nvme.ResvCPTPLSet<<30, 0xa))
	st := report(t, ctx, a)
	require.True(t, st.PTPL)
	require.Len(t, st.Registrants, 1)
	_, err := os.Stat(file)
	require.NoError(t, err, "written")
	requireStatus(t, register(b, nvme.ResvCPTPLClear<<30|nvme.ResvReplace, 0xb), nvme.StatusReservationConflict|nvme.DNR)
	require.True(t, report(t, ctx, a).PTPL, "a register that fails changes no PTPL")
	require.NoError(t, register(b, nvme.ResvCPTPLClear<<30, 0xb))
	require.False(t, report(t, ctx, a).PTPL)

	ctx, a, _, _, _ = ptplTarget(t, "")
	require.EqualValues(t, 0xfe, a.Info.RESCAP, "no PTPL without a file: the six types and IEKEY")
	require.NoError(t, register(a, nvme.ResvCPTPLSet<<30, 0xa), "CPTPL not looked at")
	require.False(t, report(t, ctx, a).PTPL)
	requireStatus(t, a.SetPersistence(ctx, true), nvme.StatusInvalidField|nvme.DNR)
	require.NoError(t, a.SetPersistence(ctx, false))
}

// A change that cannot be written to the reservation file fails with
// Internal Error and is undone: the report is as before, and no host is
// told of it.
func TestReservationsPersistFails(t *testing.T) {
	checkRoutines(t)
	dir := filepath.Join(t.TempDir(), "gone")
	require.NoError(t, os.Mkdir(dir, 0o755))
	ctx, a, b, _, _ := ptplTarget(t, filepath.Join(dir, "ns1.resv"))
	require.NoError(t, a.RegisterKey(ctx, 0xa))
	require.NoError(t, b.RegisterKey(ctx, 0xb))
	require.NoError(t, a.Reserve(ctx, 0xa, nvme.ResvWriteExclusive))
	require.NoError(t, a.SetPersistence(ctx, true))
	before := report(t, ctx, a)
	require.NoError(t, os.RemoveAll(dir))
	requireStatus(t, b.Preempt(ctx, 0xb, 0xa, nvme.ResvExclusiveAccess, false), nvme.StatusInternalError)
	require.Equal(t, before, report(t, ctx, a), "undone")
	ns, err := a.c.ReservationNotices(ctx)
	require.NoError(t, err)
	require.Empty(t, ns, "a was not told of a change that did not stand")
	requireStatus(t, a.SetPersistence(ctx, false), nvme.StatusInternalError)
	on, err := a.Persistence(ctx)
	require.NoError(t, err)
	require.True(t, on)
}

// Set Features 83h for every namespace (FFFFFFFFh): on for those with a
// reservation file, off for all; refused when none has one.
func TestReservationPersistAllNamespaces(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	_, tg, addr := serveNamespaces(t,
		target.NamespaceConfig{ID: 1, Reservations: true, ReservationFile: filepath.Join(dir, "1.resv")},
		target.NamespaceConfig{ID: 2, Reservations: true, ReservationFile: filepath.Join(dir, "2.resv")},
		target.NamespaceConfig{ID: 3, Reservations: true})
	c := connectHost(t, addr, testNQN, Config{IOQueues: 1})
	all := func(v uint32) error {
		_, err := c.admin.adminCmd(ctx, func(cmd nvme.Command) {
			nvme.NewAdmin(cmd, nvme.AdminSetFeatures, 0, 0xffffffff, nvme.FeatResvPersist, v)
		}, 0, "", nil)
		return err
	}
	persist := func() []bool {
		var on []bool
		for id := uint32(1); id <= 3; id++ {
			n, err := c.Namespace(ctx, id)
			require.NoError(t, err)
			p, err := n.Persistence(ctx)
			require.NoError(t, err)
			on = append(on, p)
		}
		return on
	}
	require.NoError(t, all(1))
	require.Equal(t, []bool{true, true, false}, persist())
	require.NoError(t, all(0))
	require.Equal(t, []bool{false, false, false}, persist())

	solo, err := target.NewSubsystem(testNQN + "-solo")
	require.NoError(t, err)
	_, err = solo.AddNamespaceConfig(target.NewMemBackend(1<<20), target.NamespaceConfig{Reservations: true})
	require.NoError(t, err)
	require.NoError(t, tg.AddSubsystem(solo))
	cs := connectHost(t, addr, solo.NQN, Config{IOQueues: 1})
	_, err = cs.admin.adminCmd(ctx, func(cmd nvme.Command) {
		nvme.NewAdmin(cmd, nvme.AdminSetFeatures, 0, 0xffffffff, nvme.FeatResvPersist, 1)
	}, 0, "", nil)
	requireStatus(t, err, nvme.StatusInvalidField|nvme.DNR)
}
