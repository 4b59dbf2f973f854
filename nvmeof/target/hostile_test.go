package target

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/stretchr/testify/require"
)

// A connection that never sends its Fabrics Connect is ended after
// connectWait, on the admin queue's QID and an I/O queue's alike: each one
// holds its receive buffers, and idle ones could pile up without bound.
func TestHostileNoConnect(t *testing.T) {
	checkRoutines(t)
	connectWait = 300 * time.Millisecond
	t.Cleanup(func() { connectWait = 10 * time.Second })
	var logMu sync.Mutex
	var lines []string
	_, _, addr := newTestTarget(t, 1<<20, Config{Logf: func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		lines = append(lines, fmt.Sprintf(format, args...))
	}})
	for _, qid := range []uint16{0, 1} {
		q := rawQueue(t, addr, qid, 32, 0)
		select {
		case <-q.dead:
		case <-time.After(10 * time.Second):
			t.Fatalf("queue %d: still connected 10 s after connecting without a Connect", qid)
		}
	}
	// Both queues' ends logged before the log is cleared: the target may
	// log one after its connection has gone (a CI run saw q1's line land
	// in the second half).
	require.Eventually(t, func() bool {
		logMu.Lock()
		defer logMu.Unlock()
		return strings.Count(strings.Join(lines, "\n"), "no Fabrics Connect in 300ms") == 2
	}, 10*time.Second, 10*time.Millisecond, "both queues' ends logged")
	logMu.Lock()
	lines = nil
	logMu.Unlock()

	// A queue that connected and then sat idle past connectWait lives on
	// (its Connect is served by the receive handler, whose completion the
	// queue's goroutine never sees: a version of it ended every idle I/O
	// queue).
	c := connectHost(t, addr, testNQN, host.Config{IOQueues: 2})
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	time.Sleep(3 * connectWait)
	for range 4 { // round robin: both I/O queues
		_, err = ns.WriteAt(make([]byte, 512), 0)
		require.NoError(t, err, "an I/O queue idle past connectWait")
	}
	logMu.Lock()
	defer logMu.Unlock()
	require.NotContains(t, strings.Join(lines, "\n"), "no Fabrics Connect")
}
