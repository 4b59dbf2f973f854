package target

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/internal/testhook"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

// slowWriteBackend holds each plain write until release is closed, once
// it has said so on entered.
type slowWriteBackend struct {
	*fuaBackend
	entered, release chan struct{}
	landed           atomic.Bool
}

func (b *slowWriteBackend) WriteAt(p []byte, off int64) (int, error) {
	b.entered <- struct{}{}
	<-b.release
	n, err := b.fuaBackend.WriteAt(p, off)
	b.landed.Store(true)
	return n, err
}

// A write already running when a host protects the namespace lands before
// Set Features returns (and before its flush), never after: protection
// waits it out, and the write, admitted before, succeeds.
func TestWriteProtectWaitsForRunningWrite(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	be := &slowWriteBackend{
		fuaBackend: &fuaBackend{MemBackend: NewMemBackend(1 << 20)},
		entered:    make(chan struct{}, 1),
		release:    make(chan struct{}),
	}
	_, sub, addr := newBackendTarget(t, be, Config{})
	a := connectHost(t, addr, testNQN, host.Config{IOQueues: 1})
	n, err := a.Namespace(ctx, 1)
	require.NoError(t, err)

	p := bytes.Repeat([]byte{7}, 4096)
	wrote := make(chan error, 1)
	go func() {
		_, err := n.WriteAt(p, 4096)
		wrote <- err
	}()
	<-be.entered // the write runs in the Backend

	var landedAtFlush atomic.Bool
	atFlush := func() { landedAtFlush.Store(be.landed.Load()) }
	be.onFlush.Store(&atFlush)
	protected := make(chan error, 1)
	go func() { protected <- n.SetWriteProtect(ctx, true) }()
	stillWaiting(t, protected, func() { close(be.release) }, "Set Features returned")
	ns := sub.Namespace(1)
	settling, reported := ns.settling.Load() != nil, ns.WriteProtected()
	close(be.release)
	require.True(t, settling, "being decided: new writes wait for the outcome")
	require.False(t, reported, "reported as before until decided")
	require.NoError(t, <-wrote, "the write admitted before protection completes")
	require.NoError(t, <-protected)
	require.True(t, landedAtFlush.Load(), "the running write landed before the flush")
	got := make([]byte, 4096)
	_, err = n.ReadAt(got, 4096)
	require.NoError(t, err)
	require.Equal(t, p, got)
	_, err = n.WriteAt(p, 8192)
	requireStatus(t, err, nvme.StatusNSWriteProtected|nvme.DNR)
}

// Set Features 84h while other hosts connect and disconnect: the notice
// goes to the controllers of the moment (it listed them without the
// subsystem's lock: the race detector, and Go's map checks, caught it).
func TestWriteProtectWhileHostsComeAndGo(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	_, _, addr := newTestTarget(t, 1<<20, Config{})
	a := connectHost(t, addr, testNQN, host.Config{IOQueues: 1})
	na, err := a.Namespace(ctx, 1)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		for range 10 {
			c, err := host.Connect(ctx, "tcp", addr, testNQN, host.Config{IOQueues: 1})
			if err != nil {
				done <- err
				return
			}
			c.Close()
		}
		done <- nil
	}()
	for on := true; ; on = !on {
		require.NoError(t, na.SetWriteProtect(ctx, on))
		select {
		case err := <-done:
			require.NoError(t, err)
			require.NoError(t, na.SetWriteProtect(ctx, false))
			return
		default:
		}
	}
}

// holdFlushes holds be's flushes (the protection's, and the controllers'
// at shutdown) until open is called, or the test ends; entered says that
// the first has begun.
func holdFlushes(t *testing.T, be *fuaBackend) (entered <-chan struct{}, open func()) {
	in, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(release) }) }
	t.Cleanup(open)
	atFlush := func() {
		select {
		case in <- struct{}{}:
		default:
		}
		<-release
	}
	be.onFlush.Store(&atFlush)
	return in, open
}

