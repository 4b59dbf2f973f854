package target

import (
	"context"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

// anaTarget serves one subsystem with namespace 1 (group 1) and namespace
// 2 (group 5) on two ports: port 1 with nvmet's defaults (group 1
// optimized, group 5 inaccessible), port 2 with group 1 non-optimized and
// group 5 optimized.
func anaTarget(t *testing.T) (tg *Target, sub *Subsystem, p1, p2 *Port) {
	t.Helper()
	sub, err := NewSubsystem(testNQN)
	require.NoError(t, err)
	_, err = sub.AddNamespace(NewMemBackend(1<<20), 512)
	require.NoError(t, err)
	_, err = sub.AddNamespaceConfig(NewMemBackend(1<<20), NamespaceConfig{ANAGroup: 5})
	require.NoError(t, err)
	tg, err = New(Config{Logf: t.Logf}, sub)
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	p1, err = tg.ListenPort(context.Background(), "tcp", "127.0.0.1:0", PortConfig{Subsystems: []string{sub.NQN}})
	require.NoError(t, err)
	p2, err = tg.ListenPort(context.Background(), "tcp", "127.0.0.1:0", PortConfig{Subsystems: []string{sub.NQN},
		ANA: map[uint32]nvme.ANAState{1: nvme.ANANonOptimized, 5: nvme.ANAOptimized}})
	require.NoError(t, err)
	return tg, sub, p1, p2
}

// anaHosts connects a host (one I/O queue) through each of anaTarget's
// ports.
func anaHosts(t *testing.T) (context.Context, *Subsystem, *Port, *Port, *host.Controller, *host.Controller) {
	t.Helper()
	checkRoutines(t)
	ctx := testCtx(t)
	_, sub, p1, p2 := anaTarget(t)
	a := connectHost(t, p1.Addr().String(), testNQN, host.Config{IOQueues: 1})
	b := connectHost(t, p2.Addr().String(), testNQN, host.Config{IOQueues: 1})
	return ctx, sub, p1, p2, a, b
}

// Each path's ANA log gives each group's state through its own port, with
// the group's namespaces in ascending order; Identify Namespace gives the
// group, and no space in use where the group is inaccessible (as nvmet).
func TestANALog(t *testing.T) {
	ctx, _, _, _, a, b := anaHosts(t)

	la, err := a.ANALog(ctx)
	require.NoError(t, err)
	require.Len(t, la.Groups, 2)
	require.Equal(t, nvme.ANAGroupDesc{ID: 1, State: nvme.ANAOptimized, NSIDs: []uint32{1}}, la.Groups[0])
	require.Equal(t, nvme.ANAGroupDesc{ID: 5, State: nvme.ANAInaccessible, NSIDs: []uint32{2}}, la.Groups[1])
	lb, err := b.ANALog(ctx)
	require.NoError(t, err)
	require.Equal(t, nvme.ANANonOptimized, lb.Groups[0].State)
	require.Equal(t, nvme.ANAOptimized, lb.Groups[1].State)

	buf := make([]byte, nvme.IdentifySize)
	require.NoError(t, a.Identify(ctx, nvme.CNSNamespace, 2, buf))
	ni, err := nvme.ParseNamespaceInfo(buf)
	require.NoError(t, err)
	require.EqualValues(t, 5, ni.ANAGroup)
	require.EqualValues(t, 2048, ni.Size, "the size stays, as nvmet's")
	require.Zero(t, ni.Utilization, "inaccessible through port 1")
	require.NoError(t, b.Identify(ctx, nvme.CNSNamespace, 2, buf))
	ni, err = nvme.ParseNamespaceInfo(buf)
	require.NoError(t, err)
	require.EqualValues(t, 2048, ni.Utilization)

	// The page is as long as Identify says (16 + 128 × 32 + 1024 × 4
	// octets), zeros past the groups: nvme-cli reads it in 4 KiB pieces,
	// and refused every piece after the first.
	piece := make([]byte, 4096)
	require.NoError(t, a.GetLogPage(ctx, nvme.LogANA, 0xffffffff, 4096, piece))
	require.Equal(t, make([]byte, 4096), piece)
	require.NoError(t, a.GetLogPage(ctx, nvme.LogANA, 0xffffffff, 8192, piece[:16]))
	requireStatus(t, a.GetLogPage(ctx, nvme.LogANA, 0xffffffff, 8212, piece[:4]), nvme.StatusInvalidField|nvme.DNR)
}

// Return Groups Only leaves the NSIDs out; checked on the log as built.
func TestANALogGroupsOnly(t *testing.T) {
	checkRoutines(t)
	tg, _, p1, _ := anaTarget(t)
	a := connectHost(t, p1.Addr().String(), testNQN, host.Config{})
	c := tg.controller(a.ID)
	require.NotNil(t, c)
	l, err := nvme.ParseANALog(c.anaLog(true, true), nvme.MaxANAGroup)
	require.NoError(t, err)
	require.Len(t, l.Groups, 2)
	for _, g := range l.Groups {
		require.Empty(t, g.NSIDs, "group %d", g.ID)
	}
}

// A state changed raises an ANA Change notice on the controllers through
// that port only; the next is held back until the host reads the log, as
// nvmet does; a namespace moved to another group tells every path.
func TestANAChange(t *testing.T) {
	ctx, sub, p1, _, a, b := anaHosts(t)
	for _, c := range []*host.Controller{a, b} {
		v, err := c.SetFeatures(ctx, nvme.FeatAsyncEvent, nvme.AECANAChange)
		require.NoError(t, err)
		require.EqualValues(t, nvme.AECANAChange, v)
	}
	postA, noticedA := aerProbe(t, a, nvme.AERANAChanged)
	postB, noticedB := aerProbe(t, b, nvme.AERANAChanged)
	ia, ib := postA(), postB()
	require.False(t, noticedA(ia, 100*time.Millisecond), "no change yet")

	require.NoError(t, p1.SetANAState(1, nvme.ANAInaccessible))
	require.True(t, noticedA(ia, 5*time.Second), "the notice through port 1")
	require.False(t, noticedB(ib, 200*time.Millisecond), "none through port 2")
	// The same state again: no notice, no count (a's log read first, so
	// that its notice is unmasked and a spurious one would come).
	before, err := a.ANALog(ctx)
	require.NoError(t, err)
	ia = postA()
	require.NoError(t, p1.SetANAState(1, nvme.ANAInaccessible), "the same state again")
	require.False(t, noticedA(ia, 200*time.Millisecond), "no notice for the same state")
	after, err := a.ANALog(ctx)
	require.NoError(t, err)
	require.Equal(t, before.ChangeCount, after.ChangeCount, "no change, no count")

	// A change: the notice (a's AER is still outstanding); the next is
	// masked until the log is read, and unmasked by the read.
	require.NoError(t, p1.SetANAState(1, nvme.ANAOptimized))
	require.True(t, noticedA(ia, 5*time.Second))
	ia = postA()
	require.NoError(t, p1.SetANAState(1, nvme.ANANonOptimized))
	require.False(t, noticedA(ia, 200*time.Millisecond), "masked until the log is read")
	l, err := a.ANALog(ctx)
	require.NoError(t, err)
	require.Equal(t, nvme.ANANonOptimized, l.Groups[0].State)
	chg := l.ChangeCount
	require.NoError(t, p1.SetANAState(1, nvme.ANAOptimized))
	require.True(t, noticedA(ia, 5*time.Second), "unmasked by the read")
	l, err = a.ANALog(ctx)
	require.NoError(t, err)
	require.Greater(t, l.ChangeCount, chg, "CHGCNT moves with each change")

	ia = postA()
	require.NoError(t, sub.SetANAGroup(2, 1))
	require.True(t, noticedA(ia, 5*time.Second), "a group change reaches every path")
	require.True(t, noticedB(ib, 5*time.Second))
	l, err = b.ANALog(ctx)
	require.NoError(t, err)
	require.Equal(t, []uint32{1, 2}, l.Groups[0].NSIDs)
	require.Len(t, l.Groups, 1, "group 5 has no namespace left")
}

// What a port and a namespace take, checked; a discovery controller has no
// ANA log.
func TestANAConfigChecks(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	tg, sub, p1, _ := anaTarget(t)
	_, err := sub.AddNamespaceConfig(NewMemBackend(1<<20), NamespaceConfig{ANAGroup: nvme.MaxANAGroup + 1})
	require.ErrorContains(t, err, "ANA group 129")
	_, err = tg.ListenPort(ctx, "tcp", "127.0.0.1:0", PortConfig{ANA: map[uint32]nvme.ANAState{0: nvme.ANAOptimized}})
	require.ErrorContains(t, err, "ANA group 0")
	_, err = tg.ListenPort(ctx, "tcp", "127.0.0.1:0", PortConfig{ANA: map[uint32]nvme.ANAState{2: 7}})
	require.Error(t, err)
	require.Error(t, p1.SetANAState(1, 0))
	require.Error(t, p1.SetANAState(nvme.MaxANAGroup+1, nvme.ANAOptimized))
	require.Error(t, sub.SetANAGroup(9, 1), "no namespace 9")
	require.Error(t, sub.SetANAGroup(1, 0))
	for _, s := range []nvme.ANAState{nvme.ANAOptimized, nvme.ANANonOptimized, nvme.ANAInaccessible, nvme.ANAPersistentLoss, nvme.ANAChange} {
		back, err := nvme.ParseANAState(s.String())
		require.NoError(t, err)
		require.Equal(t, s, back)
	}
	_, err = nvme.ParseANAState("offline")
	require.Error(t, err)

	d := connectHost(t, p1.Addr().String(), nvme.DiscoveryNQN, host.Config{})
	_, err = d.ANALog(ctx)
	require.ErrorIs(t, err, host.ErrNoANA)
	err = d.GetLogPage(ctx, nvme.LogANA, 0, 0, make([]byte, 64))
	requireStatus(t, err, nvme.StatusInvalidLogPage|nvme.DNR)
}

func FuzzANALog(f *testing.F) {
	c := &controller{t: &Target{}, sub: &Subsystem{}, admin: &queue{port: &Port{}}}
	f.Add(c.anaLog(false, true))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := nvme.ParseANALog(b, nvme.MaxANAGroup)
		if err != nil {
			return
		}
		for _, g := range l.Groups {
			require.True(t, g.ID >= 1 && g.ID <= nvme.MaxANAGroup, "group %d", g.ID)
			require.True(t, g.State.Valid(), "%v", g.State)
		}
	})
}

