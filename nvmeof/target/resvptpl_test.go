package target

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

// ptplTarget serves a namespace with reservations and reservation file
// file, and connects hosts a, b and c (host IDs 0xaa, 0xbb, 0xcc); stop
// closes the target and its hosts, as a power loss would end them.
func ptplTarget(t *testing.T, file string) (ctx context.Context, a, b, c *host.Namespace, stop func()) {
	t.Helper()
	ctx, _, a, b, c, stop = ptplTargetSub(t, file)
	return ctx, a, b, c, stop
}

// ptplTargetSub is ptplTarget with the subsystem.
func ptplTargetSub(t *testing.T, file string) (ctx context.Context, sub *Subsystem, a, b, c *host.Namespace, stop func()) {
	t.Helper()
	ctx = testCtx(t)
	sub, tg, addr := serveNamespaces(t, NamespaceConfig{ID: 1, Reservations: true, ReservationFile: file})
	var ctrls []*host.Controller
	open := func(id byte) *host.Namespace {
		c, err := host.Connect(ctx, "tcp", addr, testNQN, host.Config{IOQueues: 1, HostID: [16]byte{id}})
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

// Persist Through Power Loss: with PTPL on, the registrations, the
// reservation and its generation outlive the target (closed and served
// again from the same file, as a restart after a power loss); the fence
// holds after the restart. With PTPL off again they do not.
func TestReservationsPersist(t *testing.T) {
	checkRoutines(t)
	file := filepath.Join(t.TempDir(), "ns1.resv")
	ctx, a, b, c, stop := ptplTarget(t, file)
	require.EqualValues(t, rescapAll|nvme.RESCAPPTPL, a.Info.RESCAP)
	on, err := a.Persistence(ctx)
	require.NoError(t, err)
	require.False(t, on, "off until a host asks")
	require.NoError(t, a.RegisterKey(ctx, 0xa))
	require.NoError(t, b.RegisterKey(ctx, 0xb))
	require.NoError(t, a.Reserve(ctx, 0xa, nvme.ResvWriteExclusiveRegsOnly))
	require.NoError(t, b.SetPersistence(ctx, true))
	on, err = c.Persistence(ctx)
	require.NoError(t, err)
	require.True(t, on, "the namespace's, whichever host asks")
	require.NoError(t, b.Preempt(ctx, 0xb, 0xa, nvme.ResvWriteExclusiveRegsOnly, true)) // a fenced
	before := report(t, ctx, c)
	require.True(t, before.PTPL)
	stop()

	ctx, a, b, c, _ = ptplTarget(t, file)
	after := report(t, ctx, c)
	require.Equal(t, before, after, "the same registrants, holder, type and generation")
	require.Equal(t, nvme.ResvWriteExclusiveRegsOnly, after.Type)
	require.Len(t, after.Registrants, 1)
	require.Equal(t, [16]byte{0xbb}, after.Registrants[0].HostID)
	require.False(t, canWrite(t, a), "still fenced after the restart")
	require.True(t, canWrite(t, b))
	require.True(t, canRead(t, a))

	require.NoError(t, c.SetPersistence(ctx, false))
	require.False(t, report(t, ctx, c).PTPL)
	_, _, _, c, _ = ptplTarget(t, file)
	after = report(t, ctx, c)
	require.Empty(t, after.Registrants, "not kept: PTPL was off")
	require.Equal(t, nvme.ResvNone, after.Type)
}

// A reservation file that does not parse, or names a holder that is not
// a registrant, stops the namespace from being added: its fences must
// not be dropped silently.
func TestReservationFileBad(t *testing.T) {
	dir := t.TempDir()
	sub, err := NewSubsystem(testNQN)
	require.NoError(t, err)
	for _, body := range []string{
		`{"ptpl": true, "registrants": [`,
		`{"ptpl": true, "type": 1, "holder": "aa000000000000000000000000000000"}`,
		`{"ptpl": true, "registrants": [{"hostid": "aa", "key": 1}]}`,
		`{"ptpl": true, "registrants": [{"hostid": "aa000000000000000000000000000000", "key": 1},
			{"hostid": "aa000000000000000000000000000000", "key": 2}]}`,
		`{"ptpl": true, "type": 9, "holder": "aa000000000000000000000000000000",
			"registrants": [{"hostid": "aa000000000000000000000000000000", "key": 1}]}`,
	} {
		f := filepath.Join(dir, "bad.resv")
		require.NoError(t, os.WriteFile(f, []byte(body), 0o644))
		_, err := sub.AddNamespaceConfig(NewMemBackend(1<<20), NamespaceConfig{ID: 1, Reservations: true, ReservationFile: f})
		require.Error(t, err, "%s", body)
	}
	_, err = sub.AddNamespaceConfig(NewMemBackend(1<<20), NamespaceConfig{ID: 1, ReservationFile: filepath.Join(dir, "x")})
	require.Error(t, err, "a file without reservations")
}

// One file is one namespace's: a second namespace of the subsystem with
// it is refused; once the first is removed, a namespace added in its
// place reads what it wrote, and the removed one writes no more.
func TestReservationFileOneNamespace(t *testing.T) {
	checkRoutines(t)
	file := filepath.Join(t.TempDir(), "ns1.resv")
	ctx, sub, a, b, _, _ := ptplTargetSub(t, file)
	_, err := sub.AddNamespaceConfig(NewMemBackend(1<<20), NamespaceConfig{ID: 2, Reservations: true, ReservationFile: file})
	require.ErrorContains(t, err, "is namespace 1's")
	require.NoError(t, a.RegisterKey(ctx, 0xa))
	require.NoError(t, a.SetPersistence(ctx, true))
	ns1 := sub.Namespace(1)
	require.NoError(t, sub.RemoveNamespace(ctx, 1))
	_, err = sub.AddNamespaceConfig(NewMemBackend(1<<20), NamespaceConfig{ID: 1, Reservations: true, ReservationFile: file})
	require.NoError(t, err)
	st := report(t, ctx, b)
	require.Len(t, st.Registrants, 1, "read from the file")
	// The old namespace's state can no longer reach the file.
	st0, err := ns1.resv.register([16]byte{0xcc}, nvme.ResvRegister, make([]byte, 16))
	require.ErrorIs(t, err, errDetached)
	require.Equal(t, nvme.StatusInternalError, st0)
	require.Len(t, report(t, ctx, b).Registrants, 1)
}

// A reservation file whose directory cannot take a new file is refused
// when the namespace is added, not at the first registration.
func TestReservationFileUnwritable(t *testing.T) {
	sub, err := NewSubsystem(testNQN)
	require.NoError(t, err)
	_, err = sub.AddNamespaceConfig(NewMemBackend(1<<20), NamespaceConfig{Reservations: true,
		ReservationFile: filepath.Join(t.TempDir(), "missing", "ns1.resv")})
	require.ErrorContains(t, err, "cannot be written")
}
