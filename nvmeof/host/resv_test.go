package host

import (
	"encoding/binary"
	"testing"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

// A reservation's life, as a two-node cluster lives it, over TCP: keys
// registered (one registration for both of host a's controllers), a
// Write Exclusive reservation (others read, do not write), its type
// changed, the holder fenced by preemption, a release, an all-registrants
// reservation handed on when its holder leaves, a clear. Each step's
// report and each host's access are checked.
func TestReservations(t *testing.T) {
	ctx, a, a2, b, c, ids := resvHosts(t)
	require.EqualValues(t, 0xfe, a.Info.RESCAP)
	require.NotZero(t, a.c.Info.ONCS&nvme.ONCSResv)
	n2, err := a.c.Namespace(ctx, 2)
	require.NoError(t, err)
	require.Zero(t, n2.Info.RESCAP, "not enabled on namespace 2")
	_, err = n2.ReservationReport(ctx)
	requireStatus(t, err, nvme.StatusInvalidOpcode|nvme.DNR)

	require.NoError(t, a.RegisterKey(ctx, 0xa))
	require.NoError(t, a2.RegisterKey(ctx, 0xa), "the same host and key again")
	require.NoError(t, b.RegisterKey(ctx, 0xb))
	st := report(t, ctx, c)
	require.Equal(t, nvme.ResvNone, st.Type)
	require.Equal(t, 2, st.Count, "one registration a host")
	require.Equal(t, []nvme.Registrant{{CntlID: nvme.DynamicCntlID, Key: 0xa, HostID: ids[0]}, {CntlID: nvme.DynamicCntlID, Key: 0xb, HostID: ids[1]}},
		st.Registrants)
	gen := st.Gen

	require.NoError(t, a.Reserve(ctx, 0xa, nvme.ResvWriteExclusive))
	st = report(t, ctx, b)
	require.Equal(t, nvme.ResvWriteExclusive, st.Type)
	require.True(t, st.Registrants[0].Holder)
	require.False(t, st.Registrants[1].Holder)
	require.Equal(t, gen, st.Gen, "acquiring moves no generation (as nvmet)")
	require.True(t, canWrite(t, a) && canWrite(t, a2), "the holder, through either controller")
	require.False(t, canWrite(t, b), "a registrant does not write")
	requireStatus(t, b.WriteZeroes(ctx, 0, 512), nvme.StatusReservationConflict|nvme.DNR)
	requireStatus(t, b.Deallocate(ctx, 0, 512), nvme.StatusReservationConflict|nvme.DNR)
	requireStatus(t, b.Flush(ctx), nvme.StatusReservationConflict|nvme.DNR)
	require.True(t, canRead(t, b) && canRead(t, c), "others read")
	require.False(t, canWrite(t, c))
	requireStatus(t, b.Reserve(ctx, 0xb, nvme.ResvWriteExclusive), nvme.StatusReservationConflict|nvme.DNR)
	requireStatus(t, a.Reserve(ctx, 0xa, nvme.ResvExclusiveAccess), nvme.StatusReservationConflict|nvme.DNR)

	// The holder preempting itself changes only the type.
	require.NoError(t, a.Preempt(ctx, 0xa, 0, nvme.ResvExclusiveAccess, false))
	require.False(t, canRead(t, b), "Exclusive Access: no reads either")
	// b fences a: a's registration ends, b holds.
	require.NoError(t, b.Preempt(ctx, 0xb, 0xa, nvme.ResvWriteExclusiveRegsOnly, true))
	st = report(t, ctx, c)
	require.Equal(t, nvme.ResvWriteExclusiveRegsOnly, st.Type)
	require.Equal(t, []nvme.Registrant{{CntlID: nvme.DynamicCntlID, Holder: true, Key: 0xb, HostID: ids[1]}}, st.Registrants)
	require.Greater(t, st.Gen, gen)
	require.False(t, canWrite(t, a), "fenced")
	require.True(t, canRead(t, a))
	requireStatus(t, a.Release(ctx, 0xa, nvme.ResvWriteExclusiveRegsOnly), nvme.StatusReservationConflict|nvme.DNR)

	requireStatus(t, b.Release(ctx, 0xb, nvme.ResvWriteExclusive), nvme.StatusReservationConflict|nvme.DNR)
	require.NoError(t, b.Release(ctx, 0xb, nvme.ResvWriteExclusiveRegsOnly))
	require.Equal(t, nvme.ResvNone, report(t, ctx, c).Type)
	require.True(t, canWrite(t, a), "no reservation")

	// All registrants: every registrant a holder; the reservation stays
	// when the one that took it leaves.
	require.NoError(t, a.RegisterKey(ctx, 0xa2))
	require.NoError(t, a.Reserve(ctx, 0xa2, nvme.ResvExclusiveAccessAllRegs))
	st = report(t, ctx, c)
	require.True(t, st.Registrants[0].Holder && st.Registrants[1].Holder)
	require.True(t, canWrite(t, b))
	require.False(t, canRead(t, c))
	require.NoError(t, a.UnregisterKey(ctx, 0xa2))
	st = report(t, ctx, c)
	require.Equal(t, nvme.ResvExclusiveAccessAllRegs, st.Type)
	require.Equal(t, []nvme.Registrant{{CntlID: nvme.DynamicCntlID, Holder: true, Key: 0xb, HostID: ids[1]}}, st.Registrants)
	require.False(t, canWrite(t, a))

	require.NoError(t, b.ClearReservations(ctx, 0xb))
	st = report(t, ctx, c)
	require.Equal(t, nvme.ResvNone, st.Type)
	require.Zero(t, st.Count)
	require.True(t, canWrite(t, a) && canWrite(t, c))

	// Exclusive Access - Registrants Only: registrants read and write,
	// others nothing; Write Exclusive - All Registrants: registrants
	// write, others read.
	require.NoError(t, a.RegisterKey(ctx, 0xa))
	require.NoError(t, b.RegisterKey(ctx, 0xb))
	require.NoError(t, a.Reserve(ctx, 0xa, nvme.ResvExclusiveAccessRegsOnly))
	require.True(t, canWrite(t, b) && canRead(t, b))
	require.False(t, canRead(t, c) || canWrite(t, c))
	require.NoError(t, a.Release(ctx, 0xa, nvme.ResvExclusiveAccessRegsOnly))
	require.NoError(t, a.Reserve(ctx, 0xa, nvme.ResvWriteExclusiveAllRegs))
	require.True(t, canWrite(t, b) && canRead(t, c))
	require.False(t, canWrite(t, c))
}

// What the commands refuse, with nvmet's statuses.
func TestReservationErrors(t *testing.T) {
	ctx, a, _, b, c, _ := resvHosts(t)
	require.NoError(t, a.RegisterKey(ctx, 1))
	requireStatus(t, a.RegisterKey(ctx, 2), nvme.StatusReservationConflict|nvme.DNR) // registered with another key
	requireStatus(t, a.UnregisterKey(ctx, 2), nvme.StatusReservationConflict|nvme.DNR)
	requireStatus(t, a.ReplaceKey(ctx, 2, 3), nvme.StatusReservationConflict|nvme.DNR)
	require.NoError(t, a.ReplaceKey(ctx, 1, 3))
	requireStatus(t, c.Reserve(ctx, 0, nvme.ResvWriteExclusive), nvme.StatusReservationConflict|nvme.DNR) // not registered
	requireStatus(t, a.Reserve(ctx, 1, nvme.ResvWriteExclusive), nvme.StatusReservationConflict|nvme.DNR) // the old key
	requireStatus(t, a.Reserve(ctx, 3, 7), nvme.StatusInvalidField|nvme.DNR)
	require.NoError(t, b.RegisterKey(ctx, 4))
	require.NoError(t, a.Reserve(ctx, 3, nvme.ResvWriteExclusive))
	requireStatus(t, b.Preempt(ctx, 4, 0, nvme.ResvWriteExclusive, false), nvme.StatusInvalidField|nvme.DNR) // PRKEY 0 of a holder of type 1
	requireStatus(t, b.Preempt(ctx, 4, 99, nvme.ResvWriteExclusive, false), nvme.StatusReservationConflict|nvme.DNR)
	require.NoError(t, b.Release(ctx, 4, nvme.ResvWriteExclusive), "not the holder: nothing to release, no error (as nvmet)")
	require.Equal(t, nvme.ResvWriteExclusive, report(t, ctx, b).Type)

	q := a.c.io[0]
	cmd := func(op uint8, cdw10, cdw11 uint32, data int) (nvme.Status, uint64) {
		return raw(t, q, func(cm nvme.Command, buf []byte) int {
			nvme.NewAdmin(cm, op, 0, 1, cdw10, cdw11)
			if op == nvme.IOResvReport {
				cm.SGL().SetKeyed(0, 4*(cdw10+1), 0, false)
				return 0
			}
			clear(buf[:data])
			binary.LittleEndian.PutUint64(buf, 3) // CRKEY: a's key
			cm.SGL().SetInCapsule(0, uint32(data))
			return data
		})
	}
	st, _ := cmd(nvme.IOResvReport, 1023, 0, 0)
	require.Equal(t, nvme.StatusHostIDInconsistent|nvme.DNR, st, "a report without EDS: host identifiers are 128 bits")
	st, _ = cmd(nvme.IOResvReport, 14, nvme.ResvReportEDS, 0)
	require.Equal(t, nvme.StatusInvalidField|nvme.DNR, st, "shorter than the header")
	st, _ = cmd(nvme.IOResvRegister, 5, 0, 16)
	require.Equal(t, nvme.StatusInvalidOpcode|nvme.DNR, st, "RREGA 5")
	st, _ = cmd(nvme.IOResvAcquire, nvme.ResvAcquire|nvme.ResvIEKEY|1<<8, 0, 16)
	require.Equal(t, nvme.StatusInvalidField|nvme.DNR, st, "IEKEY on Acquire (as nvmet)")
	st, _ = cmd(nvme.IOResvRelease, nvme.ResvRelease|nvme.ResvIEKEY|1<<8, 0, 8)
	require.Equal(t, nvme.StatusInvalidField|nvme.DNR, st, "IEKEY on Release (as nvmet)")
	st, _ = cmd(nvme.IOResvRegister, nvme.ResvRegister, 0, 8)
	require.Equal(t, nvme.StatusSGLInvalidData|nvme.DNR, st, "8 octets are not the two keys")
	st, _ = cmd(nvme.IOResvRelease, nvme.ResvRelease|1<<8, 0, 16)
	require.Equal(t, nvme.StatusSuccess, st, "Release with 16 octets, as Linux's host sends it")
}