// A target whose transfers cannot carry the whole ANA log (MaxTransfer 8
// KiB: the log Linux's host sizes is 8 208 octets) does not report ANA,
// as Linux's host would give it up: no CMIC bit, no log, no notices, and
// the ports' states do not refuse I/O.
func TestANANotReportedOnSmallMDTS(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	sub, err := NewSubsystem(testNQN)
	require.NoError(t, err)
	_, err = sub.AddNamespaceConfig(NewMemBackend(1<<20), NamespaceConfig{ANAGroup: 5})
	require.NoError(t, err)
	tg, err := New(Config{MaxTransfer: 8192, Logf: t.Logf}, sub)
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	p, err := tg.ListenPort(ctx, "tcp", "127.0.0.1:0", PortConfig{Subsystems: []string{sub.NQN}})
	require.NoError(t, err)
	c := connectHost(t, p.Addr().String(), testNQN, host.Config{IOQueues: 1, WatchANA: true})
	require.Zero(t, c.Info.CMIC&nvme.CMICANA)
	require.Zero(t, c.Info.OAES&nvme.AECANAChange)
	_, err = c.ANALog(ctx)
	require.ErrorIs(t, err, host.ErrNoANA)
	requireStatus(t, c.GetLogPage(ctx, nvme.LogANA, 0xffffffff, 0, make([]byte, 4096)), nvme.StatusInvalidLogPage|nvme.DNR)
	_, err = c.SetFeatures(ctx, nvme.FeatAsyncEvent, nvme.AECANAChange)
	requireStatus(t, err, nvme.StatusInvalidField|nvme.DNR)
	n, err := c.Namespace(ctx, 1)
	require.NoError(t, err)
	require.Zero(t, n.Info.ANAGroup)
	_, err = n.WriteAt(make([]byte, 4096), 0)
	require.NoError(t, err, "group 5, inaccessible by default, refuses nothing where ANA is not reported")
}
