package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// A context already done sends nothing: the call returns its error, and
// the queue it would have used lives on (as it does for a command sent and
// then given up: TestHostCancelOneCall).
func TestHostDoneContext(t *testing.T) {
	checkRoutines(t)
	c, ns := hostNS(t, 1<<20, Config{IOQueues: 1})
	done, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.GetFeatures(done, nvme.FeatNumQueues)
	require.ErrorIs(t, err, context.Canceled)
	n, err := ns.ReadAtContext(done, make([]byte, 4096), 0)
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, n)
	_, err = ns.WriteAtContext(done, make([]byte, 4096), 0)
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, c.Err(), "the admin queue")
	select {
	case <-c.IOQueueDone(0):
		t.Fatal("the I/O queue ended")
	default:
	}
	_, err = c.GetFeatures(testCtx(t), nvme.FeatNumQueues)
	require.NoError(t, err)
	_, err = ns.ReadAt(make([]byte, 4096), 0)
	require.NoError(t, err)
}

// Offsets and lengths outside the namespace are refused before anything is
// sent: a negative length once became Write Zeroes of 65 535 blocks.
func TestHostRanges(t *testing.T) {
	checkRoutines(t)
	_, ns := hostNS(t, 64<<20, Config{IOQueues: 1})
	data := bytes.Repeat([]byte{0xab}, 64<<10)
	_, err := ns.WriteAt(data, 0)
	require.NoError(t, err)
	ctx := testCtx(t)
	size := ns.Size()
	for _, r := range []struct{ off, length int64 }{{0, -512}, {-512, 512}, {0, 0}, {size - 512, 1024}, {size, 512}} {
		require.ErrorIs(t, ns.WriteZeroes(ctx, r.off, r.length), ErrRange, "WriteZeroes(%d, %d)", r.off, r.length)
		require.ErrorIs(t, ns.Deallocate(ctx, r.off, r.length), ErrRange, "Deallocate(%d, %d)", r.off, r.length)
	}
	require.ErrorIs(t, ns.WriteZeroes(ctx, 0, 65537*512), ErrRange, "past Write Zeroes' 65 536 blocks")
	require.ErrorIs(t, ns.WriteZeroes(ctx, 1, 512), ErrUnaligned)
	_, err = ns.ReadAt(make([]byte, 512), -512)
	require.ErrorIs(t, err, ErrRange)
	_, err = ns.WriteAt(make([]byte, 512), -512)
	require.ErrorIs(t, err, ErrRange)
	_, err = ns.WriteAt(make([]byte, 1024), size-512)
	require.ErrorIs(t, err, ErrRange)
	n, err := ns.ReadAt(make([]byte, 1024), size-512)
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, 512, n)
	got := make([]byte, len(data))
	_, err = ns.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, data, got, "what the refused calls could have zeroed")
}

// failReadBackend fails the reads of the octets in [from, to).
type failReadBackend struct {
	*target.MemBackend
	from, to atomic.Int64 // set by the test, read on the target's goroutines
}

func (b *failReadBackend) ReadAt(p []byte, off int64) (int, error) {
	if off < b.to.Load() && off+int64(len(p)) > b.from.Load() {
		return 0, errors.New("bad sector")
	}
	return b.MemBackend.ReadAt(p, off)
}

// ReadAt's count is what p[:n] holds (io.ReaderAt): the octets before the
// first command that failed, however many after it succeeded.
func TestHostReadCount(t *testing.T) {
	checkRoutines(t)
	b := &failReadBackend{MemBackend: target.NewMemBackend(4 << 20)}
	_, _, addr := newBackendTarget(t, b, target.Config{})
	c := connectHost(t, addr, testNQN, Config{IOQueues: 2})
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	chunk := int64(c.maxData)
	for _, bad := range []int64{0, 1, 3} { // the command that fails, of 4
		b.from.Store(bad * chunk)
		b.to.Store(bad*chunk + 512)
		n, err := ns.ReadAt(make([]byte, 4*chunk), 0)
		requireStatus(t, err, nvme.StatusUnrecoveredRead|nvme.DNR)
		require.EqualValues(t, bad*chunk, n, "command %d of 4 failed", bad)
	}
}

