package host

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// mpathNS connects a Multipath to anaTarget's two ports and opens
// namespace 1 (group 1: optimized through p1, non-optimized through p2).
func mpathNS(t *testing.T) (context.Context, *target.Port, *target.Port, *Multipath, *MultipathNamespace) {
	t.Helper()
	checkRoutines(t)
	ctx := testCtx(t)
	_, _, p1, p2 := anaTarget(t)
	m := connectMultipath(t, p1.Addr().String(), p2.Addr().String())
	n, err := m.Namespace(ctx, 1)
	require.NoError(t, err)
	return ctx, p1, p2, m, n
}

func connectMultipath(t *testing.T, addrs ...string) *Multipath {
	t.Helper()
	return connectMultipathCfg(t, MultipathConfig{Config: Config{IOQueues: 1}}, addrs...)
}

func connectMultipathCfg(t *testing.T, cfg MultipathConfig, addrs ...string) *Multipath {
	t.Helper()
	m, err := ConnectMultipath(testCtx(t), "tcp", addrs, testNQN, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// writes writes k blocks of 4 KiB through n and returns the paths'
// command counts after.
func writes(t *testing.T, m *Multipath, n *MultipathNamespace, k int, seed byte) []uint64 {
	t.Helper()
	for i := range k {
		_, err := n.WriteAt(bytes.Repeat([]byte{seed + byte(i)}, 4096), int64(i)*4096)
		require.NoError(t, err)
	}
	var c []uint64
	for _, p := range m.Paths() {
		c = append(c, p.Commands)
	}
	return c
}

func waitStates(t *testing.T, m *Multipath, g uint32, want ...nvme.ANAState) {
	t.Helper()
	require.Eventually(t, func() bool {
		for i, p := range m.Paths() {
			if p.States[g] != want[i] {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "paths' states of group %d: want %v", g, want)
}

// I/O goes down the optimized path; ANA Change notices move it, with no
// command refused on the way; two optimized paths share it; a namespace
// in another group goes where that group is optimized. Data read back by
// either path is what was written.
func TestMultipath(t *testing.T) {
	ctx, p1, p2, m, n := mpathNS(t)
	require.EqualValues(t, 1<<20, n.Size())
	require.Equal(t, []uint64{10, 0}, writes(t, m, n, 10, 1), "the optimized path")

	require.NoError(t, p1.SetANAState(1, nvme.ANAInaccessible))
	require.NoError(t, p2.SetANAState(1, nvme.ANAOptimized))
	waitStates(t, m, 1, nvme.ANAInaccessible, nvme.ANAOptimized)
	require.Equal(t, []uint64{10, 10}, writes(t, m, n, 10, 2), "moved by the notices")
	for _, p := range m.Paths() {
		require.Zero(t, p.PathErrors, "%s", p.Addr)
	}
	got := make([]byte, 4096)
	_, err := n.ReadAt(got, 9*4096)
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat([]byte{2 + 9}, 4096), got)

	require.NoError(t, p1.SetANAState(1, nvme.ANAOptimized))
	waitStates(t, m, 1, nvme.ANAOptimized, nvme.ANAOptimized)
	c := writes(t, m, n, 10, 3)
	require.Equal(t, uint64(31), c[0]+c[1], "every command counted once: 30 writes and a read")
	require.InDelta(t, 15, float64(c[0]), 1, "round-robin over the optimized paths: %v", c)

	n2, err := m.Namespace(ctx, 2) // group 5: inaccessible through port 1
	require.NoError(t, err)
	before := m.Paths()[0].Commands
	_, err = n2.WriteAt(make([]byte, 4096), 0)
	require.NoError(t, err)
	require.Equal(t, before, m.Paths()[0].Commands, "group 5 is not reachable through port 1")
	require.NoError(t, m.Close())
	require.NoError(t, m.Close(), "twice")
	_, err = n.ReadAt(got, 0)
	require.ErrorIs(t, err, ErrClosed)
}

// Without notices (not watched), a path status alone moves the I/O: the
// command goes again down the other path, and the refusing path's log is
// read again before it is used.
func TestMultipathPathStatus(t *testing.T) {
	checkRoutines(t)
	testNoANAWatch = true
	t.Cleanup(func() { testNoANAWatch = false })
	ctx := testCtx(t)
	_, _, p1, p2 := anaTarget(t)
	m := connectMultipath(t, p1.Addr().String(), p2.Addr().String())
	n, err := m.Namespace(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 0}, writes(t, m, n, 1, 1))

	require.NoError(t, p1.SetANAState(1, nvme.ANAInaccessible))
	require.Equal(t, []uint64{2, 1}, writes(t, m, n, 1, 2), "refused by path 1, sent again down path 2")
	require.EqualValues(t, 1, m.Paths()[0].PathErrors)
	waitStates(t, m, 1, nvme.ANAInaccessible, nvme.ANANonOptimized) // path 1's log read again; path 2's as it was
	require.Equal(t, []uint64{2, 3}, writes(t, m, n, 2, 3), "path 1 is left alone now")
	require.EqualValues(t, 1, m.Paths()[0].PathErrors)
	got := make([]byte, 4096)
	_, err = n.ReadAt(got, 4096)
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat([]byte{4}, 4096), got)
}

// With no usable path, I/O waits until a path comes back, or its context
// ends.
func TestMultipathNoUsablePath(t *testing.T) {
	ctx, p1, p2, m, n := mpathNS(t)
	require.NoError(t, p1.SetANAState(1, nvme.ANAInaccessible))
	require.NoError(t, p2.SetANAState(1, nvme.ANAChange))
	waitStates(t, m, 1, nvme.ANAInaccessible, nvme.ANAChange)

	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := n.WriteAtContext(short, make([]byte, 4096), 0)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	done := make(chan error, 1)
	go func() {
		_, err := n.WriteAtContext(ctx, bytes.Repeat([]byte{7}, 4096), 0)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a write went through with no usable path: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, p2.SetANAState(1, nvme.ANANonOptimized))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the held write did not go once a path came back")
	}
	require.Equal(t, uint64(0), m.Paths()[0].Commands)
}

// A path lost (its port closed) is taken out and its command sent down the
// other; with no path left (none connected again: ReconnectDelay -1), I/O
// fails with ErrNoPath. A path that does not connect at first is
// reported, and the others serve.
func TestMultipathPathLost(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	tg, _, p1, p2 := anaTarget(t)
	dead, err := tg.ListenPort(ctx, "tcp", "127.0.0.1:0", target.PortConfig{Subsystems: []string{testNQN}})
	require.NoError(t, err)
	deadAddr := dead.Addr().String()
	require.NoError(t, dead.Close())
	m := connectMultipathCfg(t, MultipathConfig{Config: Config{IOQueues: 1}, ReconnectDelay: -1},
		p1.Addr().String(), deadAddr, p2.Addr().String())
	ps := m.Paths()
	require.Error(t, ps[1].Err, "nothing listens there")
	require.False(t, ps[1].Retrying, "not with ReconnectDelay -1")
	require.Nil(t, ps[1].Controller)
	n, err := m.Namespace(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 0, 0}, writes(t, m, n, 1, 1))

	require.NoError(t, p1.Close())
	require.Eventually(t, func() bool { return m.Paths()[0].Err != nil }, 10*time.Second, 5*time.Millisecond)
	c := writes(t, m, n, 4, 2)
	require.Equal(t, uint64(4), c[2], "the non-optimized path, the only one left")
	require.NoError(t, p2.Close())
	_, err = n.WriteAt(make([]byte, 4096), 0)
	require.ErrorIs(t, err, ErrNoPath)

	_, err = ConnectMultipath(ctx, "tcp", []string{deadAddr}, testNQN, MultipathConfig{})
	require.Error(t, err, "no path connects")
}