// A write that comes while protection is being turned on waits for the
// outcome: refused if the namespace ends up protected, written if turning
// protection on fails (its flush, or a write that hangs). It was refused,
// with DNR, either way: a failed protection made a host's write fail for
// good on a namespace that was never protected.
func TestWriteProtectThatFailsRefusesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail bool
	}{{"flush fails", true}, {"protected", false}} {
		t.Run(tc.name, func(t *testing.T) {
			checkRoutines(t)
			ctx := testCtx(t)
			be := &fuaBackend{MemBackend: NewMemBackend(1 << 20)}
			_, sub, addr := newBackendTarget(t, be, Config{})
			a := connectHost(t, addr, testNQN, host.Config{IOQueues: 1})
			b := connectHost(t, addr, testNQN, host.Config{IOQueues: 1, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:0b000000-0000-4000-8000-00000000000b"})
			na, err := a.Namespace(ctx, 1)
			require.NoError(t, err)
			nb, err := b.Namespace(ctx, 1)
			require.NoError(t, err)
			entered, open := holdFlushes(t, be)
			be.failFlush.Store(tc.fail)
			protected := make(chan error, 1)
			go func() { protected <- na.SetWriteProtect(ctx, true) }()
			<-entered // protection is being decided: its flush runs

			p := bytes.Repeat([]byte{9}, 4096)
			wrote := make(chan error, 1)
			go func() {
				_, err := nb.WriteAt(p, 8192)
				wrote <- err
			}()
			stillWaiting(t, wrote, open, "the other host's write was answered")
			require.False(t, sub.Namespace(1).WriteProtected(), "reported as before until decided")
			open()
			got := make([]byte, 4096)
			if tc.fail {
				requireStatus(t, <-protected, nvme.StatusWriteFault|nvme.DNR)
				require.NoError(t, <-wrote, "written: the namespace was not protected")
				_, err = nb.ReadAt(got, 8192)
				require.NoError(t, err)
				require.Equal(t, p, got)
				return
			}
			require.NoError(t, <-protected)
			requireStatus(t, <-wrote, nvme.StatusNSWriteProtected|nvme.DNR)
			_, err = nb.ReadAt(got, 8192)
			require.NoError(t, err)
			require.Equal(t, make([]byte, 4096), got, "nothing written")
		})
	}
}

// The same when protection fails because a running write hangs past
// quiesceWait: a write that came meanwhile is written.
func TestWriteProtectTimeoutRefusesNothing(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	old := quiesceWait.Swap(int64(time.Second))
	t.Cleanup(func() { quiesceWait.Store(old) })
	be, _, addr := gatedTarget(t, 4096)
	c := connectHost(t, addr, testNQN, quiesceHost)
	ns, stuck := stuckWrite(t, be, c, 4096)
	other := connectHost(t, addr, testNQN, host.Config{IOQueues: 1})
	on, err := other.Namespace(ctx, 1)
	require.NoError(t, err)
	protected := make(chan error, 1)
	go func() { protected <- ns.SetWriteProtect(ctx, true) }()
	p := bytes.Repeat([]byte{3}, 4096)
	wrote := make(chan error, 1)
	go func() {
		_, err := on.WriteAt(p, 8192)
		wrote <- err
	}()
	requireStatus(t, <-protected, nvme.StatusCommandInterrupted)
	require.NoError(t, <-wrote, "written: the namespace was not protected")
	be.open()
	require.NoError(t, <-stuck)
}

// A write that waits for a protection whose flush hangs gives up after
// quiesceWait with Command Interrupted, without DNR (the host tries
// again), instead of hanging with the flush.
func TestWriteProtectFlushHangs(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	shortQuiesce(t)
	be := &fuaBackend{MemBackend: NewMemBackend(1 << 20)}
	_, sub, addr := newBackendTarget(t, be, Config{})
	a := connectHost(t, addr, testNQN, host.Config{IOQueues: 1})
	na, err := a.Namespace(ctx, 1)
	require.NoError(t, err)
	entered, open := holdFlushes(t, be)
	protected := make(chan error, 1)
	go func() { protected <- na.SetWriteProtect(ctx, true) }()
	<-entered
	_, err = na.WriteAt(bytes.Repeat([]byte{4}, 4096), 0)
	requireStatus(t, err, nvme.StatusCommandInterrupted)
	var se *nvme.StatusError
	require.ErrorAs(t, err, &se)
	require.Zero(t, se.Status&nvme.DNR, "no DNR: the host may try again")
	open()
	require.NoError(t, <-protected)
	require.True(t, sub.Namespace(1).WriteProtected())
}

// Write Protect Until Power Cycle: protected as by state 1 (flushed,
// writes refused, NSATTR, the hosts told), Get Features says 2, and no
// Set Features changes it, not even to 1 (Feature Not Changeable, DNR);
// a restarted target (a power cycle: the namespace anew over the same
// backend) starts unprotected with the data kept.
func TestWriteProtectUntilPowerCycle(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	be := &fuaBackend{MemBackend: NewMemBackend(1 << 20)}
	tg, sub, addr := newBackendTarget(t, be, Config{})
	a := connectHost(t, addr, testNQN, host.Config{IOQueues: 1, WatchNamespaces: true})
	na, err := a.Namespace(ctx, 1)
	require.NoError(t, err)
	p := bytes.Repeat([]byte{7}, 4096)
	_, err = na.WriteAt(p, 0)
	require.NoError(t, err)

	require.NoError(t, na.SetWriteProtectState(ctx, nvme.WPUntilPowerCycle))
	require.Equal(t, int64(1), be.flushes.Load(), "flushed")
	require.Equal(t, nvme.WPUntilPowerCycle, sub.Namespace(1).WriteProtection())
	require.True(t, sub.Namespace(1).WriteProtected())
	changed, err := a.WaitNamespaceChange(ctx)
	require.NoError(t, err)
	require.Equal(t, []uint32{1}, changed)
	st, err := na.WriteProtection(ctx)
	require.NoError(t, err)
	require.Equal(t, nvme.WPUntilPowerCycle, st)
	on, err := na.WriteProtected(ctx)
	require.NoError(t, err)
	require.True(t, on)
	na2, err := a.Namespace(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, uint8(nvme.NSATTRWriteProtect), na2.Info.NSATTR)
	_, err = na.WriteAt(p, 4096)
	requireStatus(t, err, nvme.StatusNSWriteProtected|nvme.DNR)

	for _, s := range []nvme.WPState{nvme.WPNone, nvme.WPOn, nvme.WPUntilPowerCycle} {
		requireStatus(t, na.SetWriteProtectState(ctx, s), nvme.StatusFeatureNotChangeable|nvme.DNR)
	}
	requireStatus(t, na.SetWriteProtect(ctx, false), nvme.StatusFeatureNotChangeable|nvme.DNR)
	requireStatus(t, na.SetWriteProtectState(ctx, nvme.WPPermanent), nvme.StatusInvalidField|nvme.DNR)
	require.Equal(t, nvme.WPUntilPowerCycle, sub.Namespace(1).WriteProtection(), "unchanged")
	got := make([]byte, 4096)
	_, err = na.ReadAt(got, 0)
	require.NoError(t, err, "reads go on")
	require.Equal(t, p, got)

	// The power cycle.
	require.NoError(t, a.Close())
	require.NoError(t, tg.Close())
	_, sub, addr = newBackendTarget(t, be, Config{})
	require.Equal(t, nvme.WPNone, sub.Namespace(1).WriteProtection())
	b := connectHost(t, addr, testNQN, host.Config{IOQueues: 1})
	nb, err := b.Namespace(ctx, 1)
	require.NoError(t, err)
	require.Zero(t, nb.Info.NSATTR)
	_, err = nb.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, p, got, "the data kept")
	_, err = nb.WriteAt(p, 4096)
	require.NoError(t, err, "writable")
	require.NoError(t, nb.SetWriteProtect(ctx, true), "and protectable again")
	require.Equal(t, "write protect until power cycle", nvme.WPUntilPowerCycle.String())
}

