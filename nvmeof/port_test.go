package nvmeof

import (
	"context"
	"testing"
	"time"

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
	tg, subA, addr := newTestTarget(t, 1<<20, TargetConfig{})
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

	ents, err := Discover(ctx, "tcp", addr2, HostConfig{})
	require.NoError(t, err)
	require.Len(t, ents, 1)
	require.Equal(t, subB.NQN, ents[0].SubNQN)
	require.EqualValues(t, 7, ents[0].PortID)
	ents, err = Discover(ctx, "tcp", addr, HostConfig{})
	require.NoError(t, err)
	require.Len(t, ents, 2, "Listen's port serves every subsystem")
	require.EqualValues(t, 1, ents[0].PortID)

	_, err = Connect(ctx, "tcp", addr2, subA.NQN, HostConfig{})
	requireStatus(t, err, nvme.StatusConnectInvalidParm|nvme.DNR)
	viaP2 := connectHost(t, addr2, subB.NQN, HostConfig{IOQueues: 1})
	viaP1 := connectHost(t, addr, subB.NQN, HostConfig{IOQueues: 1})
	h, err := viaP2.Namespace(ctx, 1)
	require.NoError(t, err)
	_, err = h.WriteAt(make([]byte, 512), 0)
	require.NoError(t, err)
	disc := connectHost(t, addr2, nvme.DiscoveryNQN, HostConfig{WatchDiscovery: true})
	other := connectHost(t, addr, nvme.DiscoveryNQN, HostConfig{WatchDiscovery: true}) // through Listen's port

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
	_, err = Connect(ctx, "tcp", addr2, subB.NQN, HostConfig{})
	requireStatus(t, err, nvme.StatusConnectInvalidParm|nvme.DNR)
	connectHost(t, addr2, subA.NQN, HostConfig{})

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
	tg, _, _ := newTestTarget(t, 1<<20, TargetConfig{})
	ctx := testCtx(t)
	subB, err := NewSubsystem(testNQN + "-b")
	require.NoError(t, err)
	require.NoError(t, tg.AddSubsystem(subB))
	p2, err := tg.ListenPort(context.Background(), "tcp", "127.0.0.1:0", PortConfig{Subsystems: []string{subB.NQN}})
	require.NoError(t, err)
	subB.mu.Lock() // the Connect stops in Allowed, after the port said yes
	done := make(chan error, 1)
	go func() {
		c, err := Connect(ctx, "tcp", p2.Addr().String(), subB.NQN, HostConfig{})
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
	t1, err := NewTarget(TargetConfig{Logf: t.Logf}, sub)
	require.NoError(t, err)
	t.Cleanup(func() { t1.Close() })
	t2, err := NewTarget(TargetConfig{Logf: t.Logf}, sub)
	require.NoError(t, err)
	t.Cleanup(func() { t2.Close() })
	a1, err := t1.Listen(ctx, "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	a2, err := t2.Listen(ctx, "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c1 := connectHost(t, a1.String(), testNQN, HostConfig{IOQueues: 1})
	c2 := connectHost(t, a2.String(), testNQN, HostConfig{IOQueues: 1})

	require.NoError(t, t1.RemoveSubsystem(ctx, testNQN))
	select {
	case <-c1.IOQueueDone(0):
	case <-time.After(10 * time.Second):
		t.Fatal("t1's controller stayed")
	}
	ents, err := Discover(ctx, "tcp", a2.String(), HostConfig{})
	require.NoError(t, err)
	require.Len(t, ents, 1, "t2 still lists it")
	h, err := c2.Namespace(ctx, 1)
	require.NoError(t, err)
	_, err = h.WriteAt(make([]byte, 512), 0)
	require.NoError(t, err, "t2's controller and namespace stay")
	connectHost(t, a2.String(), testNQN, HostConfig{})
	_, err = Connect(ctx, "tcp", a1.String(), testNQN, HostConfig{})
	requireStatus(t, err, nvme.StatusConnectInvalidParm|nvme.DNR)

	require.NoError(t, t2.RemoveSubsystem(ctx, testNQN))
	require.Empty(t, sub.namespaces(), "the last target's removal takes the namespaces")
}

// A port closed, as a port removed from nvmet: its hosts lose their
// controllers, hosts through the other port keep theirs, nothing more
// connects through it, and its ID may be listened on again.
func TestPortClose(t *testing.T) {
	checkRoutines(t)
	tg, sub, addr := newTestTarget(t, 1<<20, TargetConfig{})
	ctx := testCtx(t)
	p2, err := tg.ListenPort(ctx, "tcp", "127.0.0.1:0", PortConfig{ID: 9, Subsystems: []string{sub.NQN}})
	require.NoError(t, err)
	addr2 := p2.Addr().String()
	via2 := connectHost(t, addr2, sub.NQN, HostConfig{IOQueues: 1})
	via1 := connectHost(t, addr, sub.NQN, HostConfig{IOQueues: 1})
	d := connectHost(t, addr2, nvme.DiscoveryNQN, HostConfig{})

	require.NoError(t, p2.Close())
	require.NoError(t, p2.Close(), "twice")
	for _, done := range []<-chan struct{}{via2.IOQueueDone(0), d.admin.dead} {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("a queue through the closed port stayed")
		}
	}
	ns, err := via1.Namespace(ctx, 1)
	require.NoError(t, err)
	_, err = ns.WriteAt(make([]byte, 512), 0)
	require.NoError(t, err, "the other port's host goes on")
	_, err = Connect(ctx, "tcp", addr2, sub.NQN, HostConfig{})
	require.Error(t, err, "nothing listens there")
	require.Eventually(t, func() bool { return tg.controller(via2.ID) == nil }, 10*time.Second, 5*time.Millisecond,
		"the controller through the closed port is gone")
	require.NotNil(t, tg.controller(via1.ID))
	p9, err := tg.ListenPort(ctx, "tcp", addr2, PortConfig{ID: 9, Subsystems: []string{sub.NQN}})
	require.NoError(t, err, "the ID and the address are free again")
	connectHost(t, p9.Addr().String(), sub.NQN, HostConfig{})
	require.Len(t, tg.Ports(), 2)
	require.Error(t, p2.SetANAState(1, nvme.ANAInaccessible), "a closed port")
}