// Paths that lead to different namespaces under one NQN are refused; bad
// arguments get errors.
func TestMultipathChecks(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	_, _, a := newTestTarget(t, 1<<20, target.Config{})
	_, _, b := newTestTarget(t, 2<<20, target.Config{})
	m := connectMultipath(t, a, b)
	_, err := m.Namespace(ctx, 1)
	require.ErrorContains(t, err, "disagree")
	_, err = m.Namespace(ctx, 9)
	require.Error(t, err)
	_, err = ConnectMultipath(ctx, "tcp", nil, testNQN, MultipathConfig{})
	require.Error(t, err)
	_, err = ConnectMultipath(ctx, "tcp", []string{a}, nvme.DiscoveryNQN, MultipathConfig{})
	require.Error(t, err)
	// Local faults are the caller's, not the path's.
	_, _, c := newTestTarget(t, 1<<20, target.Config{})
	m2 := connectMultipath(t, c)
	n, err := m2.Namespace(ctx, 1)
	require.NoError(t, err)
	_, err = n.WriteAt(make([]byte, 100), 0)
	require.ErrorIs(t, err, ErrUnaligned)
	require.NoError(t, m2.Paths()[0].Err, "the path stays")
	k, err := n.ReadAt(make([]byte, 4096), 1<<20-1024)
	require.Equal(t, 1024, k, "cut short at the end, as io.ReaderAt")
	require.ErrorIs(t, err, io.EOF)
	_, err = n.WriteAt(make([]byte, 4096), 1<<20)
	require.True(t, errors.Is(err, ErrRange), "%v", err)
	require.Equal(t, 512, n.BlockSize())
}

