package nvmeof

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Discovery Log Page Change Notices on a discovery controller, as Linux's
// nvmet raises them: announced in OAES, enabled by Async Event
// Configuration bit 31, raised when a subsystem is added or removed or its
// access list changes, completing a held AER with type 2, information F0h,
// log page 70h, and masked until the host reads the discovery log without
// RAE.
func TestDiscoveryChangeNotice(t *testing.T) {
	checkRoutines(t)
	tg, sub, addr := newTestTarget(t, 1<<20, TargetConfig{})
	ctx := testCtx(t)
	c := connectHost(t, addr, DiscoveryNQN, HostConfig{})
	require.EqualValues(t, aecDiscChange, c.Info.OAES, "OAES announces the discovery notice only")
	q := c.admin
	postAER := func() int {
		t.Helper()
		i, err := q.acquire(ctx)
		require.NoError(t, err)
		NewAdmin(q.cmd(i), AdminAER, 0, 0, 0, 0)
		require.NoError(t, q.submit(i, 0))
		return i
	}
	noticed := func(i int, within time.Duration) bool {
		t.Helper()
		select {
		case <-q.slots[i].done:
			require.Equal(t, StatusSuccess, q.slots[i].st)
			require.EqualValues(t, 0x70f002, q.slots[i].res, "a notice: discovery log page change, log page 70h")
			q.releaseSlot(i)
			return true
		case <-time.After(within):
			return false
		}
	}
	n := 1
	add := func() *Subsystem {
		t.Helper()
		n++
		s, err := NewSubsystem(testNQN + "-" + string(rune('a'+n)))
		require.NoError(t, err)
		require.NoError(t, tg.AddSubsystem(s))
		return s
	}
	const quiet = 200 * time.Millisecond

	aer := postAER()
	add()
	require.False(t, noticed(aer, quiet), "not enabled")
	_, err := c.SetFeatures(ctx, FeatAsyncEvent, aecNSAttr)
	requireStatus(t, err, StatusInvalidField|DNR)
	_, err = c.SetFeatures(ctx, FeatAsyncEvent, aecDiscChange)
	require.NoError(t, err)
	s3 := add()
	require.True(t, noticed(aer, 5*time.Second), "a subsystem added")

	aer = postAER()
	s3.SetAllowedHosts(false, "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000ff")
	require.False(t, noticed(aer, quiet), "masked until the log is read")
	ents, err := c.DiscoveryLog(ctx)
	require.NoError(t, err)
	require.Len(t, ents, 2, "s3 is closed to this host now")
	require.NoError(t, tg.RemoveSubsystem(ctx, sub.NQN))
	require.True(t, noticed(aer, 5*time.Second), "a subsystem removed, after the read unmasked it")

	// A change with no AER held waits for the next one.
	_, err = c.DiscoveryLog(ctx)
	require.NoError(t, err)
	s3.SetAllowedHosts(true)
	require.True(t, noticed(postAER(), 5*time.Second), "its access list changed")
}

// The Go host's side (HostConfig.WatchDiscovery): WaitDiscoveryChange
// returns the discovery log as each change leaves it; an NVM controller
// cannot watch it, nor a discovery controller namespaces.
func TestHostWatchesDiscovery(t *testing.T) {
	checkRoutines(t)
	tg, sub, addr := newTestTarget(t, 1<<20, TargetConfig{})
	ctx := testCtx(t)
	const me = "nqn.2014-08.org.nvmexpress:uuid:0d0d0d0d-0000-4000-8000-00000000000d"
	c := connectHost(t, addr, DiscoveryNQN, HostConfig{HostNQN: me, WatchDiscovery: true, WatchNamespaces: true})
	_, err := c.WaitNamespaceChange(ctx)
	require.ErrorIs(t, err, ErrNoWatch)
	nqns := func(ents []DiscoveryEntry) []string {
		var s []string
		for _, e := range ents {
			s = append(s, e.SubNQN)
		}
		slices.Sort(s)
		return s
	}
	s2, err := NewSubsystem(testNQN + "-2")
	require.NoError(t, err)
	s2.AllowHost(me)
	require.NoError(t, tg.AddSubsystem(s2))
	ents, err := c.WaitDiscoveryChange(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{testNQN, testNQN + "-2"}, nqns(ents))
	require.NoError(t, tg.RemoveSubsystem(ctx, sub.NQN))
	ents, err = c.WaitDiscoveryChange(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{testNQN + "-2"}, nqns(ents))
	s2.SetAllowedHosts(false)
	ents, err = c.WaitDiscoveryChange(ctx)
	require.NoError(t, err)
	require.Empty(t, ents)

	s2.SetAllowedHosts(true)
	nvm := connectHost(t, addr, s2.NQN, HostConfig{HostNQN: "nqn.2014-08.org.nvmexpress:uuid:0e0e0e0e-0000-4000-8000-00000000000e",
		WatchDiscovery: true})
	_, err = nvm.WaitDiscoveryChange(ctx)
	require.ErrorIs(t, err, ErrNoWatch)
}

