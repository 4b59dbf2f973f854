package target

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/internal/transport"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

// activeNSIDs returns the controller's active namespace list (CNS 02h).
func activeNSIDs(t *testing.T, c *host.Controller) []uint32 {
	t.Helper()
	list := make([]byte, nvme.IdentifySize)
	require.NoError(t, c.Identify(testCtx(t), nvme.CNSActiveNSList, 0, list))
	var ids []uint32
	for i := 0; i < len(list); i += 4 {
		id := binary.LittleEndian.Uint32(list[i:])
		if id == 0 {
			break
		}
		ids = append(ids, id)
	}
	return ids
}

// A namespace at an NSID and with the identity the caller gives (as
// nvmetcli's saved configurations name them), next to one that takes the
// defaults; an NSID in use or beyond NN is refused; a removed NSID may be
// given again, and the host sees it come back with its identity.
func TestAddNamespaceConfig(t *testing.T) {
	checkRoutines(t)
	_, sub, addr := newTestTarget(t, 1<<20, Config{})
	c := connectHost(t, addr, testNQN, host.Config{IOQueues: 1, WatchNamespaces: true})
	ctx := testCtx(t)

	nguid := [16]byte{0x5e, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	uuid := [16]byte{0xc0, 0xff, 0xee, 3, 4, 5, 0x46, 7, 0x88, 9, 10, 11, 12, 13, 14, 15}
	ns5, err := sub.AddNamespaceConfig(NewMemBackend(1<<20), NamespaceConfig{ID: 5, BlockSize: 4096, NGUID: nguid, UUID: uuid})
	require.NoError(t, err)
	require.EqualValues(t, 5, ns5.ID)
	ids, err := c.WaitNamespaceChange(ctx)
	require.NoError(t, err)
	require.Equal(t, []uint32{5}, ids)
	require.Equal(t, []uint32{1, 5}, activeNSIDs(t, c), "NSIDs 2 to 4 stay inactive")

	h5, err := c.Namespace(ctx, 5)
	require.NoError(t, err)
	require.Equal(t, nguid, h5.Info.NGUID)
	require.Equal(t, 4096, h5.BlockSize())
	desc := make([]byte, nvme.IdentifySize)
	require.NoError(t, c.Identify(ctx, nvme.CNSNSDescriptors, 5, desc))
	require.Equal(t, nguid[:], desc[4:20], "NIDT 2, the NGUID")
	require.EqualValues(t, nvme.NIDTUUID, desc[20])
	require.Equal(t, uuid[:], desc[24:40], "NIDT 3, the UUID")
	w := make([]byte, 8192)
	fill(w, 5)
	_, err = h5.WriteAt(w, 4096)
	require.NoError(t, err)

	_, err = sub.AddNamespaceConfig(NewMemBackend(1<<20), NamespaceConfig{ID: 5})
	require.ErrorContains(t, err, "NSID 5 is in use")
	_, err = sub.AddNamespaceConfig(NewMemBackend(1<<20), NamespaceConfig{ID: maxNSID + 1})
	require.ErrorContains(t, err, "beyond 1024")
	_, err = sub.AddNamespaceConfig(NewMemBackend(1<<20), NamespaceConfig{BlockSize: 1000})
	require.ErrorContains(t, err, "block size 1000")

	// The default: one past the highest NSID, with an identity derived
	// from the NQN and NSID.
	ns6, err := sub.AddNamespace(NewMemBackend(1<<20), 512)
	require.NoError(t, err)
	require.EqualValues(t, 6, ns6.ID)
	require.NotEqual(t, [16]byte{}, ns6.NGUID)
	require.NotEqual(t, ns6.NGUID, ns5.NGUID)
	ids, err = c.WaitNamespaceChange(ctx)
	require.NoError(t, err)
	require.Equal(t, []uint32{6}, ids)

	// Disabled and enabled again, as in nvmet: the same NSID, the same
	// identity, the data its backend kept. A controller that has not read
	// its Changed Namespace List meanwhile finds NSID 5 in it once.
	quiet := connectHost(t, addr, testNQN, host.Config{})
	b5 := ns5.Backend
	require.NoError(t, sub.RemoveNamespace(ctx, 5))
	ids, err = c.WaitNamespaceChange(ctx)
	require.NoError(t, err)
	require.Equal(t, []uint32{5}, ids)
	require.Equal(t, []uint32{1, 6}, activeNSIDs(t, c))
	_, err = sub.AddNamespaceConfig(b5, NamespaceConfig{ID: 5, BlockSize: 4096, NGUID: nguid, UUID: uuid})
	require.NoError(t, err)
	ids, err = c.WaitNamespaceChange(ctx)
	require.NoError(t, err)
	require.Equal(t, []uint32{5}, ids)
	require.Equal(t, []uint32{1, 5, 6}, activeNSIDs(t, c))
	h5, err = c.Namespace(ctx, 5)
	require.NoError(t, err)
	require.Equal(t, nguid, h5.Info.NGUID)
	log := make([]byte, 4096)
	require.NoError(t, quiet.GetLogPage(ctx, nvme.LogChangedNS, 0xffffffff, 0, log))
	require.EqualValues(t, 5, binary.LittleEndian.Uint32(log[0:]))
	require.Zero(t, binary.LittleEndian.Uint32(log[4:]), "removed and added again: listed once, as nvmet")
	got := make([]byte, len(w))
	_, err = h5.ReadAt(got, 4096)
	require.NoError(t, err)
	require.Equal(t, w, got)
}

// SetAllowedHosts replaces the access list, as nvmet's allow_any_host and
// allowed_hosts: a host taken off it can no longer connect or discover the
// subsystem, while its controller already connected keeps working; an
// empty list without anyHost admits no host.
func TestSetAllowedHosts(t *testing.T) {
	checkRoutines(t)
	_, sub, addr := newTestTarget(t, 1<<20, Config{})
	ctx := testCtx(t)
	const hostA = "nqn.2014-08.org.nvmexpress:uuid:0a0a0a0a-0000-4000-8000-000000000001"
	const hostB = "nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0000-4000-8000-000000000002"
	cA := connectHost(t, addr, testNQN, host.Config{HostNQN: hostA, IOQueues: 1})
	hA, err := cA.Namespace(ctx, 1)
	require.NoError(t, err)

	sub.SetAllowedHosts(false, hostB, hostB)
	require.False(t, sub.Allowed(hostA))
	require.True(t, sub.Allowed(hostB))
	_, err = host.Connect(ctx, "tcp", addr, testNQN, host.Config{HostNQN: hostA})
	requireStatus(t, err, nvme.StatusConnectInvalidHost|nvme.DNR)
	ents, err := host.Discover(ctx, "tcp", addr, host.Config{HostNQN: hostA})
	require.NoError(t, err)
	require.Empty(t, ents, "the discovery log lists what the host may reach")
	ents, err = host.Discover(ctx, "tcp", addr, host.Config{HostNQN: hostB})
	require.NoError(t, err)
	require.Len(t, ents, 1)
	connectHost(t, addr, testNQN, host.Config{HostNQN: hostB})
	_, err = hA.WriteAt(make([]byte, 512), 0)
	require.NoError(t, err, "a connected controller stays, as in nvmet")

	sub.SetAllowedHosts(false)
	require.False(t, sub.Allowed(hostB), "no list and not any host: nobody")
	sub.SetAllowedHosts(true)
	require.True(t, sub.Allowed(hostA))
	connectHost(t, addr, testNQN, host.Config{HostNQN: hostA})
}

// RemoveSubsystem on a running target: the hosts connected to it lose
// their queues, it leaves the discovery log, Connects to it are refused,
// and it returns only once a command that was using a namespace's backend
// has finished; the other subsystem is untouched, and the removed one can
// be added back.
func TestRemoveSubsystem(t *testing.T) {
	checkRoutines(t)
	tg, sub1, addr := newTestTarget(t, 1<<20, Config{})
	ctx := testCtx(t)
	sub2, err := NewSubsystem(testNQN + "-2")
	require.NoError(t, err)
	g := newGateWrite()
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(g.release) }) }
	t.Cleanup(release)
	_, err = sub2.AddNamespace(g, 512)
	require.NoError(t, err)
	require.NoError(t, tg.AddSubsystem(sub2))
	require.Error(t, tg.AddSubsystem(sub2), "twice")

	c1 := connectHost(t, addr, sub1.NQN, host.Config{IOQueues: 1})
	c2 := connectHost(t, addr, sub2.NQN, host.Config{IOQueues: 1})
	h2, err := c2.Namespace(ctx, 1)
	require.NoError(t, err)
	wrote := make(chan error, 1)
	g.arm()
	go func() { _, err := h2.WriteAt(make([]byte, 4096), 0); wrote <- err }()
	<-g.entered

	removed := make(chan error, 1)
	go func() { removed <- tg.RemoveSubsystem(ctx, sub2.NQN) }()
	select {
	case <-c2.IOQueueDone(0):
	case <-time.After(10 * time.Second):
		t.Fatal("the removed subsystem's host kept its queue")
	}
	select {
	case err := <-removed:
		t.Fatalf("RemoveSubsystem returned (%v) while a write used a namespace's backend", err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	require.NoError(t, <-removed)
	require.Error(t, <-wrote, "the host lost the queue the write was on")
	require.Error(t, tg.RemoveSubsystem(ctx, sub2.NQN), "removed already")

	ents, err := host.Discover(ctx, "tcp", addr, host.Config{})
	require.NoError(t, err)
	require.Len(t, ents, 1)
	require.Equal(t, sub1.NQN, ents[0].SubNQN)
	_, err = host.Connect(ctx, "tcp", addr, sub2.NQN, host.Config{})
	requireStatus(t, err, nvme.StatusConnectInvalidParm|nvme.DNR)
	h1, err := c1.Namespace(ctx, 1)
	require.NoError(t, err)
	_, err = h1.WriteAt(make([]byte, 512), 0)
	require.NoError(t, err, "the other subsystem's host carries on")

	// Back, with a namespace again (its old one was removed with it).
	require.NoError(t, tg.AddSubsystem(sub2))
	_, err = sub2.AddNamespaceConfig(g, NamespaceConfig{ID: 1})
	require.NoError(t, err)
	c2 = connectHost(t, addr, sub2.NQN, host.Config{IOQueues: 1})
	h2, err = c2.Namespace(context.Background(), 1)
	require.NoError(t, err)
	_, err = h2.WriteAt(make([]byte, 512), 0)
	require.NoError(t, err)
}

// A namespace removed and another added at its NSID between a command's
// plan (its range checked against the first) and its execution: the
// command gets Invalid Namespace and never reaches the second namespace
// (before, a write planned for a 1 MiB namespace landed past the end of
// the 64 KiB file that replaced it, and the file grew).
func TestNSIDReusedBetweenPlanAndExec(t *testing.T) {
	ctx := testCtx(t)
	sub, err := NewSubsystem(testNQN)
	require.NoError(t, err)
	_, err = sub.AddNamespace(NewMemBackend(1<<20), 512)
	require.NoError(t, err)
	c := &controller{t: &Target{cfg: Config{MaxTransfer: transport.DefaultMaxTransfer}}, sub: sub}
	cmd := make(nvme.Command, nvme.CommandSize)
	nvme.NewRW(cmd, nvme.IOWrite, 1, 1, 1000, 7) // 8 blocks at LBA 1000: 4 KiB at 512 000
	r := request{cmd: cmd}
	st := c.parseIO(&r, &Port{})
	require.True(t, st.OK())
	require.NoError(t, sub.RemoveNamespace(ctx, 1))
	path := filepath.Join(t.TempDir(), "small.img")
	require.NoError(t, os.WriteFile(path, make([]byte, 64<<10), 0o600))
	fb, err := OpenFileBackend(path)
	require.NoError(t, err)
	defer fb.Close()
	_, err = sub.AddNamespaceConfig(fb, NamespaceConfig{ID: 1, BlockSize: 4096})
	require.NoError(t, err)
	r.in = make([]byte, r.need)
	_, st = execIO(&queue{ctrl: c}, &r)
	require.Equal(t, nvme.StatusInvalidNamespace|nvme.DNR, st)

	// Removed and not given again: the NSID is inactive (Invalid Field).
	nvme.NewRW(cmd, nvme.IOWrite, 1, 1, 0, 0)
	r = request{cmd: cmd}
	st = c.parseIO(&r, &Port{})
	require.True(t, st.OK())
	require.NoError(t, sub.RemoveNamespace(ctx, 1))
	r.in = make([]byte, r.need)
	_, st = execIO(&queue{ctrl: c}, &r)
	require.Equal(t, nvme.StatusInvalidField|nvme.DNR, st)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.EqualValues(t, 64<<10, fi.Size(), "the new namespace's file is untouched")
}

// The same with a host writing near the end of namespace 1 while it is
// replaced, again and again, by a smaller one at the same NSID.
func TestNSIDReusedUnderWrites(t *testing.T) {
	_, sub, addr := newTestTarget(t, 1<<20, Config{Logf: func(string, ...any) {}})
	ctx := testCtx(t)
	c := connectHost(t, addr, testNQN, host.Config{IOQueues: 2})
	h, err := c.Namespace(ctx, 1)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "small.img")
	require.NoError(t, os.WriteFile(path, make([]byte, 64<<10), 0o600))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 128<<10)
			for {
				select {
				case <-stop:
					return
				default:
				}
				h.WriteAt(buf, 1<<20-128<<10) // errors expected: the namespace comes and goes
			}
		}()
	}
	swaps := 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); swaps++ {
		require.NoError(t, sub.RemoveNamespace(ctx, 1))
		fb, err := OpenFileBackend(path)
		require.NoError(t, err)
		_, err = sub.AddNamespaceConfig(fb, NamespaceConfig{ID: 1, BlockSize: 4096})
		require.NoError(t, err)
		time.Sleep(2 * time.Millisecond)
		require.NoError(t, sub.RemoveNamespace(ctx, 1))
		fb.Close()
		_, err = sub.AddNamespaceConfig(NewMemBackend(1<<20), NamespaceConfig{ID: 1, BlockSize: 512})
		require.NoError(t, err)
		fi, err := os.Stat(path)
		require.NoError(t, err)
		require.EqualValues(t, 64<<10, fi.Size(), "after %d swaps: a write planned for the 1 MiB namespace landed in the 64 KiB one", swaps)
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d swaps", swaps)
}