// Writers while the optimized path flips back and forth, 30 times (the
// new one made optimized before the old one inaccessible, so one is always
// usable): every write succeeds, by notice or by path status, and each
// region holds its last write.
func TestMultipathFlipping(t *testing.T) {
	ctx, p1, p2, m, n := mpathNS(t)
	const want = 30
	var flips atomic.Int32
	flipErr := make(chan error, 1)
	go func() {
		ports := []*target.Port{p1, p2}
		for f := 0; f < want; f++ {
			time.Sleep(2 * time.Millisecond)
			on, off := ports[(f+1)%2], ports[f%2]
			if err := errors.Join(on.SetANAState(1, nvme.ANAOptimized), off.SetANAState(1, nvme.ANAInaccessible)); err != nil {
				flipErr <- err
				return
			}
			// Seen by the host before the next: a write is bounced by a
			// few flips, not by all of them (maxFailovers bounds it).
			for end := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
				ps := m.Paths()
				if ps[(f+1)%2].States[1] == nvme.ANAOptimized && ps[f%2].States[1] == nvme.ANAInaccessible {
					break
				}
				if time.Now().After(end) {
					flipErr <- errors.New("a flip was not seen by the host")
					return
				}
			}
			flips.Add(1)
		}
		flipErr <- nil
	}()
	const writers = 4
	type result struct {
		w, n int
		last byte
		err  error
	}
	results := make(chan result, writers)
	for w := range writers {
		go func() {
			r := result{w: w}
			for ; r.n == 0 || flips.Load() < want; r.n++ { // one write at least, however late it starts
				r.last = byte(w*50 + r.n%50)
				if _, r.err = n.WriteAtContext(ctx, bytes.Repeat([]byte{r.last}, 8192), int64(w)*65536); r.err != nil {
					break
				}
			}
			results <- r
		}()
	}
	var last [writers]byte
	total := 0
	for range writers {
		r := <-results
		require.NoError(t, r.err)
		require.NotZero(t, r.n)
		total += r.n
		last[r.w] = r.last
	}
	require.NoError(t, <-flipErr)
	for w := range writers {
		got := make([]byte, 8192)
		_, err := n.ReadAt(got, int64(w)*65536)
		require.NoError(t, err)
		require.Equal(t, bytes.Repeat([]byte{last[w]}, 8192), got, "writer %d's region holds its last write", w)
	}
	var pathErrs uint64
	for _, p := range m.Paths() {
		pathErrs += p.PathErrors
		require.NoError(t, p.Err)
	}
	t.Logf("%d writes over %d flips; commands %d and %d; path statuses %d", total, want, m.Paths()[0].Commands, m.Paths()[1].Commands, pathErrs)
}

// A namespace added in a group the paths' logs did not list (no ANA
// notice comes for it, only a namespace one, as from nvmet): its log is
// read again, once, and the namespace is used.
func TestMultipathNewGroup(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	_, sub, p1, p2 := anaTarget(t)
	for _, p := range []*target.Port{p1, p2} {
		require.NoError(t, p.SetANAState(7, nvme.ANAOptimized))
	}
	m := connectMultipath(t, p1.Addr().String(), p2.Addr().String())
	for _, p := range m.Paths() {
		_, listed := p.States[7]
		require.False(t, listed, "no namespace in group 7 yet")
	}
	_, err := sub.AddNamespaceConfig(target.NewMemBackend(1<<20), target.NamespaceConfig{ID: 3, ANAGroup: 7})
	require.NoError(t, err)
	n, err := m.Namespace(ctx, 3)
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = n.WriteAtContext(short, make([]byte, 4096), 0)
	require.NoError(t, err, "group 7 learnt by reading the log again")
}

