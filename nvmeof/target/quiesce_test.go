package target

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

// gateWriteBackend holds the first write at off (with reads, the first
// read) until release is closed, once it has said so on entered.
type gateWriteBackend struct {
	*MemBackend
	off              int64
	reads            bool
	entered, release chan struct{}
	once, openOnce   sync.Once
}

// gatedTarget returns a target over a gateWriteBackend of 1 MiB that
// holds the first write at off, and opens it when the test ends (before
// the target closes).
func gatedTarget(t *testing.T, off int64) (*gateWriteBackend, *Target, string) {
	return gatedTargetConfig(t, off, Config{})
}

func gatedTargetConfig(t *testing.T, off int64, cfg Config) (*gateWriteBackend, *Target, string) {
	be := &gateWriteBackend{MemBackend: NewMemBackend(1 << 20), off: off,
		entered: make(chan struct{}, 1), release: make(chan struct{})}
	tg, _, addr := newBackendTarget(t, be, cfg)
	t.Cleanup(be.open)
	return be, tg, addr
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

// abortHost drops every connection of c at once, as a host that resets
// its controller or loses its network does, and waits until the target
// has ended the controller.
func abortHost(t *testing.T, tg *Target, c *host.Controller) {
	t.Helper()
	id := c.ID
	c.Abort()
	require.Eventually(t, func() bool { return tg.controller(id) == nil }, 5*time.Second, 10*time.Millisecond)
	t.Cleanup(func() { c.Close() })
}

// quiesceHost is the host of the quiesce tests, the same for each of its
// controllers.
var quiesceHost = host.Config{IOQueues: 1, HostID: [16]byte{0xc0, 0xff, 0xee},
	HostNQN: "nqn.2014-08.org.nvmexpress:uuid:c0ffee00-0000-4000-8000-000000000000"}

// stuckWrite has c write 4 KiB at off, and returns once be holds the
// write in the Backend: its namespace, and the write's result to come.
func stuckWrite(t *testing.T, be *gateWriteBackend, c *host.Controller, off int64) (*host.Namespace, <-chan error) {
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

// cutWhileWriting has c write at off, which be holds in the Backend, and
// then drops c's connections (abortHost).
func cutWhileWriting(t *testing.T, tg *Target, be *gateWriteBackend, c *host.Controller, off int64) {
	t.Helper()
	_, wrote := stuckWrite(t, be, c, off)
	abortHost(t, tg, c)
	require.Error(t, <-wrote, "the host's write failed with its connection")
}

// A host that drops its connections while a write of its is still in the
// Backend, and connects again, gets its new controller only once that
// write has landed: otherwise the write, sent again on the new controller
// and followed by another to the same blocks, could be overwritten by
// the old copy. A Backend slower than quiesceWait gets the Connect
// Controller Busy without DNR (a reconnecting host tries again later);
// another host does not wait.
func TestConnectWaitsForEndedControllersWrites(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	var logMu sync.Mutex
	var logged []string
	be, tg, addr := gatedTargetConfig(t, 4096, Config{Logf: func(format string, args ...any) {
		logMu.Lock()
		logged = append(logged, fmt.Sprintf(format, args...))
		logMu.Unlock()
	}})
	cfg := quiesceHost
	cutWhileWriting(t, tg, be, connectHost(t, addr, testNQN, cfg), 4096)

	type result struct {
		c   *host.Controller
		err error
	}
	again := make(chan result, 1)
	go func() {
		c, err := host.Connect(ctx, "tcp", addr, testNQN, cfg)
		again <- result{c, err}
	}()
	stillWaiting(t, again, be.open, "the host connected again")
	be.open()
	r := <-again
	require.NoError(t, r.err, "connected once the old write landed")
	b := r.c
	t.Cleanup(func() { b.Close() })
	logMu.Lock()
	require.Contains(t, strings.Join(logged, "\n"), "Connect held", "the wait is in the log")
	logMu.Unlock()
	nb, err := b.Namespace(ctx, 1)
	require.NoError(t, err)
	newer := bytes.Repeat([]byte{2}, 4096)
	_, err = nb.WriteAt(newer, 4096)
	require.NoError(t, err)
	got := make([]byte, 4096)
	_, err = nb.ReadAt(got, 4096)
	require.NoError(t, err)
	require.Equal(t, newer, got, "the newer write stays")

	// A Backend slower than quiesceWait: Controller Busy, no DNR.
	shortQuiesce(t)
	be2, tg2, addr2 := gatedTarget(t, 8192)
	cutWhileWriting(t, tg2, be2, connectHost(t, addr2, testNQN, cfg), 8192)
	_, err = host.Connect(ctx, "tcp", addr2, testNQN, cfg)
	requireStatus(t, err, nvme.StatusConnectCtrlBusy)
	// Another host connects meanwhile.
	other := connectHost(t, addr2, testNQN, host.Config{IOQueues: 1})
	require.NoError(t, other.Close())
	be2.open()
	require.Eventually(t, func() bool {
		d, err := host.Connect(ctx, "tcp", addr2, testNQN, cfg)
		if err == nil {
			d.Close()
		}
		return err == nil
	}, 5*time.Second, 50*time.Millisecond, "the host connects once the write has landed")
}

// A Read of an ended controller still in the Backend holds nothing back:
// a stale Read changes no data, and its data goes nowhere. The host's
// writes on its other path run, and it connects again, while the Read is
// still there.
func TestEndedControllersReadsHoldNothing(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	old := quiesceWait.Swap(int64(time.Minute)) // a wrongful wait would outlast the test's patience
	t.Cleanup(func() { quiesceWait.Store(old) })
	be := &gateWriteBackend{MemBackend: NewMemBackend(1 << 20), off: 4096, reads: true,
		entered: make(chan struct{}, 1), release: make(chan struct{})}
	tg, _, addr := newBackendTarget(t, be, Config{})
	t.Cleanup(be.open)
	a := connectHost(t, addr, testNQN, quiesceHost)
	b := connectHost(t, addr, testNQN, quiesceHost)
	nb, err := b.Namespace(ctx, 1)
	require.NoError(t, err)
	na, err := a.Namespace(ctx, 1)
	require.NoError(t, err)
	read := make(chan error, 1)
	go func() {
		_, err := na.ReadAt(make([]byte, 4096), 4096)
		read <- err
	}()
	<-be.entered
	abortHost(t, tg, a)
	require.Error(t, <-read, "the host's read failed with its connection")

	newer := bytes.Repeat([]byte{2}, 4096)
	done := make(chan error, 1)
	go func() {
		_, err := nb.WriteAt(newer, 4096)
		if err == nil {
			var c *host.Controller
			if c, err = host.Connect(ctx, "tcp", addr, testNQN, quiesceHost); err == nil {
				err = c.Close()
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a write on the other path, or the host's new Connect, waited for the ended controller's Read")
	}
	select {
	case <-be.release:
		t.Fatal("the gate opened early: the test proves nothing")
	default:
	}
	be.open()
	got := make([]byte, 4096)
	_, err = nb.ReadAt(got, 4096)
	require.NoError(t, err)
	require.Equal(t, newer, got)
}

// A host with two controllers (two paths) that loses one while a write
// of its is still in the Backend sends the write down the other path, and
// then writes the same blocks again: those writes wait until the old copy
// has landed, so that the last write stays.
func TestOtherPathWaitsForEndedControllersWrites(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	be, tg, addr := gatedTarget(t, 4096)
	a := connectHost(t, addr, testNQN, quiesceHost)
	b := connectHost(t, addr, testNQN, quiesceHost)
	nb, err := b.Namespace(ctx, 1)
	require.NoError(t, err)
	cutWhileWriting(t, tg, be, a, 4096)

	// Reads on the other path go on meanwhile.
	got := make([]byte, 512)
	_, err = nb.ReadAt(got, 0)
	require.NoError(t, err)
	newer := bytes.Repeat([]byte{2}, 4096)
	done := make(chan error, 1)
	go func() {
		_, err := nb.WriteAt(newer, 4096)
		done <- err
	}()
	stillWaiting(t, done, be.open, "a write on the other path ran")
	be.open()
	require.NoError(t, <-done)
	got = make([]byte, 4096)
	_, err = nb.ReadAt(got, 4096)
	require.NoError(t, err)
	require.Equal(t, newer, got, "the last write stays")
}

// A write stuck in the Backend does not hang Set Features 84h: after
// quiesceWait the namespace stays as it was and the host gets Command
// Interrupted (no DNR), and meanwhile other writes go on.
func TestWriteProtectWithHungWrite(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	shortQuiesce(t)
	be, tg, addr := gatedTarget(t, 4096)
	c := connectHost(t, addr, testNQN, quiesceHost)
	ns, wrote := stuckWrite(t, be, c, 4096)
	requireStatus(t, ns.SetWriteProtect(ctx, true), nvme.StatusCommandInterrupted)
	sub := tg.subs[testNQN]
	require.False(t, sub.Namespace(1).WriteProtected(), "left as it was")
	// Another host's write (its own queue: the stuck write holds its
	// queue's goroutine), while the first is still stuck.
	other := connectHost(t, addr, testNQN, host.Config{IOQueues: 1})
	on, err := other.Namespace(ctx, 1)
	require.NoError(t, err)
	_, err = on.WriteAt(bytes.Repeat([]byte{2}, 4096), 8192)
	require.NoError(t, err, "another write, while the first is still stuck")
	be.open()
	require.NoError(t, <-wrote)
	require.NoError(t, ns.SetWriteProtect(ctx, true), "protected once nothing hangs")
	require.NoError(t, ns.SetWriteProtect(ctx, false))
}

// shortQuiesce makes quiesceWait 200 ms until the test ends.
func shortQuiesce(t *testing.T) {
	old := quiesceWait.Swap(int64(200 * time.Millisecond))
	t.Cleanup(func() { quiesceWait.Store(old) })
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
