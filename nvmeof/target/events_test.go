package target

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

// gateFlush holds its first Flush until released, so that a test can
// keep a queue's goroutine busy; entered has room to tell it. (It held a
// Flush only while the test already waited on entered: one that came
// sooner passed, as gateWrite's write could.)
type gateFlush struct {
	*MemBackend
	entered, release chan struct{}
	once             sync.Once
}

func (g *gateFlush) Flush() error {
	first := false
	g.once.Do(func() { first = true })
	if first {
		g.entered <- struct{}{}
		<-g.release
	}
	return g.MemBackend.Flush()
}

// An admin queue whose CQ overruns ends, as an I/O queue does: the wait
// that a namespace notice interrupts (kick) is told from the CQ's own
// error. (Found by review: the loop took every error for a kick and spun.)
func TestAdminCQOverrunEndsQueue(t *testing.T) {
	checkRoutines(t)
	g := &gateFlush{MemBackend: NewMemBackend(1 << 20), entered: make(chan struct{}, 1), release: make(chan struct{})}
	tg, _, addr := newBackendTarget(t, g, Config{Logf: func(string, ...any) {}})
	q := scriptedAdmin(t, addr, testNQN, "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-4333-8444-555555555555", [16]byte{1})
	tg.mu.Lock()
	var tc *controller
	for _, x := range tg.ctrls {
		tc = x
	}
	tg.mu.Unlock()
	tq := tc.admin
	// CC.SHN flushes the namespace: the admin queue's goroutine waits in
	// the gate while its CQ fills with completions it never takes.
	shut := make(chan struct{})
	go func() {
		defer close(shut)
		q.exec(context.Background(), func(c nvme.Command, _ []byte) int {
			nvme.NewPropertySet(c, 0, nvme.PropCC, nvme.CCEnable|6<<16|4<<20|1<<14)
			return 0
		})
	}()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no flush")
	}
	hm := q.slots[len(q.slots)-1].mr
	sge := []verbs.SGE{tq.recvMR.SGE(0, 1)}
	for deadline := time.Now().Add(20 * time.Second); tq.cq.Err() == nil && time.Now().Before(deadline); {
		_, err := tq.qp.PostSend(verbs.SendWR{ID: 0, Opcode: verbs.OpRDMAWrite, Flags: verbs.Signaled, SGL: sge,
			RemoteAddr: hm.Addr(), RKey: hm.RKey()})
		if errors.Is(err, verbs.ErrQueueFull) {
			time.Sleep(100 * time.Microsecond)
			continue
		}
		require.NoError(t, err)
	}
	require.ErrorIs(t, tq.cq.Err(), verbs.ErrCQOverrun)
	close(g.release)
	select {
	case <-tq.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the admin queue did not end on ErrCQOverrun")
	}
	<-shut
}

// A controller reset (CC.EN 1 → 0) aborts the held AERs with every other
// outstanding command: once enabled again the host may hold four new ones
// (AERL 3), and no stale one answers later.
func TestResetDropsHeldAERs(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 1<<20, Config{})
	q := rawQueue(t, addr, 0, 16, 16)
	st, _ := raw(t, q, func(c nvme.Command, d []byte) int {
		nvme.NewConnect(c, 0, 0, 15, 0)
		nvme.ConnectData{CntlID: nvme.DynamicCntlID, SubNQN: testNQN, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-4333-8444-555555555555"}.Append(d[:0])
		c.SGL().SetInCapsule(0, 1024)
		return 1024
	})
	require.Equal(t, nvme.StatusSuccess, st)
	enable := func(on bool) {
		t.Helper()
		v := uint32(6<<16 | 4<<20)
		if on {
			v |= nvme.CCEnable
		}
		st, _ := raw(t, q, func(c nvme.Command, _ []byte) int { nvme.NewPropertySet(c, 0, nvme.PropCC, v); return 0 })
		require.Equal(t, nvme.StatusSuccess, st)
	}
	postAER := func() int {
		t.Helper()
		i, err := q.acquire(testCtx(t))
		require.NoError(t, err)
		nvme.NewAdmin(q.cmd(i), nvme.AdminAER, 0, 0, 0, 0)
		require.NoError(t, q.submit(i, 0))
		return i
	}
	enable(true)
	stale := []int{postAER(), postAER()}
	enable(false)
	enable(true)
	var fresh []int
	for range aerl + 1 {
		fresh = append(fresh, postAER())
	}
	st, _ = raw(t, q, func(c nvme.Command, _ []byte) int { nvme.NewAdmin(c, nvme.AdminAER, 0, 0, 0, 0); return 0 })
	require.Equal(t, nvme.StatusAERLimitExceeded|nvme.DNR, st, "a fifth")
	for _, i := range append(stale, fresh...) {
		select {
		case <-q.slots[i].done:
			t.Fatalf("an AER was answered (%v): the stale ones still counted, or answered late", q.slots[i].st)
		default:
		}
	}
}

