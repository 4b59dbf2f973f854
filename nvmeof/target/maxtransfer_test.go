package target

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/internal/blkstress"
	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/internal/testhook"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

// blockNS is what host.Namespace and MultipathNamespace both offer.
type blockNS interface {
	Size() int64
	ReadAtContext(ctx context.Context, p []byte, off int64) (int, error)
	WriteAtContext(ctx context.Context, p []byte, off int64) (int, error)
	WriteZeroes(ctx context.Context, off, length int64) error
	Flush(ctx context.Context) error
}

// hostDev is blkstress's Device over a host's namespace.
type hostDev struct {
	ctx context.Context
	ns  blockNS
}

func (d hostDev) Size() int64                              { return d.ns.Size() }
func (d hostDev) ReadAt(p []byte, off int64) (int, error)  { return d.ns.ReadAtContext(d.ctx, p, off) }
func (d hostDev) WriteAt(p []byte, off int64) (int, error) { return d.ns.WriteAtContext(d.ctx, p, off) }
func (d hostDev) Zero(off, n int64) error                  { return d.ns.WriteZeroes(d.ctx, off, n) }
func (d hostDev) Flush() error                             { return d.ns.Flush(d.ctx) }
func (d hostDev) Alloc(n int) []byte                       { return make([]byte, n) }

// MaxTransfer up to 1 MiB (nvmet-rdma's MDTS) on both sides: commands of
// 1 MiB move, mixed with small and mid-sized ones (the target's three
// buffer sizes, the largest bounded to 16 a queue, so that commands wait
// for one), every sector judged by blkstress; the smaller of the two
// sides' limits is what moves; and the bounds are checked.
func TestMaxTransfer(t *testing.T) {
	var most atomic.Int64 // the largest Read or Write, in octets
	hook := func(_ uint16, cmd nvme.Command) nvme.Status {
		if op := cmd.Opcode(); op == nvme.IORead || op == nvme.IOWrite {
			n := (int64(cmd.NLB()) + 1) * 512 // NLB is 0-based
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
		}
		return nvme.StatusSuccess
	}
	testhook.IOStatus.Store(&hook)
	t.Cleanup(func() { testhook.IOStatus.Store(nil) })

	for _, c := range []struct {
		name           string
		target, host   int
		want           int64
		workers, depth int
		bufLimit       int // testBufLimit
	}{
		{"1 MiB", 1 << 20, 1 << 20, 1 << 20, 8, 32, 0},
		{"target 1 MiB, host default", 1 << 20, 0, 128 << 10, 4, 16, 0},
		{"target default, host 1 MiB", 0, 1 << 20, 128 << 10, 4, 16, 0},
		{"256 KiB", 256 << 10, 1 << 20, 256 << 10, 4, 16, 0},
		// One buffer of each of the three sizes a queue: commands wait.
		{"1 MiB, one buffer", 1 << 20, 1 << 20, 1 << 20, 8, 32, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			testBufLimit = c.bufLimit
			t.Cleanup(func() { testBufLimit = 0 })
			checkRoutines(t)
			ctx := testCtx(t)
			_, _, addr := newTestTarget(t, 16<<20, Config{MaxTransfer: c.target})
			h := connectHost(t, addr, testNQN, host.Config{IOQueues: 2, QueueDepth: c.depth, MaxTransfer: c.host})
			ns, err := h.Namespace(ctx, 1)
			require.NoError(t, err)
			most.Store(0)
			// A step is an I/O over 1 MiB one time in ten: 25 steps a
			// worker at least, whatever the machine's speed, make a run
			// without one as likely as 0.9^100.
			counts, err := blkstress.Run(hostDev{ctx, ns}, blkstress.Config{Workers: c.workers, Time: time.Second, Steps: 25,
				Max: 2 << 20, Seed: uint64(time.Now().UnixNano())})
			require.NoError(t, err)
			t.Logf("%v", counts)
			require.Positive(t, counts.Big, "I/Os over 1 MiB")
			require.Equal(t, c.want, most.Load(), "the largest command")
		})
	}

	sub, err := NewSubsystem(testNQN)
	require.NoError(t, err)
	for _, bad := range []int{4096, 3 << 18, 2 << 20} {
		_, err = New(Config{MaxTransfer: bad}, sub)
		require.ErrorContains(t, err, "want a power of two in 8 KiB .. 1 MiB")
		_, err = host.Connect(testCtx(t), "tcp", "127.0.0.1:1", testNQN, host.Config{MaxTransfer: bad})
		require.ErrorContains(t, err, "want a power of two in 8 KiB .. 1 MiB")
	}
}