// A namespace whose blocks are larger than a command may carry cannot be
// read or written; Namespace says so.
func TestHostBlockPastTransferLimit(t *testing.T) {
	checkRoutines(t)
	sub, err := target.NewSubsystem(testNQN)
	require.NoError(t, err)
	_, err = sub.AddNamespace(target.NewMemBackend(1<<20), 16384)
	require.NoError(t, err)
	tg, err := target.New(target.Config{MaxTransfer: 8192, Logf: t.Logf}, sub)
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	a, err := tg.Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c := connectHost(t, a.String(), testNQN, Config{IOQueues: 1})
	_, err = c.Namespace(testCtx(t), 1)
	require.ErrorContains(t, err, "past the controller's transfer limit")
}

// MDTS cannot say one 4 KiB page (0 is no limit): the target refuses a
// MaxTransfer of 4 KiB rather than advertise no limit.
func TestTargetMaxTransferFloor(t *testing.T) {
	sub, err := target.NewSubsystem(testNQN)
	require.NoError(t, err)
	_, err = target.New(target.Config{MaxTransfer: 4096}, sub)
	require.ErrorContains(t, err, "MaxTransfer 4096")
	tg, err := target.New(target.Config{MaxTransfer: 8192}, sub)
	require.NoError(t, err)
	tg.Close()
}

// firstOnly forwards the first TCP connection to addr and closes every
// later one at once: a target whose I/O queues cannot connect.
func firstOnly(t *testing.T, addr string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for first := true; ; first = false {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			if !first {
				in.Close()
				continue
			}
			out, err := net.Dial("tcp", addr)
			if err != nil {
				in.Close()
				continue
			}
			wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer wg.Done()
				io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			go pipe(out, in)
			go pipe(in, out)
		}
	}()
	return ln.Addr().String()
}

// A Connect that fails after Keep Alive began (here at the I/O queues)
// stops it: checkRoutines finds no goroutine left.
func TestHostConnectFailsLate(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 1<<20, target.Config{})
	_, err := Connect(testCtx(t), "tcp", firstOnly(t, addr), testNQN, Config{IOQueues: 1, KATO: time.Hour})
	require.ErrorContains(t, err, "connecting queue 1")
	_, err = Connect(testCtx(t), "tcp", addr, testNQN, Config{IOQueues: 65536})
	require.ErrorContains(t, err, "IOQueues 65536")
}

// Close keeps Keep Alive going while it waits for the commands in flight:
// a drain longer than KATO once let the target end the controller under
// them.
func TestHostCloseDrainPastKATO(t *testing.T) {
	checkRoutines(t)
	b := &slowBackend{MemBackend: target.NewMemBackend(1 << 20), delay: 2 * time.Second}
	_, _, addr := newBackendTarget(t, b, target.Config{})
	c, err := Connect(testCtx(t), "tcp", addr, testNQN, Config{IOQueues: 1, KATO: time.Second})
	require.NoError(t, err)
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	werr := make(chan error, 1)
	go func() { _, err := ns.WriteAt(make([]byte, 4096), 0); werr <- err }()
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.inFlight > 0
	}, 10*time.Second, time.Millisecond, "the write under way")
	require.NoError(t, c.Close())
	require.NoError(t, <-werr, "the write Close waited for")
}

// The round robin over the I/O queues past 2^31 and 2^32 commands (on a
// 32-bit port its int once went negative: an index out of range).
func TestHostRoundRobinWraps(t *testing.T) {
	checkRoutines(t)
	c, ns := hostNS(t, 1<<20, Config{IOQueues: 3})
	for _, at := range []uint32{1<<31 - 2, 1<<32 - 2} {
		c.rr.Store(at)
		for range 4 {
			_, err := ns.ReadAt(make([]byte, 4096), 0)
			require.NoError(t, err)
		}
	}
}

// hugeBackend claims 4 TiB, stores nothing and records what it is asked
// to zero.
type hugeBackend struct {
	mu    sync.Mutex
	zeros [][2]int64
}

