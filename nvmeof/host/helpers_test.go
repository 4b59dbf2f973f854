package host

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/require"
)

const testNQN = "nqn.2024-01.io.goiwarp:test"

// checkRoutines fails the test if goroutines it started are still running
// when it ends (pion's CheckRoutines, as verbs' tests use).
func checkRoutines(t *testing.T) {
	t.Cleanup(test.CheckRoutines(t))
}

// newTestTarget starts a target with one subsystem of one RAM namespace
// of size octets on 127.0.0.1 and returns it with its address.
func newTestTarget(t *testing.T, size int64, cfg target.Config) (*target.Target, *target.Subsystem, string) {
	t.Helper()
	return newBackendTarget(t, target.NewMemBackend(size), cfg)
}

// newBackendTarget is newTestTarget with namespace 1 over b.
func newBackendTarget(t *testing.T, b target.Backend, cfg target.Config) (*target.Target, *target.Subsystem, string) {
	t.Helper()
	sub, err := target.NewSubsystem(testNQN)
	require.NoError(t, err)
	_, err = sub.AddNamespace(b, 512)
	require.NoError(t, err)
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	tg, err := target.New(cfg, sub)
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	addr, err := tg.Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return tg, sub, addr.String()
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func connectHost(t *testing.T, addr, nqn string, cfg Config) *Controller {
	t.Helper()
	c, err := Connect(testCtx(t), "tcp", addr, nqn, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
}

// serveNamespaces serves subsystem testNQN with a namespace of 1 MiB in
// memory for each configuration, on a port of its own (more with
// listenPorts), and returns the subsystem, its target and the port's
// address.
func serveNamespaces(t *testing.T, cfgs ...target.NamespaceConfig) (*target.Subsystem, *target.Target, string) {
	t.Helper()
	sub, err := target.NewSubsystem(testNQN)
	require.NoError(t, err)
	for _, cfg := range cfgs {
		_, err = sub.AddNamespaceConfig(target.NewMemBackend(1<<20), cfg)
		require.NoError(t, err)
	}
	tg, err := target.New(target.Config{Logf: t.Logf}, sub)
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	addr, err := tg.Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return sub, tg, addr.String()
}

// listenPorts opens n ports of tg exposing sub, and returns them and
// their addresses.
func listenPorts(t *testing.T, tg *target.Target, sub *target.Subsystem, n int) ([]*target.Port, []string) {
	t.Helper()
	var ports []*target.Port
	var addrs []string
	for range n {
		p, err := tg.ListenPort(context.Background(), "tcp", "127.0.0.1:0", target.PortConfig{Subsystems: []string{sub.NQN}})
		require.NoError(t, err)
		ports, addrs = append(ports, p), append(addrs, p.Addr().String())
	}
	return ports, addrs
}

// hostNS connects a host with cfg to a new test target of size octets and
// opens namespace 1.
func hostNS(t *testing.T, size int64, cfg Config) (*Controller, *Namespace) {
	t.Helper()
	_, _, addr := newTestTarget(t, size, target.Config{})
	c := connectHost(t, addr, testNQN, cfg)
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	return c, ns
}

// aerProbe posts Asynchronous Event Requests on a host's admin queue by
// hand (the Go host's own watch keeps one of its own) and waits for their
// completions: post returns the slot, noticed reports whether it
// completed within the time with a success and the event want.
func aerProbe(t *testing.T, c *Controller, want uint64) (post func() int, noticed func(i int, within time.Duration) bool) {
	q := c.admin
	post = func() int {
		t.Helper()
		i, err := q.acquire(testCtx(t))
		require.NoError(t, err)
		nvme.NewAdmin(q.cmd(i), nvme.AdminAER, 0, 0, 0, 0)
		require.NoError(t, q.submit(i, 0))
		return i
	}
	noticed = func(i int, within time.Duration) bool {
		t.Helper()
		select {
		case <-q.slots[i].done:
			require.Equal(t, nvme.StatusSuccess, q.slots[i].st)
			require.EqualValues(t, want, q.slots[i].res, "the event")
			q.releaseSlot(i)
			return true
		case <-time.After(within):
			return false
		}
	}
	return post, noticed
}

// anaTarget serves one subsystem with namespace 1 (group 1) and namespace
// 2 (group 5) on two ports: port 1 with nvmet's defaults (group 1
// optimized, group 5 inaccessible), port 2 with group 1 non-optimized and
// group 5 optimized.
func anaTarget(t *testing.T) (tg *target.Target, sub *target.Subsystem, p1, p2 *target.Port) {
	t.Helper()
	sub, err := target.NewSubsystem(testNQN)
	require.NoError(t, err)
	_, err = sub.AddNamespace(target.NewMemBackend(1<<20), 512)
	require.NoError(t, err)
	_, err = sub.AddNamespaceConfig(target.NewMemBackend(1<<20), target.NamespaceConfig{ANAGroup: 5})
	require.NoError(t, err)
	tg, err = target.New(target.Config{Logf: t.Logf}, sub)
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	p1, err = tg.ListenPort(context.Background(), "tcp", "127.0.0.1:0", target.PortConfig{Subsystems: []string{sub.NQN}})
	require.NoError(t, err)
	p2, err = tg.ListenPort(context.Background(), "tcp", "127.0.0.1:0", target.PortConfig{Subsystems: []string{sub.NQN},
		ANA: map[uint32]nvme.ANAState{1: nvme.ANANonOptimized, 5: nvme.ANAOptimized}})
	require.NoError(t, err)
	return tg, sub, p1, p2
}

// anaHosts connects a host (one I/O queue) through each of anaTarget's
// ports.
func anaHosts(t *testing.T) (context.Context, *target.Subsystem, *target.Port, *target.Port, *Controller, *Controller) {
	t.Helper()
	checkRoutines(t)
	ctx := testCtx(t)
	_, sub, p1, p2 := anaTarget(t)
	a := connectHost(t, p1.Addr().String(), testNQN, Config{IOQueues: 1})
	b := connectHost(t, p2.Addr().String(), testNQN, Config{IOQueues: 1})
	return ctx, sub, p1, p2, a, b
}

func requireStatus(t *testing.T, err error, st nvme.Status) {
	t.Helper()
	var se *nvme.StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, st, se.Status, "%v", err)
}

// slowBackend is a MemBackend whose writes take a while, and which
// remembers when the last write ended and the first Flush began.
type slowBackend struct {
	*target.MemBackend
	delay    time.Duration
	mu       sync.Mutex
	writes   int
	inFlight int
	lastEnd  time.Time
	flushAt  time.Time
}

func (b *slowBackend) WriteAt(p []byte, off int64) (int, error) {
	b.mu.Lock()
	b.inFlight++
	b.mu.Unlock()
	time.Sleep(b.delay)
	n, err := b.MemBackend.WriteAt(p, off)
	b.mu.Lock()
	b.inFlight--
	b.writes++
	b.lastEnd = time.Now()
	b.mu.Unlock()
	return n, err
}

func (b *slowBackend) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.flushAt.IsZero() {
		b.flushAt = time.Now()
	}
	return nil
}

