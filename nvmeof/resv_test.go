package nvmeof

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

// resvHosts serves namespace 1 with reservations and namespace 2 without,
// and connects host a twice (one host, two controllers), b and c.
func resvHosts(t *testing.T) (ctx context.Context, a, a2, b, c *HostNamespace, ids [3][16]byte) {
	t.Helper()
	return resvHostsWith(t, func(string) HostConfig { return HostConfig{IOQueues: 1} })
}

// resvHostsWith is resvHosts with the configuration cfg gives each of
// a, a2, b and c (but for its HostID).
func resvHostsWith(t *testing.T, cfg func(name string) HostConfig) (ctx context.Context, a, a2, b, c *HostNamespace, ids [3][16]byte) {
	t.Helper()
	checkRoutines(t)
	ctx = testCtx(t)
	_, _, addr := serveNamespaces(t, NamespaceConfig{Reservations: true}, NamespaceConfig{})
	open := func(name string, id [16]byte) *HostNamespace {
		cfg := cfg(name)
		cfg.HostID = id
		c := connectHost(t, addr, testNQN, cfg)
		n, err := c.Namespace(ctx, 1)
		require.NoError(t, err)
		return n
	}
	ids = [3][16]byte{{0xaa, 1}, {0xbb, 2}, {0xcc, 3}}
	return ctx, open("a", ids[0]), open("a2", ids[0]), open("b", ids[1]), open("c", ids[2]), ids
}

// canWrite and canRead report whether n may write and read, and fail on
// any other error than a reservation conflict.
func canWrite(t *testing.T, n *HostNamespace) bool {
	t.Helper()
	_, err := n.WriteAt(make([]byte, 512), 0)
	return resvOK(t, err)
}

func canRead(t *testing.T, n *HostNamespace) bool {
	t.Helper()
	_, err := n.ReadAt(make([]byte, 512), 0)
	return resvOK(t, err)
}

func resvOK(t *testing.T, err error) bool {
	t.Helper()
	if err == nil {
		return true
	}
	requireStatus(t, err, nvme.StatusReservationConflict|nvme.DNR)
	return false
}

func report(t *testing.T, ctx context.Context, n *HostNamespace) nvme.ReservationStatus {
	t.Helper()
	st, err := n.ReservationReport(ctx)
	require.NoError(t, err)
	return st
}

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

// A fence waits for the I/O the old reservation admitted: Preempt and
// Abort of the holder returns only once the holder's write stuck in the
// backend is done, and a write planned before a fence but run after it is
// refused (its data had moved; the check is made again as it runs).
func TestPreemptAbortWaitsForInFlight(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	sub, err := NewSubsystem(testNQN)
	require.NoError(t, err)
	g := newGateWrite()
	released := false
	release := func() {
		if !released {
			released = true
			close(g.release)
		}
	}
	_, err = sub.AddNamespaceConfig(g, NamespaceConfig{Reservations: true})
	require.NoError(t, err)
	tg, err := NewTarget(TargetConfig{Logf: t.Logf}, sub)
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	t.Cleanup(release) // before the target's Close, which waits for the write
	addr, err := tg.Listen(ctx, "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	open := func(id byte) *HostNamespace {
		c := connectHost(t, addr.String(), testNQN, HostConfig{IOQueues: 1, HostID: [16]byte{id}})
		n, err := c.Namespace(ctx, 1)
		require.NoError(t, err)
		return n
	}
	a, b := open(0xa), open(0xb)
	require.NoError(t, a.RegisterKey(ctx, 0xa))
	require.NoError(t, b.RegisterKey(ctx, 0xb))
	require.NoError(t, a.Reserve(ctx, 0xa, nvme.ResvWriteExclusiveRegsOnly))
	wrote := make(chan error, 1)
	g.arm()
	go func() { _, err := a.WriteAt(make([]byte, 512), 0); wrote <- err }()
	<-g.entered
	fenced := make(chan error, 1)
	go func() { fenced <- b.Preempt(ctx, 0xb, 0xa, nvme.ResvWriteExclusiveRegsOnly, true) }()
	select {
	case err := <-fenced:
		t.Fatalf("the fence completed (%v) while the victim's write ran", err)
	case <-time.After(200 * time.Millisecond):
	}
	release()
	require.NoError(t, <-wrote, "admitted before the fence")
	require.NoError(t, <-fenced)
	require.False(t, canWrite(t, a), "fenced")

	// Planned before a change (a registrant may write under type 3), run
	// after it (not under type 1).
	require.NoError(t, a.RegisterKey(ctx, 0xa))
	c := &controller{t: tg, sub: sub, hostID: [16]byte{0xa}}
	cmd := make(nvme.Command, nvme.CommandSize)
	nvme.NewRW(cmd, nvme.IOWrite, 1, 1, 0, 0)
	_, need, st, planned := c.planIO(cmd, &Port{})
	require.True(t, st.OK(), "%v", st)
	require.NoError(t, b.Preempt(ctx, 0xb, 0, nvme.ResvWriteExclusive, true)) // the holder: Write Exclusive now
	_, st, _ = c.execIO(&request{cmd: cmd, in: make([]byte, need), ns: planned})
	require.Equal(t, nvme.StatusReservationConflict|nvme.DNR, st, "checked again as it runs")
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

// Any registrants, reported into any length: the report parses back to
// them, as many as fit, and counts them all.
func FuzzReservationStatus(f *testing.F) {
	f.Add(uint8(3), uint16(200), uint8(1))
	f.Add(uint8(0), uint16(64), uint8(0))
	f.Add(uint8(70), uint16(4096), uint8(6))
	f.Fuzz(func(t *testing.T, n uint8, size uint16, rtype uint8) {
		r := newResv(nil)
		for i := range int(n) {
			h := [16]byte{byte(i), byte(i >> 8), 0xee}
			r.keys[h] = uint64(i)*0x101 + 1
			r.order = append(r.order, h)
		}
		if n > 0 && rtype >= 1 && rtype <= 6 {
			r.holder, r.rtype = r.order[0], nvme.ReservationType(rtype)
		}
		out := make([]byte, size)
		if st := r.report(nvme.ResvReportEDS, out); !st.OK() {
			require.Less(t, int(size), nvme.ResvStatusEntrySize)
			return
		}
		st, err := nvme.ParseReservationStatus(out)
		require.NoError(t, err)
		require.Equal(t, int(n), st.Count)
		require.Equal(t, min(int(n), (int(size)-nvme.ResvStatusEntrySize)/nvme.ResvStatusEntrySize), len(st.Registrants))
		for i, rg := range st.Registrants {
			require.Equal(t, r.keys[r.order[i]], rg.Key)
			require.Equal(t, r.order[i], rg.HostID)
			require.Equal(t, r.holds(r.order[i]), rg.Holder)
		}
	})
}