// A Backend stuck in a write (a hung network file system): a removal whose
// ctx ends first returns its error, but the namespace is out all the
// same, and its Drained channel closes once the stuck command is done,
// the time to close the Backend. RemoveSubsystem takes out every
// namespace, not only those before the stuck one (it stopped there).
func TestRemoveWhileBackendHangs(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	tg, sub, addr := newTestTarget(t, 1<<20, Config{})
	gate := func() (*gateWrite, func()) {
		g := newGateWrite()
		var once sync.Once
		release := func() { once.Do(func() { close(g.release) }) }
		t.Cleanup(release)
		return g, release
	}
	g2, release2 := gate()
	ns2, err := sub.AddNamespace(g2, 512)
	require.NoError(t, err)
	g3, release3 := gate()
	ns3, err := sub.AddNamespace(g3, 512)
	require.NoError(t, err)
	ns4, err := sub.AddNamespace(NewMemBackend(1<<20), 512)
	require.NoError(t, err)
	c := connectHost(t, addr, sub.NQN, host.Config{IOQueues: 2})
	stuck := func(id uint32, g *gateWrite) chan error {
		h, err := c.Namespace(ctx, id)
		require.NoError(t, err)
		wrote := make(chan error, 1)
		g.arm()
		go func() { _, err := h.WriteAt(make([]byte, 512), 0); wrote <- err }()
		<-g.entered
		return wrote
	}
	drained := func(ns *Namespace, want bool, what string) {
		t.Helper()
		wait := 10 * time.Second
		if !want {
			wait = 50 * time.Millisecond
		}
		select {
		case <-ns.Drained():
			require.True(t, want, "namespace %d drained: %s", ns.ID, what)
		case <-time.After(wait):
			require.False(t, want, "namespace %d not drained: %s", ns.ID, what)
		}
	}

	wrote3 := stuck(3, g3)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, sub.RemoveNamespace(short, 3), context.DeadlineExceeded)
	require.Nil(t, sub.Namespace(3), "out all the same")
	drained(ns3, false, "a write is stuck in its backend")
	release3()
	drained(ns3, true, "the write finished")
	require.NoError(t, <-wrote3, "the stuck write completes")

	wrote2 := stuck(2, g2)
	ns1 := sub.Namespace(1)
	short2, cancel2 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel2()
	require.ErrorIs(t, tg.RemoveSubsystem(short2, sub.NQN), context.DeadlineExceeded)
	require.Empty(t, sub.Namespaces(), "every namespace out, 4 after the stuck 2 too")
	drained(ns1, true, "unused")
	drained(ns4, true, "unused, after the stuck one")
	drained(ns2, false, "a write is stuck in its backend")
	release2()
	drained(ns2, true, "the write finished")
	<-wrote2 // its queue went with the subsystem: success or a lost queue
}

