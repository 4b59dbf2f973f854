package target

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/stretchr/testify/require"
)

// Many goroutines over four queues of depth 8, each owning a region:
// writes of random sizes (in the capsule and by RDMA Read), reads back
// and compares, so that buffer reuse on both sides is exercised hard.
func TestHostTargetStress(t *testing.T) {
	t.Run("pools", func(t *testing.T) { stress(t, 0) })
	// One buffer of each size per queue: commands wait for buffers.
	t.Run("one buffer", func(t *testing.T) { stress(t, 1) })
}

func stress(t *testing.T, bufLimit int) {
	testBufLimit = bufLimit
	t.Cleanup(func() { testBufLimit = 0 })
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 32<<20, Config{MaxQueueSize: 64})
	c := connectHost(t, addr, testNQN, host.Config{IOQueues: 4, QueueDepth: 8})
	require.Equal(t, 4, c.IOQueues())
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	const workers, region = 16, 2 << 20
	rounds := 60
	if testing.Short() {
		rounds = 10
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			base := int64(w) * region
			for r := range rounds {
				n := (1 + rng.IntN(region/512/4)) * 512
				off := base + int64(rng.IntN((region-n)/512+1))*512
				wbuf := make([]byte, n)
				fill(wbuf, uint64(w*1000+r))
				if _, err := ns.WriteAt(wbuf, off); err != nil {
					errs <- fmt.Errorf("worker %d write %d at %d: %w", w, n, off, err)
					return
				}
				rbuf := make([]byte, n)
				if _, err := ns.ReadAt(rbuf, off); err != nil {
					errs <- fmt.Errorf("worker %d read %d at %d: %w", w, n, off, err)
					return
				}
				if !bytes.Equal(wbuf, rbuf) {
					errs <- fmt.Errorf("worker %d: %d octets at %d read back differ", w, n, off)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.NoError(t, c.Err())
}

// Closing a controller while its namespace is being read and written ends
// every call, with its data or an error, and panics in none: a command that
// finishes as the queues are torn down (their regions deregistered) reads
// its slot's buffer, which the slot keeps.
func TestHostCloseUnderIO(t *testing.T) {
	checkRoutines(t)
	var logMu sync.Mutex
	var ended []string // the target's queues that ended other than by a disconnect
	var disconnected int
	_, _, addr := newTestTarget(t, 8<<20, Config{Logf: func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		t.Log(line)
		logMu.Lock()
		defer logMu.Unlock()
		switch {
		case strings.Contains(line, "connection ended"):
			ended = append(ended, line)
		case strings.HasSuffix(line, ": disconnected"):
			disconnected++
		}
	}})
	c, err := host.Connect(testCtx(t), "tcp", addr, testNQN, host.Config{IOQueues: 2, QueueDepth: 4})
	require.NoError(t, err)
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	const workers = 8
	var wg sync.WaitGroup
	done := make(chan struct{})
	oks := make([]int, workers)      // calls that returned their data
	errs := make([]error, workers)   // the call that ended each worker
	going := make(chan int, workers) // each worker, once a call returned its data
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64<<10) // past the capsule: through the slot's buffer
			off := int64(w) * int64(len(buf))
			for i := 0; ; i++ {
				var err error
				if i%2 == 0 {
					_, err = ns.WriteAt(buf, off)
				} else {
					_, err = ns.ReadAt(buf, off)
				}
				if err != nil {
					errs[w] = err
					return
				}
				if oks[w]++; oks[w] == 1 {
					going <- w
				}
				select {
				case <-done:
					return
				default:
				}
			}
		}()
	}
	// Every worker under way before the Close (a pause of 100 ms left
	// one without a call done on a loaded machine).
	for range workers {
		select {
		case <-going:
		case <-time.After(20 * time.Second):
			c.Close()
			close(done)
			wg.Wait()
			t.Fatal("a worker had no call done after 20 s")
		}
	}
	require.NoError(t, c.Close())
	close(done)
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(20 * time.Second):
		t.Fatal("I/O calls still running 20 s after Close")
	}
	// Close let the commands in flight finish before it disconnected:
	// every call either returned its data or was refused as it started.
	for w := range workers {
		require.Positive(t, oks[w], "worker %d: no call returned its data before the Close", w)
		if errs[w] != nil {
			require.ErrorIs(t, errs[w], host.ErrClosed, "worker %d", w)
		}
	}
	_, err = ns.ReadAt(make([]byte, 512), 0)
	require.ErrorIs(t, err, host.ErrClosed, "a call after Close")
	// The I/O queues disconnected before the shutdown, so the target
	// closed none of them under a command. (It may still find one at
	// CC.SHN whose disconnect it has not yet handled, and close it again:
	// the log says "closing", and the queue "disconnected".)
	require.Eventually(t, func() bool {
		logMu.Lock()
		defer logMu.Unlock()
		return disconnected+len(ended) == 3
	}, 5*time.Second, 10*time.Millisecond, "the target's three queues did not end")
	logMu.Lock()
	defer logMu.Unlock()
	require.Empty(t, ended, "queues the target ended other than by the host's disconnect")
}