// Namespace write protection (feature 84h), as nvmet offers it: one host
// sets it for every host; the target flushes first, tells the
// controllers (Namespace Attribute Changed), reports it in NSATTR and
// Get Features, and refuses writes, Write Zeroes and Deallocate with
// Namespace is Write Protected (not retried: DNR) while reads and
// flushes go on; state 3 is refused; turned off, writes run
// again. Set Features Host Identifier is a Command Sequence Error over
// fabrics, and Get Features reads the host's 128-bit ID with EXHID only.
func TestWriteProtect(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	be := &fuaBackend{MemBackend: NewMemBackend(1 << 20)}
	_, sub, addr := newBackendTarget(t, be, Config{})
	hostID := [16]byte{0xa, 1, 2, 3}
	a := connectHost(t, addr, testNQN, host.Config{IOQueues: 1, WatchNamespaces: true, HostID: hostID})
	b := connectHost(t, addr, testNQN, host.Config{IOQueues: 1, WatchNamespaces: true, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:0b000000-0000-4000-8000-00000000000b"})
	require.Equal(t, uint8(nvme.NWPCWriteProtect|nvme.NWPCUntilPowerCycle), a.Info.NWPC, "Identify Controller's NWPC")
	na, err := a.Namespace(ctx, 1)
	require.NoError(t, err)
	nb, err := b.Namespace(ctx, 1)
	require.NoError(t, err)
	p := bytes.Repeat([]byte{5}, 4096)
	_, err = nb.WriteAt(p, 0)
	require.NoError(t, err)
	on, err := na.WriteProtected(ctx)
	require.NoError(t, err)
	require.False(t, on)

	// A flush that fails leaves the namespace as it was.
	be.failFlush.Store(true)
	requireStatus(t, na.SetWriteProtect(ctx, true), nvme.StatusWriteFault|nvme.DNR)
	require.False(t, sub.Namespace(1).WriteProtected(), "not protected: its data could not be flushed")
	be.failFlush.Store(false)

	be.flushes.Store(0)
	var protectedAtFlush atomic.Bool // writes held for the outcome
	atFlush := func() { protectedAtFlush.Store(sub.Namespace(1).settling.Load() != nil) }
	be.onFlush.Store(&atFlush)
	require.NoError(t, na.SetWriteProtect(ctx, true))
	be.onFlush.Store(nil)
	require.Equal(t, int64(1), be.flushes.Load(), "flushed")
	require.True(t, protectedAtFlush.Load(), "flushed once protected: no write lands after the flush")
	require.True(t, sub.Namespace(1).WriteProtected())
	changed, err := b.WaitNamespaceChange(ctx)
	require.NoError(t, err)
	require.Equal(t, []uint32{1}, changed, "the other host told")
	changed, err = a.WaitNamespaceChange(ctx)
	require.NoError(t, err)
	require.Equal(t, []uint32{1}, changed, "the setting host told too")

	// Protected again, a flush that fails leaves it protected.
	be.failFlush.Store(true)
	requireStatus(t, nb.SetWriteProtect(ctx, true), nvme.StatusWriteFault|nvme.DNR)
	be.failFlush.Store(false)
	require.True(t, sub.Namespace(1).WriteProtected(), "still protected")
	nb2, err := b.Namespace(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, uint8(nvme.NSATTRWriteProtect), nb2.Info.NSATTR, "NSATTR")
	on, err = nb.WriteProtected(ctx)
	require.NoError(t, err)
	require.True(t, on)

	writes := be.plain.Load() + be.fua.Load() + be.zeroes.Load()
	_, err = nb.WriteAt(p, 4096)
	requireStatus(t, err, nvme.StatusNSWriteProtected|nvme.DNR)
	requireStatus(t, nb.WriteZeroes(ctx, 0, 4096), nvme.StatusNSWriteProtected|nvme.DNR)
	requireStatus(t, nb.Deallocate(ctx, 0, 4096), nvme.StatusNSWriteProtected|nvme.DNR)
	_, err = na.WriteAtFUA(ctx, p, 0)
	requireStatus(t, err, nvme.StatusNSWriteProtected|nvme.DNR)
	require.Equal(t, writes, be.plain.Load()+be.fua.Load()+be.zeroes.Load(), "nothing written, zeroed or deallocated")
	got := make([]byte, 4096)
	_, err = nb.ReadAt(got, 0)
	require.NoError(t, err, "reads go on")
	require.Equal(t, p, got)
	require.NoError(t, nb.Flush(ctx), "flushes go on")

	for _, v := range []uint32{3, 4} {
		_, err = a.AdminCommand(ctx, func(cmd nvme.Command) { nvme.NewAdmin(cmd, nvme.AdminSetFeatures, 0, 1, nvme.FeatWriteProtect, v) }, nil)
		requireStatus(t, err, nvme.StatusInvalidField|nvme.DNR)
	}
	_, err = a.AdminCommand(ctx, func(cmd nvme.Command) { nvme.NewAdmin(cmd, nvme.AdminSetFeatures, 0, 9, nvme.FeatWriteProtect, 1) }, nil)
	requireStatus(t, err, nvme.StatusInvalidField|nvme.DNR) // inactive
	_, err = a.AdminCommand(ctx, func(cmd nvme.Command) { nvme.NewAdmin(cmd, nvme.AdminSetFeatures, 0, 0, nvme.FeatWriteProtect, 1) }, nil)
	requireStatus(t, err, nvme.StatusInvalidNamespace|nvme.DNR)

	require.NoError(t, nb.SetWriteProtect(ctx, false))
	changed, err = b.WaitNamespaceChange(ctx)
	require.NoError(t, err)
	require.Equal(t, []uint32{1}, changed)
	_, err = a.WaitNamespaceChange(ctx)
	require.NoError(t, err)
	_, err = na.WriteAt(p, 4096)
	require.NoError(t, err, "writable again")
	nb2, err = b.Namespace(ctx, 1)
	require.NoError(t, err)
	require.Zero(t, nb2.Info.NSATTR)

	// A write whose data was moving when the namespace was protected is
	// refused when it runs.
	hook := func(_ uint16, cmd nvme.Command) nvme.Status {
		if cmd.Opcode() == nvme.IOWrite {
			sub.Namespace(1).wp.Store(true)
		}
		return nvme.StatusSuccess
	}
	testhook.IOStatus.Store(&hook)
	t.Cleanup(func() { testhook.IOStatus.Store(nil) })
	_, err = na.WriteAt(p, 8192)
	requireStatus(t, err, nvme.StatusNSWriteProtected|nvme.DNR)
	testhook.IOStatus.Store(nil)
	require.NoError(t, na.SetWriteProtect(ctx, false))

	// Through Multipath (one path).
	m := connectMultipath(t, addr)
	mn, err := m.Namespace(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, mn.SetWriteProtect(ctx, true))
	on, err = mn.WriteProtected(ctx)
	require.NoError(t, err)
	require.True(t, on)
	require.True(t, sub.Namespace(1).WriteProtected())
	require.NoError(t, mn.SetWriteProtect(ctx, false))
	on, err = mn.WriteProtected(ctx)
	require.NoError(t, err)
	require.False(t, on)

	// Identify CNS 06h for the NVM command set: zeros, as nvmet.
	idc := bytes.Repeat([]byte{0xff}, nvme.IdentifySize)
	require.NoError(t, a.Identify(ctx, nvme.CNSIOCtrlCSI, 0, idc))
	require.Equal(t, make([]byte, nvme.IdentifySize), idc)

	// The host identifier feature.
	_, err = a.SetFeatures(ctx, nvme.FeatHostID, 0)
	requireStatus(t, err, nvme.StatusCommandSequenceError|nvme.DNR)
	id := make([]byte, 16)
	_, err = a.AdminCommand(ctx, func(cmd nvme.Command) { nvme.NewAdmin(cmd, nvme.AdminGetFeatures, 0, 0, nvme.FeatHostID, 1) }, id)
	require.NoError(t, err)
	require.Equal(t, hostID[:], id, "the host ID it connected with")
	_, err = a.AdminCommand(ctx, func(cmd nvme.Command) { nvme.NewAdmin(cmd, nvme.AdminGetFeatures, 0, 0, nvme.FeatHostID, 0) }, id)
	requireStatus(t, err, nvme.StatusInvalidField|nvme.DNR)
}
