package host

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/internal/testhook"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// The queue-depth policy sends I/O where fewer commands wait: with one of
// two optimized paths slow (its writes take 20 ms at the target), most
// writes go down the fast one, whichever of the two it is; round-robin
// splits them evenly, the slow path setting the pace.
func TestMultipathQueueDepth(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	sub, tg, _ := serveNamespaces(t, target.NamespaceConfig{})
	ports, addrs := listenPorts(t, tg, sub, 2)
	var slowPort atomic.Int32 // the index of the slow path
	slow := func(p uint16, cmd nvme.Command) nvme.Status {
		if p == ports[slowPort.Load()].ID() && cmd.Opcode() == nvme.IOWrite {
			time.Sleep(20 * time.Millisecond)
		}
		return nvme.StatusSuccess
	}
	testhook.IOStatus.Store(&slow)
	t.Cleanup(func() { testhook.IOStatus.Store(nil) })
	share := func(policy IOPolicy) float64 {
		m := connectMultipathCfg(t, MultipathConfig{Config: Config{IOQueues: 1}, Policy: policy}, addrs...)
		n, err := m.Namespace(ctx, 1)
		require.NoError(t, err)
		before := m.Paths()
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 25 {
					_, err := n.WriteAtContext(ctx, make([]byte, 512), int64(w*25+i)*512)
					if err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		after := m.Paths()
		s := slowPort.Load()
		slowCmds := after[s].Commands - before[s].Commands
		fastCmds := after[1-s].Commands - before[1-s].Commands
		require.EqualValues(t, 100, slowCmds+fastCmds)
		require.NoError(t, m.Close())
		return float64(fastCmds) / 100
	}
	for _, s := range []int32{0, 1} {
		slowPort.Store(s)
		rr := share(PolicyRoundRobin)
		qd := share(PolicyQueueDepth)
		t.Logf("path %d slow: the fast path's share: round-robin %.2f, queue depth %.2f", s+1, rr, qd)
		require.InDelta(t, 0.5, rr, 0.1, "round-robin: in turn")
		require.Greater(t, qd, 0.8, "queue depth: where fewer wait")
	}
}
