package host

import (
	"testing"
	"time"

	"github.com/goiwarp/iwarp/internal/blkstress"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// Multipath under the sector-by-sector judge (internal/blkstress) while
// its paths are cut, one at a time, every 300 ms: every command goes
// through (down the other path, and back once the cut one has connected
// again), and every sector holds what was last written to it, also where
// a write on a cut path was still running when it was sent again on the
// other (the target's quiesce.go).
func TestMultipathStress(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	sub, err := target.NewSubsystem(testNQN)
	require.NoError(t, err)
	mem := target.NewMemBackend(16 << 20)
	_, err = sub.AddNamespace(mem, 512)
	require.NoError(t, err)
	tg, err := target.New(target.Config{Logf: t.Logf}, sub)
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	var addrs []string
	for range 2 {
		p, err := tg.ListenPort(ctx, "tcp", "127.0.0.1:0", target.PortConfig{Subsystems: []string{testNQN}})
		require.NoError(t, err)
		addrs = append(addrs, p.Addr().String())
	}
	m := connectMultipathCfg(t, MultipathConfig{Config: Config{IOQueues: 2}, ReconnectDelay: 20 * time.Millisecond,
		LossTimeout: 10 * time.Second}, addrs...)
	n, err := m.Namespace(ctx, 1)
	require.NoError(t, err)

	stop := make(chan struct{})
	cut := make(chan int, 1)
	go func() {
		cuts := 0
		defer func() { cut <- cuts }()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			// Only while the other path is up: the run is about
			// failover, not about waiting with no path.
			ps := m.Paths()
			c, other := ps[i%2].Controller, ps[(i+1)%2].Controller
			if c == nil || other == nil {
				continue
			}
			c.admin.qp.Abort()
			for _, q := range c.io {
				q.qp.Abort()
			}
			cuts++
		}
	}()
	counts, err := blkstress.Run(hostDev{ctx, n}, blkstress.Config{Workers: 8, Time: 3 * time.Second, Max: 512 << 10, Seed: uint64(time.Now().UnixNano())})
	close(stop)
	cuts := <-cut
	t.Logf("%v; %d paths cut", counts, cuts)
	require.NoError(t, err)
	require.GreaterOrEqual(t, cuts, 4, "paths cut during the run")
	require.Positive(t, counts.Writes)
	require.Positive(t, counts.Reads)
	require.Equal(t, int64(16<<20/blkstress.Sector), counts.Sectors, "every sector checked")
	var connects uint64
	for _, p := range m.Paths() {
		connects += p.Connects
	}
	require.GreaterOrEqual(t, connects, uint64(2+4), "the cut paths connected again")
	// What the target holds is what the host reads.
	want, err := blkstress.Sum(hostDev{ctx, n})
	require.NoError(t, err)
	got, err := blkstress.Sum(memDev{mem})
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// memDev reads a MemBackend for blkstress.Sum.
type memDev struct{ *target.MemBackend }

func (d memDev) Zero(off, n int64) error { return d.MemBackend.Zero(off, n, false) }
func (d memDev) Flush() error            { return nil }
func (d memDev) Alloc(n int) []byte      { return make([]byte, n) }
