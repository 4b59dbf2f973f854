package nvmeof

import (
	"context"
	"testing"
	"time"

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
	requireStatus(t, err, StatusConnectInvalidParm|DNR)
	viaP2 := connectHost(t, addr2, subB.NQN, HostConfig{IOQueues: 1})
	viaP1 := connectHost(t, addr, subB.NQN, HostConfig{IOQueues: 1})
	h, err := viaP2.Namespace(ctx, 1)
	require.NoError(t, err)
	_, err = h.WriteAt(make([]byte, 512), 0)
	require.NoError(t, err)
	disc := connectHost(t, addr2, DiscoveryNQN, HostConfig{WatchDiscovery: true})

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
	h1, err := viaP1.Namespace(ctx, 1)
	require.NoError(t, err)
	_, err = h1.WriteAt(make([]byte, 512), 0)
	require.NoError(t, err, "through the other port it stays")
	_, err = Connect(ctx, "tcp", addr2, subB.NQN, HostConfig{})
	requireStatus(t, err, StatusConnectInvalidParm|DNR)
	connectHost(t, addr2, subA.NQN, HostConfig{})

	all := tg.ports[0]
	require.Nil(t, all.Subsystems())
	require.Error(t, all.SetSubsystems(subA.NQN), "Listen's port serves every subsystem")
}