func (b *hugeBackend) ReadAt(p []byte, off int64) (int, error) { clear(p); return len(p), nil }

func (b *hugeBackend) WriteAt(p []byte, off int64) (int, error) { return len(p), nil }

func (b *hugeBackend) Size() int64 { return 4 << 40 }

func (b *hugeBackend) Flush() error { return nil }

func (b *hugeBackend) Zero(off, n int64, _ bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.zeros = append(b.zeros, [2]int64{off, n})
	return nil
}

// A Deallocate of 2^32 blocks or more goes as several ranges of at most
// 2^32-1 blocks: its count once wrapped in the range's 32 bits (2^32+1
// blocks deallocated one, and said success).
func TestHostDeallocateHuge(t *testing.T) {
	checkRoutines(t)
	b := &hugeBackend{}
	_, _, addr := newBackendTarget(t, b, target.Config{})
	c := connectHost(t, addr, testNQN, Config{IOQueues: 1})
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	const max = 1<<32 - 1
	length := int64(1<<32+1) * 512
	require.NoError(t, ns.Deallocate(testCtx(t), 512, length))
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Equal(t, [][2]int64{{512, max * 512}, {512 + max*512, 2 * 512}}, b.zeros)
}

// A host's ConnConfig.TCP.LocalAddr is the source of every queue, as
// nvme-cli's --host-traddr: the target sees the admin and I/O queues come
// from it, and I/O goes through.
func TestHostSourceAddress(t *testing.T) {
	checkRoutines(t)
	var mu sync.Mutex
	var lines []string
	_, _, addr := newTestTarget(t, 1<<20, target.Config{Logf: func(f string, a ...any) {
		mu.Lock()
		lines = append(lines, fmt.Sprintf(f, a...))
		mu.Unlock()
	}})
	cfg := Config{IOQueues: 2}
	cfg.ConnConfig.TCP.LocalAddr = "127.0.0.2"
	c := connectHost(t, addr, testNQN, cfg)
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	w := make([]byte, 4096)
	fill(w, 3)
	_, err = ns.WriteAtContext(testCtx(t), w, 8192)
	require.NoError(t, err)
	r := make([]byte, 4096)
	_, err = ns.ReadAtContext(testCtx(t), r, 8192)
	require.NoError(t, err)
	require.Equal(t, w, r)
	mu.Lock()
	defer mu.Unlock()
	queues := map[string]bool{}
	for _, l := range lines {
		if m := regexp.MustCompile(`^nvmeof: (\S+):\d+ (q\d+): connected`).FindStringSubmatch(l); m != nil {
			require.Equal(t, "127.0.0.2", m[1], "%s", l)
			queues[m[2]] = true
		}
	}
	require.Equal(t, map[string]bool{"q0": true, "q1": true, "q2": true}, queues, "queues connected")
}

// AdminCommand sends the caller's command: Identify Controller by hand
// reads what Connect read, a status comes back as a *nvme.StatusError, and
// data beyond the admin queue's transfer size is refused before sending.
func TestAdminCommand(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 1<<20, target.Config{})
	c := connectHost(t, addr, testNQN, Config{IOQueues: 1})
	ctx := testCtx(t)
	id := make([]byte, nvme.IdentifySize)
	_, err := c.AdminCommand(ctx, func(cmd nvme.Command) { nvme.NewAdmin(cmd, nvme.AdminIdentify, 0, 0, nvme.CNSController, 0) }, id)
	require.NoError(t, err)
	info, err := nvme.ParseControllerInfo(id)
	require.NoError(t, err)
	require.Equal(t, c.Info, info)
	_, err = c.AdminCommand(ctx, func(cmd nvme.Command) { nvme.NewAdmin(cmd, 0x7e, 0, 0, 0, 0) }, nil)
	var se *nvme.StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, nvme.StatusInvalidOpcode|nvme.DNR, se.Status)
	_, err = c.AdminCommand(ctx, func(cmd nvme.Command) {}, make([]byte, 1<<20))
	require.Error(t, err)
	require.NoError(t, c.Err(), "the controller goes on")
}