// A change right after the host's read of the discovery log was built
// (a host that reads it in one Get Log Page, RAE 0) still raises a notice:
// the read unmasks the notice before the log is built, not after, when the
// change would be in neither the log nor a notice.
func TestDiscoveryNoticeAfterRead(t *testing.T) {
	checkRoutines(t)
	// The hook is set before the target starts and reset after it has
	// stopped (cleanups run last first): the target's goroutines read it.
	var armed atomic.Bool
	var tg *Target
	x, err := NewSubsystem(testNQN + "-x")
	require.NoError(t, err)
	t.Cleanup(func() { testDiscoveryLog = nil })
	testDiscoveryLog = func(int) { // on the target's goroutine, the log built
		if armed.Swap(false) {
			if err := tg.AddSubsystem(x); err != nil {
				t.Error(err)
			}
		}
	}
	tg, _, addr := newTestTarget(t, 1<<20, TargetConfig{})
	ctx := testCtx(t)
	c := connectHost(t, addr, DiscoveryNQN, HostConfig{})
	_, err = c.SetFeatures(ctx, FeatAsyncEvent, aecDiscChange)
	require.NoError(t, err)
	q := c.admin
	postAER := func() int {
		t.Helper()
		i, err := q.acquire(ctx)
		require.NoError(t, err)
		NewAdmin(q.cmd(i), AdminAER, 0, 0, 0, 0)
		require.NoError(t, q.submit(i, 0))
		return i
	}
	noticed := func(i int, within time.Duration) bool {
		t.Helper()
		select {
		case <-q.slots[i].done:
			q.releaseSlot(i)
			return true
		case <-time.After(within):
			return false
		}
	}
	aer := postAER()
	a, err := NewSubsystem(testNQN + "-a")
	require.NoError(t, err)
	require.NoError(t, tg.AddSubsystem(a))
	require.True(t, noticed(aer, 5*time.Second), "the first change: now masked")
	aer = postAER()
	armed.Store(true)
	log := make([]byte, 16<<10)
	require.NoError(t, c.GetLogPage(ctx, LogDiscovery, 0, 0, log)) // RAE 0
	_, n, _, err := ParseDiscoveryLog(log)
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "the log as built, before x")
	require.True(t, noticed(aer, 5*time.Second), "x was added after the log was built: a notice")
}

// A discovery log longer than one transfer (MDTS 128 KiB: 127 records) is
// read in pieces, and again when it changed meanwhile; before, a host
// refused a log of more than 127 records.
func TestDiscoveryLogLong(t *testing.T) {
	checkRoutines(t)
	var reads atomic.Int32
	var tg *Target
	t.Cleanup(func() { testDiscoveryLog = nil }) // after the target stops
	testDiscoveryLog = func(n int) {
		// The second piece of the first whole read: a subsystem more.
		if n > discHeaderSize && reads.Add(1) == 2 {
			s, err := NewSubsystem("nqn.2024-01.io.goiwarp:late")
			if err == nil {
				err = tg.AddSubsystem(s)
			}
			if err != nil {
				t.Error(err)
			}
		}
	}
	tg, _, addr := newTestTarget(t, 1<<20, TargetConfig{Logf: func(string, ...any) {}})
	for i := range 299 {
		s, err := NewSubsystem(fmt.Sprintf("%s-%03d", testNQN, i))
		require.NoError(t, err)
		require.NoError(t, tg.AddSubsystem(s))
	}
	ents, err := Discover(testCtx(t), "tcp", addr, HostConfig{})
	require.NoError(t, err)
	require.Len(t, ents, 301, "300 subsystems and the one added while it was read")
	seen := map[string]bool{}
	for _, e := range ents {
		require.False(t, seen[e.SubNQN], "%s twice", e.SubNQN)
		seen[e.SubNQN] = true
	}
	require.True(t, seen["nqn.2024-01.io.goiwarp:late"])
	require.GreaterOrEqual(t, reads.Load(), int32(6), "three pieces, twice")
}

// A watch that cannot read the log (here it changes on every read) ends,
// and WaitDiscoveryChange says why instead of waiting for ever.
func TestHostWatchEndsWithError(t *testing.T) {
	checkRoutines(t)
	var tg *Target
	var armed atomic.Bool
	var added atomic.Int32
	t.Cleanup(func() { testDiscoveryLog = nil })
	testDiscoveryLog = func(int) { // every read: the next sees another generation
		if armed.Load() {
			s, err := NewSubsystem(fmt.Sprintf("%s-churn-%d", testNQN, added.Add(1)))
			if err == nil {
				err = tg.AddSubsystem(s)
			}
			if err != nil {
				t.Error(err)
			}
		}
	}
	tg, _, addr := newTestTarget(t, 1<<20, TargetConfig{Logf: func(string, ...any) {}})
	ctx := testCtx(t)
	c := connectHost(t, addr, DiscoveryNQN, HostConfig{WatchDiscovery: true})
	armed.Store(true)
	s, err := NewSubsystem(testNQN + "-first")
	require.NoError(t, err)
	require.NoError(t, tg.AddSubsystem(s))
	_, err = c.WaitDiscoveryChange(ctx)
	require.ErrorContains(t, err, "kept changing")
	_, err = c.WaitDiscoveryChange(ctx)
	require.ErrorContains(t, err, "kept changing", "and again")
}