// A subsystem holds as many namespaces as Identify Controller's NN says
// (maxNSID), no more: a namespace beyond it could be neither listed nor
// addressed by a host.
func TestNamespaceLimit(t *testing.T) {
	sub, err := NewSubsystem(testNQN)
	require.NoError(t, err)
	for range maxNSID {
		_, err := sub.AddNamespace(NewMemBackend(512), 512)
		require.NoError(t, err)
	}
	_, err = sub.AddNamespace(NewMemBackend(512), 512)
	require.Error(t, err)
	require.Len(t, sub.Namespaces(), maxNSID)
}

// gateWrite holds its first WriteAt until released.
// gateWrite holds the first write after arm until release closes, and
// tells entered (which has room for it) when it holds one. It used to
// hold whichever write came while the test waited on entered: under load
// the write could reach the Backend before the test waited, pass, and
// leave the test waiting for good (a CI run, 2026-11-27).
type gateWrite struct {
	*MemBackend
	entered, release chan struct{}
	armed            atomic.Bool
}

func newGateWrite() *gateWrite {
	return &gateWrite{MemBackend: NewMemBackend(1 << 20), entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (g *gateWrite) arm() { g.armed.Store(true) }

func (g *gateWrite) WriteAt(p []byte, off int64) (int, error) {
	if g.armed.CompareAndSwap(true, false) {
		g.entered <- struct{}{}
		<-g.release
	}
	return g.MemBackend.WriteAt(p, off)
}

// A namespace removed while a host is connected (as disabling one in
// Linux's nvmet): the host is told (Changed Namespace List, notice), the
// namespace leaves the active list and reads as an inactive NSID, commands
// naming it get Invalid Namespace, its NSID is not reused, and
// RemoveNamespace returns only once a command using its Backend has
// finished, which completes normally.
func TestNamespaceRemoved(t *testing.T) {
	checkRoutines(t)
	_, sub, addr := newTestTarget(t, 1<<20, Config{})
	g := newGateWrite()
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(g.release) }) }
	t.Cleanup(release) // before the target's Close, which waits for the write
	ns2, err := sub.AddNamespace(NewMemBackend(1<<20), 512)
	require.NoError(t, err)
	c := connectHost(t, addr, testNQN, host.Config{IOQueues: 1, WatchNamespaces: true})
	ctx := testCtx(t)
	h2, err := c.Namespace(ctx, ns2.ID)
	require.NoError(t, err)
	_, err = h2.WriteAt(make([]byte, 512), 0)
	require.NoError(t, err)

	require.NoError(t, sub.RemoveNamespace(ctx, ns2.ID))
	ids, err := c.WaitNamespaceChange(ctx)
	require.NoError(t, err)
	require.Equal(t, []uint32{ns2.ID}, ids)
	list := make([]byte, nvme.IdentifySize)
	require.NoError(t, c.Identify(ctx, nvme.CNSActiveNSList, 0, list))
	require.EqualValues(t, 1, binary.LittleEndian.Uint32(list))
	require.Zero(t, binary.LittleEndian.Uint32(list[4:]), "namespace 2 is not active")
	id := make([]byte, nvme.IdentifySize)
	require.NoError(t, c.Identify(ctx, nvme.CNSNamespace, ns2.ID, id))
	require.Zero(t, binary.LittleEndian.Uint64(id), "NSZE of an inactive NSID")
	_, err = h2.ReadAt(make([]byte, 512), 0)
	requireStatus(t, err, nvme.StatusInvalidField|nvme.DNR) // an inactive NSID
	require.Error(t, sub.RemoveNamespace(ctx, ns2.ID), "removed already")
	require.Error(t, sub.RemoveNamespace(ctx, 9), "never there")

	// Not reused; and a removal waits for the write in progress.
	ns3, err := sub.AddNamespace(g, 512)
	require.NoError(t, err)
	require.EqualValues(t, 3, ns3.ID)
	ids, err = c.WaitNamespaceChange(ctx)
	require.NoError(t, err)
	require.Equal(t, []uint32{3}, ids)
	h3, err := c.Namespace(ctx, 3)
	require.NoError(t, err)
	w := make([]byte, 4096)
	fill(w, 3)
	wrote := make(chan error, 1)
	g.arm()
	go func() { _, err := h3.WriteAt(w, 4096); wrote <- err }()
	<-g.entered
	removed := make(chan error, 1)
	go func() { removed <- sub.RemoveNamespace(ctx, 3) }()
	select {
	case err := <-removed:
		t.Fatalf("RemoveNamespace returned (%v) while a write used the backend", err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	require.NoError(t, <-removed)
	require.NoError(t, <-wrote, "the write that had started completes")
	got := make([]byte, len(w))
	_, err = g.ReadAt(got, 4096)
	require.NoError(t, err)
	require.Equal(t, w, got)
}