// fuaBackend records how the target writes: plainly, durably, zeroing,
// and its flushes (onFlush, if set, is called in each; failFlush fails
// them). With noFUA it is a Backend without WriteAtFUA.
type fuaBackend struct {
	*target.MemBackend
	plain, fua, zeroes, flushes atomic.Int64
	failFlush                   atomic.Bool
	onFlush                     atomic.Pointer[func()]
}

func (b *fuaBackend) Zero(off, n int64, deallocate bool) error {
	b.zeroes.Add(1)
	return b.MemBackend.Zero(off, n, deallocate)
}

func (b *fuaBackend) WriteAt(p []byte, off int64) (int, error) {
	b.plain.Add(1)
	return b.MemBackend.WriteAt(p, off)
}

func (b *fuaBackend) WriteAtFUA(p []byte, off int64) (int, error) {
	b.fua.Add(1)
	return b.MemBackend.WriteAt(p, off)
}

func (b *fuaBackend) Flush() error {
	b.flushes.Add(1)
	if f := b.onFlush.Load(); f != nil {
		(*f)()
	}
	if b.failFlush.Load() {
		return errors.New("the disk is gone")
	}
	return nil
}

// hostDev is blkstress's Device over a host's namespace.
type hostDev struct {
	ctx context.Context
	ns  blockNS
}

func (d hostDev) Size() int64 { return d.ns.Size() }

func (d hostDev) ReadAt(p []byte, off int64) (int, error) { return d.ns.ReadAtContext(d.ctx, p, off) }

func (d hostDev) WriteAt(p []byte, off int64) (int, error) { return d.ns.WriteAtContext(d.ctx, p, off) }

func (d hostDev) Zero(off, n int64) error { return d.ns.WriteZeroes(d.ctx, off, n) }

func (d hostDev) Flush() error { return d.ns.Flush(d.ctx) }

func (d hostDev) Alloc(n int) []byte { return make([]byte, n) }

// gatedTarget returns a target over a gateWriteBackend of 1 MiB that
// holds the first write at off, and opens it when the test ends (before
// the target closes).
func gatedTarget(t *testing.T, off int64) (*gateWriteBackend, *target.Target, string) {
	be := &gateWriteBackend{MemBackend: target.NewMemBackend(1 << 20), off: off,
		entered: make(chan struct{}, 1), release: make(chan struct{})}
	tg, _, addr := newBackendTarget(t, be, target.Config{})
	t.Cleanup(be.open)
	return be, tg, addr
}

// stuckWrite has c write 4 KiB at off, and returns once be holds the
// write in the Backend: its namespace, and the write's result to come.
func stuckWrite(t *testing.T, be *gateWriteBackend, c *Controller, off int64) (*Namespace, <-chan error) {
	t.Helper()
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	wrote := make(chan error, 1)
	go func() {
		_, err := ns.WriteAt(bytes.Repeat([]byte{1}, 4096), off)
		wrote <- err
	}()
	<-be.entered
	return ns, wrote
}

