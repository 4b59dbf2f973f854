package target

import (
	"context"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

// resvHosts serves namespace 1 with reservations and namespace 2 without,
// and connects host a twice (one host, two controllers), b and c.
func resvHosts(t *testing.T) (ctx context.Context, a, a2, b, c *host.Namespace, ids [3][16]byte) {
	t.Helper()
	return resvHostsWith(t, func(string) host.Config { return host.Config{IOQueues: 1} })
}

// resvHostsWith is resvHosts with the configuration cfg gives each of
// a, a2, b and c (but for its HostID).
func resvHostsWith(t *testing.T, cfg func(name string) host.Config) (ctx context.Context, a, a2, b, c *host.Namespace, ids [3][16]byte) {
	t.Helper()
	checkRoutines(t)
	ctx = testCtx(t)
	_, _, addr := serveNamespaces(t, NamespaceConfig{Reservations: true}, NamespaceConfig{})
	open := func(name string, id [16]byte) *host.Namespace {
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
func canWrite(t *testing.T, n *host.Namespace) bool {
	t.Helper()
	_, err := n.WriteAt(make([]byte, 512), 0)
	return resvOK(t, err)
}

func canRead(t *testing.T, n *host.Namespace) bool {
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

func report(t *testing.T, ctx context.Context, n *host.Namespace) nvme.ReservationStatus {
	t.Helper()
	st, err := n.ReservationReport(ctx)
	require.NoError(t, err)
	return st
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
	tg, err := New(Config{Logf: t.Logf}, sub)
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	t.Cleanup(release) // before the target's Close, which waits for the write
	addr, err := tg.Listen(ctx, "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	open := func(id byte) *host.Namespace {
		c := connectHost(t, addr.String(), testNQN, host.Config{IOQueues: 1, HostID: [16]byte{id}})
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
	r := request{cmd: cmd}
	st := c.parseIO(&r, &Port{})
	require.True(t, st.OK(), "%v", st)
	require.NoError(t, b.Preempt(ctx, 0xb, 0, nvme.ResvWriteExclusive, true)) // the holder: Write Exclusive now
	r.in = make([]byte, r.need)
	_, st = execIO(&queue{ctrl: c}, &r)
	require.Equal(t, nvme.StatusReservationConflict|nvme.DNR, st, "checked again as it runs")
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
