package host

import (
	"slices"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// A port closed, as a port removed from nvmet: its hosts lose their
// controllers, hosts through the other port keep theirs, nothing more
// connects through it, and its ID may be listened on again.
func TestPortClose(t *testing.T) {
	checkRoutines(t)
	tg, sub, addr := newTestTarget(t, 1<<20, target.Config{})
	ctx := testCtx(t)
	p2, err := tg.ListenPort(ctx, "tcp", "127.0.0.1:0", target.PortConfig{ID: 9, Subsystems: []string{sub.NQN}})
	require.NoError(t, err)
	addr2 := p2.Addr().String()
	via2 := connectHost(t, addr2, sub.NQN, Config{IOQueues: 1})
	via1 := connectHost(t, addr, sub.NQN, Config{IOQueues: 1})
	d := connectHost(t, addr2, nvme.DiscoveryNQN, Config{})

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
	_, err = Connect(ctx, "tcp", addr2, sub.NQN, Config{})
	require.Error(t, err, "nothing listens there")
	require.Eventually(t, func() bool { return !slices.Contains(tg.Controllers(), via2.ID) }, 10*time.Second, 5*time.Millisecond,
		"the controller through the closed port is gone")
	require.Contains(t, tg.Controllers(), via1.ID)
	p9, err := tg.ListenPort(ctx, "tcp", addr2, target.PortConfig{ID: 9, Subsystems: []string{sub.NQN}})
	require.NoError(t, err, "the ID and the address are free again")
	connectHost(t, p9.Addr().String(), sub.NQN, Config{})
	require.Len(t, tg.Ports(), 2)
	require.Error(t, p2.SetANAState(1, nvme.ANAInaccessible), "a closed port")
}
