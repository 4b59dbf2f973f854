package target

import (
	"context"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

// A port of ListenPort exposes only the subsystems linked to it, as a
// port of Linux's nvmet: its discovery log lists them with its ID, a
// Connect to another subsystem through it is refused, and unlinking a
// subsystem ends the controllers connected to it through that port alone
// and tells the port's discovery controllers.
func TestListenPort(t *testing.T) {
	checkRoutines(t)
	tg, subA, addr := newTestTarget(t, 1<<20, Config{})
	ctx := testCtx(t)
	subB, err := NewSubsystem(testNQN + "-b")
	require.NoError(t, err)
	_, err = subB.AddNamespace(NewMemBackend(1<<20), 512)
	require.NoError(t, err)
	require.NoError(t, tg.AddSubsystem(subB))
	p2, err := tg.ListenPort(context.Background(), "tcp", "127.0.0.1:0", PortConfig{ID: 7, Subsystems: []string{subB.NQN}})
	require.NoError(t, err)
	require.EqualValues(t, 7, p2.ID())
	require.Equal(t, []string{subB.NQN}, p2.Subsystems())
	addr2 := p2.Addr().String()
	_, err = tg.ListenPort(context.Background(), "tcp", "127.0.0.1:0", PortConfig{ID: 7})
	require.ErrorContains(t, err, "port ID 7 in use")

	ents, err := host.Discover(ctx, "tcp", addr2, host.Config{})
	require.NoError(t, err)
	require.Len(t, ents, 1)
	require.Equal(t, subB.NQN, ents[0].SubNQN)
	require.EqualValues(t, 7, ents[0].PortID)
	ents, err = host.Discover(ctx, "tcp", addr, host.Config{})
	require.NoError(t, err)
	require.Len(t, ents, 2, "Listen's port serves every subsystem")
	require.EqualValues(t, 1, ents[0].PortID)

	_, err = host.Connect(ctx, "tcp", addr2, subA.NQN, host.Config{})
	requireStatus(t, err, nvme.StatusConnectInvalidParm|nvme.DNR)
	viaP2 := connectHost(t, addr2, subB.NQN, host.Config{IOQueues: 1})
	viaP1 := connectHost(t, addr, subB.NQN, host.Config{IOQueues: 1})
	h, err := viaP2.Namespace(ctx, 1)
	require.NoError(t, err)
	_, err = h.WriteAt(make([]byte, 512), 0)
	require.NoError(t, err)
	disc := connectHost(t, addr2, nvme.DiscoveryNQN, host.Config{WatchDiscovery: true})
	other := connectHost(t, addr, nvme.DiscoveryNQN, host.Config{WatchDiscovery: true}) // through Listen's port

	require.NoError(t, p2.SetSubsystems(subA.NQN))
	select {
	case <-viaP2.IOQueueDone(0):
	case <-time.After(10 * time.Second):
		t.Fatal("the controller of the unlinked subsystem through the port stayed")
	}
	ents, err = disc.WaitDiscoveryChange(ctx)
	require.NoError(t, err)
	require.Len(t, ents, 1)
	require.Equal(t, subA.NQN, ents[0].SubNQN, "the port's discovery controller is told")
	quiet, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = other.WaitDiscoveryChange(quiet)
	require.ErrorIs(t, err, context.DeadlineExceeded, "another port's log did not change: no notice there")
	h1, err := viaP1.Namespace(ctx, 1)
	require.NoError(t, err)
	_, err = h1.WriteAt(make([]byte, 512), 0)
	require.NoError(t, err, "through the other port it stays")
	_, err = host.Connect(ctx, "tcp", addr2, subB.NQN, host.Config{})
	requireStatus(t, err, nvme.StatusConnectInvalidParm|nvme.DNR)
	connectHost(t, addr2, subA.NQN, host.Config{})

	all := tg.ports[0]
	require.Nil(t, all.Subsystems())
	require.Error(t, all.SetSubsystems(subA.NQN), "Listen's port serves every subsystem")
}

// A Connect that passed the port's check just before SetSubsystems
// unlinked its subsystem gets no controller through that port (the check
// is made again under the target's lock): here it waits in the subsystem's
// access check while the unlink happens.
func TestConnectRacingUnlink(t *testing.T) {
	checkRoutines(t)
	tg, _, _ := newTestTarget(t, 1<<20, Config{})
	ctx := testCtx(t)
	subB, err := NewSubsystem(testNQN + "-b")
	require.NoError(t, err)
	require.NoError(t, tg.AddSubsystem(subB))
	p2, err := tg.ListenPort(context.Background(), "tcp", "127.0.0.1:0", PortConfig{Subsystems: []string{subB.NQN}})
	require.NoError(t, err)
	subB.mu.Lock() // the Connect stops in Allowed, after the port said yes
	done := make(chan error, 1)
	go func() {
		c, err := host.Connect(ctx, "tcp", p2.Addr().String(), subB.NQN, host.Config{})
		if err == nil {
			c.Close()
		}
		done <- err
	}()
	require.Eventually(t, func() bool {
		tg.mu.Lock()
		defer tg.mu.Unlock()
		return len(tg.queues) > 0
	}, 5*time.Second, time.Millisecond, "the admin queue")
	time.Sleep(200 * time.Millisecond) // its Connect into Allowed
	require.NoError(t, p2.SetSubsystems())
	subB.mu.Unlock()
	requireStatus(t, <-done, nvme.StatusConnectInvalidParm|nvme.DNR)
	tg.mu.Lock()
	defer tg.mu.Unlock()
	for _, c := range tg.ctrls {
		require.False(t, c.sub == subB && !c.dead, "a controller of the unlinked subsystem through the port")
	}
}

// A subsystem that two targets serve: removing it from one leaves the
// other serving it, its controllers, its namespaces and Connects.
func TestRemoveSubsystemOfOneTarget(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	sub, err := NewSubsystem(testNQN)
	require.NoError(t, err)
	_, err = sub.AddNamespace(NewMemBackend(1<<20), 512)
	require.NoError(t, err)
	t1, err := New(Config{Logf: t.Logf}, sub)
	require.NoError(t, err)
	t.Cleanup(func() { t1.Close() })
	t2, err := New(Config{Logf: t.Logf}, sub)
	require.NoError(t, err)
	t.Cleanup(func() { t2.Close() })
	a1, err := t1.Listen(ctx, "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	a2, err := t2.Listen(ctx, "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c1 := connectHost(t, a1.String(), testNQN, host.Config{IOQueues: 1})
	c2 := connectHost(t, a2.String(), testNQN, host.Config{IOQueues: 1})

	require.NoError(t, t1.RemoveSubsystem(ctx, testNQN))
	select {
	case <-c1.IOQueueDone(0):
	case <-time.After(10 * time.Second):
		t.Fatal("t1's controller stayed")
	}
	ents, err := host.Discover(ctx, "tcp", a2.String(), host.Config{})
	require.NoError(t, err)
	require.Len(t, ents, 1, "t2 still lists it")
	h, err := c2.Namespace(ctx, 1)
	require.NoError(t, err)
	_, err = h.WriteAt(make([]byte, 512), 0)
	require.NoError(t, err, "t2's controller and namespace stay")
	connectHost(t, a2.String(), testNQN, host.Config{})
	_, err = host.Connect(ctx, "tcp", a1.String(), testNQN, host.Config{})
	requireStatus(t, err, nvme.StatusConnectInvalidParm|nvme.DNR)

	require.NoError(t, t2.RemoveSubsystem(ctx, testNQN))
	require.Empty(t, sub.Namespaces(), "the last target's removal takes the namespaces")
}
