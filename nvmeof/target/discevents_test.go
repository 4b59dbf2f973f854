package target

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/verbs"
)

// Discovery Log Page Change Notices on a discovery controller, as Linux's
// nvmet raises them: announced in OAES, enabled by Async Event
// Configuration bit 31, raised when a subsystem is added or removed or its
// access list changes, completing a held AER with type 2, information F0h,
// log page 70h, and masked until the host reads the discovery log without
// RAE.
func TestDiscoveryChangeNotice(t *testing.T) {
	checkRoutines(t)
	tg, sub, addr := newTestTarget(t, 1<<20, Config{})
	ctx := testCtx(t)
	c := connectHost(t, addr, nvme.DiscoveryNQN, host.Config{})
	require.EqualValues(t, nvme.AECDiscChange, c.Info.OAES, "OAES announces the discovery notice only")
	postAER, noticed := aerProbe(t, c, 0x70f002) // a notice: discovery log page change, log page 70h
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
	_, err := c.SetFeatures(ctx, nvme.FeatAsyncEvent, nvme.AECNSAttr)
	requireStatus(t, err, nvme.StatusInvalidField|nvme.DNR)
	_, err = c.SetFeatures(ctx, nvme.FeatAsyncEvent, nvme.AECDiscChange)
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

// The Go host's side (host.Config.WatchDiscovery): WaitDiscoveryChange
// returns the discovery log as each change leaves it; an NVM controller
// cannot watch it, nor a discovery controller namespaces.
func TestHostWatchesDiscovery(t *testing.T) {
	checkRoutines(t)
	tg, sub, addr := newTestTarget(t, 1<<20, Config{})
	ctx := testCtx(t)
	const me = "nqn.2014-08.org.nvmexpress:uuid:0d0d0d0d-0000-4000-8000-00000000000d"
	c := connectHost(t, addr, nvme.DiscoveryNQN, host.Config{HostNQN: me, WatchDiscovery: true, WatchNamespaces: true})
	_, err := c.WaitNamespaceChange(ctx)
	require.ErrorIs(t, err, host.ErrNoWatch)
	nqns := func(ents []nvme.DiscoveryEntry) []string {
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
	nvm := connectHost(t, addr, s2.NQN, host.Config{HostNQN: "nqn.2014-08.org.nvmexpress:uuid:0e0e0e0e-0000-4000-8000-00000000000e",
		WatchDiscovery: true})
	_, err = nvm.WaitDiscoveryChange(ctx)
	require.ErrorIs(t, err, host.ErrNoWatch)
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
	tg, _, addr := newTestTarget(t, 1<<20, Config{})
	ctx := testCtx(t)
	c := connectHost(t, addr, nvme.DiscoveryNQN, host.Config{})
	_, err = c.SetFeatures(ctx, nvme.FeatAsyncEvent, nvme.AECDiscChange)
	require.NoError(t, err)
	postAER, noticed := aerProbe(t, c, 0x70f002)
	aer := postAER()
	a, err := NewSubsystem(testNQN + "-a")
	require.NoError(t, err)
	require.NoError(t, tg.AddSubsystem(a))
	require.True(t, noticed(aer, 5*time.Second), "the first change: now masked")
	aer = postAER()
	armed.Store(true)
	log := make([]byte, 16<<10)
	require.NoError(t, c.GetLogPage(ctx, nvme.LogDiscovery, 0, 0, log)) // RAE 0
	_, n, _, err := nvme.ParseDiscoveryLog(log)
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
		if n > nvme.DiscHeaderSize && reads.Add(1) == 2 {
			s, err := NewSubsystem("nqn.2024-01.io.goiwarp:late")
			if err == nil {
				err = tg.AddSubsystem(s)
			}
			if err != nil {
				t.Error(err)
			}
		}
	}
	tg, _, addr := newTestTarget(t, 1<<20, Config{Logf: func(string, ...any) {}})
	for i := range 299 {
		s, err := NewSubsystem(fmt.Sprintf("%s-%03d", testNQN, i))
		require.NoError(t, err)
		require.NoError(t, tg.AddSubsystem(s))
	}
	ents, err := host.Discover(testCtx(t), "tcp", addr, host.Config{})
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
	tg, _, addr := newTestTarget(t, 1<<20, Config{Logf: func(string, ...any) {}})
	ctx := testCtx(t)
	c := connectHost(t, addr, nvme.DiscoveryNQN, host.Config{WatchDiscovery: true})
	armed.Store(true)
	s, err := NewSubsystem(testNQN + "-first")
	require.NoError(t, err)
	require.NoError(t, tg.AddSubsystem(s))
	_, err = c.WaitDiscoveryChange(ctx)
	require.ErrorContains(t, err, "kept changing")
	_, err = c.WaitDiscoveryChange(ctx)
	require.ErrorContains(t, err, "kept changing", "and again")
}

// A target whose MDTS is below one discovery log: the host reads it in
// pieces of the target's MDTS (8 KiB here), where it asked for the whole
// log in one transfer and was refused.
func TestDiscoveryLogSmallMDTS(t *testing.T) {
	checkRoutines(t)
	tg, _, addr := newTestTarget(t, 1<<20, Config{MaxTransfer: 8192, Logf: func(string, ...any) {}})
	for i := range 9 {
		s, err := NewSubsystem(fmt.Sprintf("%s-%03d", testNQN, i))
		require.NoError(t, err)
		require.NoError(t, tg.AddSubsystem(s))
	}
	ents, err := host.Discover(testCtx(t), "tcp", addr, host.Config{})
	require.NoError(t, err)
	require.Len(t, ents, 10)
}

// A log that shrinks between two pieces (a later piece's offset now past
// its end, which the target refuses) is read again, for a Discover and for
// a watch, which used to end on the refusal.
func TestDiscoveryLogShrinks(t *testing.T) {
	checkRoutines(t)
	var reads atomic.Int32
	var armed atomic.Bool
	var tg *Target
	t.Cleanup(func() { testDiscoveryLog = nil })
	testDiscoveryLog = func(n int) {
		if armed.Load() && n > nvme.DiscHeaderSize && reads.Add(1) == 2 { // after the first piece
			for i := range 250 {
				if err := tg.RemoveSubsystem(context.Background(), fmt.Sprintf("%s-%03d", testNQN, i)); err != nil {
					t.Error(err)
				}
			}
		}
	}
	tg, _, addr := newTestTarget(t, 1<<20, Config{Logf: func(string, ...any) {}})
	add := func(from, to int) {
		for i := from; i < to; i++ {
			s, err := NewSubsystem(fmt.Sprintf("%s-%03d", testNQN, i))
			require.NoError(t, err)
			require.NoError(t, tg.AddSubsystem(s))
		}
	}
	add(0, 299)
	armed.Store(true)
	ents, err := host.Discover(testCtx(t), "tcp", addr, host.Config{})
	require.NoError(t, err)
	require.Len(t, ents, 50, "the log as it is after the removals")

	add(0, 250)
	c := connectHost(t, addr, nvme.DiscoveryNQN, host.Config{WatchDiscovery: true})
	reads.Store(0)
	s, err := NewSubsystem(testNQN + "-new")
	require.NoError(t, err)
	require.NoError(t, tg.AddSubsystem(s))
	ents, err = c.WaitDiscoveryChange(testCtx(t))
	require.NoError(t, err, "the watch reads it again")
	require.Len(t, ents, 51)
}

// A change a log read in pieces overlaps moves the generation counter at
// once with the change, so that the host sees it changed and reads it
// again: here an unlink whose logging is slow, the log read between the
// change and the notice (the counter used to move only with the notice,
// and the host took a log half before and half after).
func TestDiscoveryLogNotTorn(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	release := make(chan struct{})
	mutated := make(chan struct{})
	var once sync.Once
	logf := func(format string, args ...any) {
		if strings.Contains(fmt.Sprintf(format, args...), "unlinked from port") {
			once.Do(func() { close(mutated) })
			<-release // a slow logger: SetSubsystems has not sent its notices yet
		}
	}
	var pieces atomic.Int32
	var p *Port
	var nqns []string
	var late *Subsystem
	setDone := make(chan error, 1)
	t.Cleanup(func() { testDiscoveryLog = nil })
	testDiscoveryLog = func(n int) {
		if n > nvme.DiscHeaderSize && pieces.Add(1) == 1 { // after the first piece
			go func() { setDone <- p.SetSubsystems(append(slices.Clone(nqns[1:]), late.NQN)...) }()
			<-mutated
		}
	}
	tg, err := New(Config{Logf: logf})
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	for i := range 200 {
		s, err := NewSubsystem(fmt.Sprintf("%s-%03d", testNQN, i))
		require.NoError(t, err)
		require.NoError(t, tg.AddSubsystem(s))
		nqns = append(nqns, s.NQN)
	}
	late, err = NewSubsystem(testNQN + "-zzz")
	require.NoError(t, err)
	require.NoError(t, tg.AddSubsystem(late))
	p, err = tg.ListenPort(ctx, "tcp", "127.0.0.1:0", PortConfig{Subsystems: nqns})
	require.NoError(t, err)
	connectHost(t, p.Addr().String(), nqns[0], host.Config{}) // the unlink drops it, and logs
	ents, err := host.Discover(ctx, "tcp", p.Addr().String(), host.Config{})
	close(release)
	require.NoError(t, <-setDone)
	require.NoError(t, err)
	got := map[string]bool{}
	for _, e := range ents {
		got[e.SubNQN] = true
	}
	require.Len(t, ents, 200)
	require.False(t, got[nqns[0]], "the unlinked subsystem")
	require.True(t, got[nqns[127]], "a subsystem linked all along")
	require.True(t, got[late.NQN], "the one linked instead")
}

// A target that closed no longer counts as serving its subsystems: the
// other target's RemoveSubsystem is the last, and takes the namespaces.
func TestRemoveSubsystemAfterOtherTargetClosed(t *testing.T) {
	checkRoutines(t)
	sub, err := NewSubsystem(testNQN)
	require.NoError(t, err)
	_, err = sub.AddNamespace(NewMemBackend(1<<20), 512)
	require.NoError(t, err)
	a, err := New(Config{Logf: func(string, ...any) {}}, sub)
	require.NoError(t, err)
	defer a.Close()
	b, err := New(Config{Logf: func(string, ...any) {}}, sub)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.ErrorIs(t, b.AddSubsystem(sub), verbs.ErrClosed)
	require.NoError(t, a.RemoveSubsystem(testCtx(t), testNQN))
	require.Empty(t, sub.Namespaces())
}