// One controller watching namespaces and ANA states at once: a waiter of
// each kind gets its own notice (they shared one wake-up token, and one
// took the other's).
func TestWatchBothKinds(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	_, sub, p1, _ := anaTarget(t)
	c := connectHost(t, p1.Addr().String(), testNQN, Config{IOQueues: 1, WatchNamespaces: true, WatchANA: true})
	nsCh, anaCh := make(chan []uint32, 1), make(chan nvme.ANALog, 1)
	go func() {
		ids, _ := c.WaitNamespaceChange(ctx)
		nsCh <- ids
	}()
	go func() {
		l, _ := c.WaitANAChange(ctx)
		anaCh <- l
	}()
	time.Sleep(50 * time.Millisecond) // both waiting
	_, err := sub.AddNamespace(target.NewMemBackend(1<<20), 512)
	require.NoError(t, err)
	select {
	case ids := <-nsCh:
		require.Equal(t, []uint32{3}, ids)
	case <-time.After(5 * time.Second):
		t.Fatal("the namespace waiter missed its notice")
	}
	require.NoError(t, p1.SetANAState(1, nvme.ANANonOptimized))
	select {
	case l := <-anaCh:
		require.Equal(t, nvme.ANANonOptimized, l.Groups[0].State)
	case <-time.After(5 * time.Second):
		t.Fatal("the ANA waiter missed its notice")
	}
}

// A path taken out while commands run on it (its log could not be read):
// they go down the other path, none fails with ErrClosed.
func TestMultipathPathTakenOut(t *testing.T) {
	ctx, _, _, m, n := mpathNS(t)
	const writers = 8
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			_, err := n.WriteAtContext(ctx, bytes.Repeat([]byte{byte(w)}, 64<<10), int64(w)<<16)
			errs <- err
		}()
	}
	m.mu.Lock()
	c0 := m.paths[0].c
	m.mu.Unlock()
	m.fail(m.paths[0], c0, errors.New("test: taken out"))
	for range writers {
		require.NoError(t, <-errs)
	}
	require.Error(t, m.Paths()[0].Err)
	got := make([]byte, 64<<10)
	for w := range writers {
		_, err := n.ReadAt(got, int64(w)<<16)
		require.NoError(t, err)
		require.Equal(t, bytes.Repeat([]byte{byte(w)}, 64<<10), got)
	}
}

// Paths to a target that does not report ANA (its transfers are too small
// for the log): every path is optimized, the I/O is shared, and a path
// lost is survived.
func TestMultipathWithoutANA(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	tg, _, addr := newTestTarget(t, 1<<20, target.Config{MaxTransfer: 8192})
	p2, err := tg.ListenPort(ctx, "tcp", "127.0.0.1:0", target.PortConfig{Subsystems: []string{testNQN}})
	require.NoError(t, err)
	m := connectMultipath(t, addr, p2.Addr().String())
	n, err := m.Namespace(ctx, 1)
	require.NoError(t, err)
	c := writes(t, m, n, 10, 1)
	require.Equal(t, []uint64{5, 5}, c, "round-robin over two optimized paths")
	require.NoError(t, p2.Close())
	writes(t, m, n, 10, 2)
	require.Eventually(t, func() bool { return m.Paths()[1].Err != nil }, 10*time.Second, 5*time.Millisecond)
	got := make([]byte, 4096)
	_, err = n.ReadAt(got, 9*4096)
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat([]byte{2 + 9}, 4096), got)
}