// Closing a port, or the target, does not wait for a command stuck in its
// Backend: the queue's connection closes, and the command finishes when
// the Backend lets it.
func TestClosePortWhileBackendHangs(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	g := newGateWrite()
	var once sync.Once
	release := func() { once.Do(func() { close(g.release) }) }
	t.Cleanup(release)
	tg, _, _ := newBackendTarget(t, g, Config{})
	p, err := tg.ListenPort(ctx, "tcp", "127.0.0.1:0", PortConfig{Subsystems: []string{testNQN}})
	require.NoError(t, err)
	c, err := host.Connect(ctx, "tcp", p.Addr().String(), testNQN, host.Config{IOQueues: 1})
	require.NoError(t, err)
	defer c.Close()
	ns, err := c.Namespace(ctx, 1)
	require.NoError(t, err)
	wrote := make(chan error, 1)
	g.arm()
	go func() { _, err := ns.WriteAt(make([]byte, 512), 0); wrote <- err }()
	<-g.entered
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Port.Close waits for a command stuck in its Backend")
	}
	select {
	case <-c.IOQueueDone(0):
	case <-time.After(5 * time.Second):
		t.Fatal("the I/O queue's connection is still up")
	}
	release()
	<-wrote // its queue went with the port: success or a lost queue
}

