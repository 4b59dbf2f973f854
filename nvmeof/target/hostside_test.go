package target

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

// Close waits for a shutdown that takes a while (CSTS.SHST "occurring" for
// 1.5 s), and reports the fatal status it ends with; it once gave up
// after 1 s and returned nil. Every later Close says the same.
func TestHostSlowShutdown(t *testing.T) {
	checkRoutines(t)
	testShutdownLag = 1500 * time.Millisecond
	t.Cleanup(func() { testShutdownLag = 0 })
	b := &flushBackend{MemBackend: NewMemBackend(1 << 20)}
	b.fail.Store(true)
	_, _, addr := newBackendTarget(t, b, Config{})
	c, err := host.Connect(testCtx(t), "tcp", addr, testNQN, host.Config{IOQueues: 1})
	require.NoError(t, err)
	start := time.Now()
	require.ErrorIs(t, c.Close(), host.ErrShutdownFatal)
	require.GreaterOrEqual(t, time.Since(start), testShutdownLag)
	require.ErrorIs(t, c.Close(), host.ErrShutdownFatal, "a second Close")
}

// A discovery log that changes between the read of its header and the
// read of it whole is read again: once, a subsystem added in between was
// cut off the list the host got.
func TestDiscoveryLogChanges(t *testing.T) {
	checkRoutines(t)
	tg, _, addr := newTestTarget(t, 1<<20, Config{})
	var reads atomic.Int32
	testDiscoveryLog = func(n int) { // on the target's goroutine
		if reads.Add(1) == 1 && n == nvme.DiscHeaderSize { // the header, just built
			sub, err := NewSubsystem("nqn.2024-01.io.goiwarp:late")
			if err == nil {
				err = tg.AddSubsystem(sub)
			}
			if err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(func() { testDiscoveryLog = nil })
	ents, err := host.Discover(testCtx(t), "tcp", addr, host.Config{})
	require.NoError(t, err)
	require.Len(t, ents, 2)
	require.EqualValues(t, 3, reads.Load(), "the header, then the log twice (the first whole one has another generation)")
}