// Lost paths come back: a port closed and opened again on its address is
// connected again, its namespace opened again, and the I/O returns to it
// (it is the optimized one); a path that did not connect at first joins
// when its port opens; with every path lost, I/O waits while they are
// tried, and fails with ErrNoPath once LossTimeout gives them up.
func TestMultipathReconnect(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	tg, _, p1, p2 := anaTarget(t)
	later, err := tg.ListenPort(ctx, "tcp", "127.0.0.1:0", target.PortConfig{Subsystems: []string{testNQN}})
	require.NoError(t, err)
	laterAddr := later.Addr().String()
	require.NoError(t, later.Close())
	addr1 := p1.Addr().String()
	m := connectMultipathCfg(t, MultipathConfig{Config: Config{IOQueues: 1}, ReconnectDelay: 20 * time.Millisecond,
		LossTimeout: 3 * time.Second}, addr1, p2.Addr().String(), laterAddr)
	require.True(t, m.Paths()[2].Retrying)
	n, err := m.Namespace(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 0, 0}, writes(t, m, n, 1, 1))

	require.NoError(t, p1.Close())
	require.Eventually(t, func() bool { return m.Paths()[0].Controller == nil }, 10*time.Second, 5*time.Millisecond)
	c := writes(t, m, n, 2, 2)
	require.EqualValues(t, 2, c[1], "down the non-optimized path meanwhile")
	p1, err = tg.ListenPort(ctx, "tcp", addr1, target.PortConfig{Subsystems: []string{testNQN}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return m.Paths()[0].Controller != nil }, 10*time.Second, 5*time.Millisecond, "connected again")
	require.EqualValues(t, 2, m.Paths()[0].Connects)
	before := m.Paths()[0].Commands
	writes(t, m, n, 3, 3)
	require.Equal(t, before+3, m.Paths()[0].Commands, "back on the optimized path, its namespace opened again")

	later, err = tg.ListenPort(ctx, "tcp", laterAddr, target.PortConfig{Subsystems: []string{testNQN}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return m.Paths()[2].Controller != nil }, 10*time.Second, 5*time.Millisecond,
		"the path that did not connect at first")
	before = m.Paths()[2].Commands
	writes(t, m, n, 4, 4)
	require.Equal(t, before+2, m.Paths()[2].Commands, "its namespace opened: round-robin with the other optimized path")

	// Every path lost: a write waits while they are tried, and goes when
	// one comes back.
	for _, p := range []*target.Port{p1, p2, later} {
		require.NoError(t, p.Close())
	}
	require.Eventually(t, func() bool {
		for _, p := range m.Paths() {
			if p.Controller != nil {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond)
	done := make(chan error, 1)
	go func() {
		_, err := n.WriteAtContext(ctx, bytes.Repeat([]byte{9}, 4096), 0)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a write with no path: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	back, err := tg.ListenPort(ctx, "tcp", p2.Addr().String(), target.PortConfig{Subsystems: []string{testNQN},
		ANA: map[uint32]nvme.ANAState{1: nvme.ANANonOptimized, 5: nvme.ANAOptimized}})
	require.NoError(t, err)
	require.NoError(t, <-done, "held until a path came back")
	got := make([]byte, 4096)
	_, err = n.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat([]byte{9}, 4096), got)

	// Given up after LossTimeout: ErrNoPath.
	require.Eventually(t, func() bool {
		ps := m.Paths()
		return !ps[0].Retrying && !ps[2].Retrying
	}, 10*time.Second, 10*time.Millisecond, "paths 1 and 3 given up")
	require.ErrorContains(t, m.Paths()[0].Err, "given up")
	require.NoError(t, back.Close())
	start := time.Now()
	_, err = n.WriteAtContext(ctx, make([]byte, 4096), 0)
	require.ErrorIs(t, err, ErrNoPath, "the last path given up too")
	require.Greater(t, time.Since(start), time.Second, "after it was tried for LossTimeout")
}

// A namespace removed from the target, alone in its group: the paths'
// logs no longer list the group; after one read of the log, the command
// goes to the target, which answers Invalid Namespace (it spun reading the
// log, and the write waited for ever).
func TestMultipathRemovedNamespace(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	_, sub, p1, p2 := anaTarget(t)
	m := connectMultipath(t, p1.Addr().String(), p2.Addr().String())
	n2, err := m.Namespace(ctx, 2)
	require.NoError(t, err)
	same, err := m.Namespace(ctx, 2)
	require.NoError(t, err)
	require.Same(t, n2, same, "one MultipathNamespace an NSID")
	require.NoError(t, sub.RemoveNamespace(ctx, 2))
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = n2.WriteAtContext(short, make([]byte, 4096), 0)
	requireStatus(t, err, nvme.StatusInvalidField|nvme.DNR) // NSID 2 is inactive now
}

// A LossTimeout shorter than ReconnectDelay still makes one attempt, as
// Linux's host does.
func TestMultipathShortLossTimeout(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	tg, _, p1, p2 := anaTarget(t)
	addr1 := p1.Addr().String()
	m := connectMultipathCfg(t, MultipathConfig{Config: Config{IOQueues: 1}, ReconnectDelay: 200 * time.Millisecond,
		LossTimeout: 10 * time.Millisecond}, addr1, p2.Addr().String())
	require.NoError(t, p1.Close())
	require.Eventually(t, func() bool { return m.Paths()[0].Controller == nil }, 10*time.Second, 5*time.Millisecond)
	_, err := tg.ListenPort(ctx, "tcp", addr1, target.PortConfig{Subsystems: []string{testNQN}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return m.Paths()[0].Controller != nil }, 10*time.Second, 5*time.Millisecond,
		"connected again by the one attempt")
}