// stillWaiting fails the test if ch yields within 300 ms: what must wait
// for a write held in the Backend, which unblock lets go on failing.
func stillWaiting[T any](t *testing.T, ch <-chan T, unblock func(), what string) {
	t.Helper()
	select {
	case v := <-ch:
		unblock()
		t.Fatalf("%s (%v) while a write was still in the Backend", what, v)
	case <-time.After(300 * time.Millisecond):
	}
}

// resvHosts serves namespace 1 with reservations and namespace 2 without,
// and connects host a twice (one host, two controllers), b and c.
func resvHosts(t *testing.T) (ctx context.Context, a, a2, b, c *Namespace, ids [3][16]byte) {
	t.Helper()
	return resvHostsWith(t, func(string) Config { return Config{IOQueues: 1} })
}

// resvHostsWith is resvHosts with the configuration cfg gives each of
// a, a2, b and c (but for its HostID).
func resvHostsWith(t *testing.T, cfg func(name string) Config) (ctx context.Context, a, a2, b, c *Namespace, ids [3][16]byte) {
	t.Helper()
	checkRoutines(t)
	ctx = testCtx(t)
	_, _, addr := serveNamespaces(t, target.NamespaceConfig{Reservations: true}, target.NamespaceConfig{})
	open := func(name string, id [16]byte) *Namespace {
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
func canWrite(t *testing.T, n *Namespace) bool {
	t.Helper()
	_, err := n.WriteAt(make([]byte, 512), 0)
	return resvOK(t, err)
}

func canRead(t *testing.T, n *Namespace) bool {
	t.Helper()
	_, err := n.ReadAt(make([]byte, 512), 0)
	return resvOK(t, err)
}

func report(t *testing.T, ctx context.Context, n *Namespace) nvme.ReservationStatus {
	t.Helper()
	st, err := n.ReservationReport(ctx)
	require.NoError(t, err)
	return st
}

// ptplTarget serves a namespace with reservations and reservation file
// file, and connects hosts a, b and c (host IDs 0xaa, 0xbb, 0xcc); stop
// closes the target and its hosts, as a power loss would end them.
func ptplTarget(t *testing.T, file string) (ctx context.Context, a, b, c *Namespace, stop func()) {
	t.Helper()
	ctx, _, a, b, c, stop = ptplTargetSub(t, file)
	return ctx, a, b, c, stop
}

// gateWriteBackend holds the first write at off (with reads, the first
// read) until release is closed, once it has said so on entered.
type gateWriteBackend struct {
	*target.MemBackend
	off              int64
	reads            bool
	entered, release chan struct{}
	once, openOnce   sync.Once
}

func (b *gateWriteBackend) open() { b.openOnce.Do(func() { close(b.release) }) }

// gate holds the first call at b.off of the kind b gates.
func (b *gateWriteBackend) gate(read bool, off int64) {
	gated := false
	if off == b.off && read == b.reads {
		b.once.Do(func() { gated = true })
	}
	if gated {
		b.entered <- struct{}{}
		<-b.release
	}
}

func (b *gateWriteBackend) WriteAt(p []byte, off int64) (int, error) {
	b.gate(false, off)
	return b.MemBackend.WriteAt(p, off)
}

func (b *gateWriteBackend) ReadAt(p []byte, off int64) (int, error) {
	b.gate(true, off)
	return b.MemBackend.ReadAt(p, off)
}

// quiesceHost is the host of the quiesce tests, the same for each of its
// controllers.
var quiesceHost = Config{IOQueues: 1, HostID: [16]byte{0xc0, 0xff, 0xee},
	HostNQN: "nqn.2014-08.org.nvmexpress:uuid:c0ffee00-0000-4000-8000-000000000000"}

// ptplTargetSub is ptplTarget with the subsystem.
func ptplTargetSub(t *testing.T, file string) (ctx context.Context, sub *target.Subsystem, a, b, c *Namespace, stop func()) {
	t.Helper()
	ctx = testCtx(t)
	sub, tg, addr := serveNamespaces(t, target.NamespaceConfig{ID: 1, Reservations: true, ReservationFile: file})
	var ctrls []*Controller
	open := func(id byte) *Namespace {
		c, err := Connect(ctx, "tcp", addr, testNQN, Config{IOQueues: 1, HostID: [16]byte{id}})
		require.NoError(t, err)
		ctrls = append(ctrls, c)
		n, err := c.Namespace(ctx, 1)
		require.NoError(t, err)
		return n
	}
	a, b, c = open(0xaa), open(0xbb), open(0xcc)
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		for _, c := range ctrls {
			c.Close()
		}
		tg.Close()
	}
	t.Cleanup(stop)
	return ctx, sub, a, b, c, stop
}

func resvOK(t *testing.T, err error) bool {
	t.Helper()
	if err == nil {
		return true
	}
	requireStatus(t, err, nvme.StatusReservationConflict|nvme.DNR)
	return false
}

// blockNS is what Namespace and MultipathNamespace both offer.
type blockNS interface {
	Size() int64
	ReadAtContext(ctx context.Context, p []byte, off int64) (int, error)
	WriteAtContext(ctx context.Context, p []byte, off int64) (int, error)
	WriteZeroes(ctx context.Context, off, length int64) error
	Flush(ctx context.Context) error
}