// RemoveSubsystem and AddSubsystem of the same subsystem at once: the
// add finds it served (an error: twice), being removed (an error: add it
// once the removal has returned) or removed, never between, where the
// target listed a subsystem that no longer had the target (and refused
// every Connect to it), or the removal took the namespaces out of a
// subsystem added again.
func TestRemoveSubsystemRacingAdd(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	sub, err := NewSubsystem(testNQN)
	require.NoError(t, err)
	tg, err := New(Config{}, sub)
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	p, err := tg.ListenPort(ctx, "tcp", "127.0.0.1:0", PortConfig{Subsystems: []string{testNQN}})
	require.NoError(t, err)
	for i := range 200 {
		_, err := sub.AddNamespace(NewMemBackend(1<<20), 512)
		require.NoError(t, err)
		removed := make(chan error, 1)
		go func() { removed <- tg.RemoveSubsystem(ctx, testNQN) }()
		for {
			err := tg.AddSubsystem(sub)
			if err == nil {
				break
			}
			require.Regexp(t, `twice|being removed`, err.Error())
		}
		require.NoError(t, <-removed)
		tg.mu.Lock()
		served := tg.subs[testNQN] == sub
		tg.mu.Unlock()
		sub.mu.RLock()
		_, joined := sub.targets[tg]
		sub.mu.RUnlock()
		nss := len(sub.Namespaces())
		require.True(t, served, "round %d: added", i)
		require.True(t, joined, "round %d: the subsystem has the target that lists it", i)
		require.Zero(t, nss, "round %d: added after the removal, without its namespaces", i)
	}
	c := connectHost(t, p.Addr().String(), testNQN, host.Config{IOQueues: 1})
	require.NoError(t, c.Close())
}
