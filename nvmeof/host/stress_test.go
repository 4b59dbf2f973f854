package host

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// TestRWNoHoldAndWait: callers that each split their I/O into more
// commands than the queues have slots must not wait for a slot while
// holding slots of commands already answered. Four callers over two
// queues of depth 2 (four slots in all), each reading eight commands'
// worth: a caller that held its slots while it waited for more would wait
// for the others' slots, and they for its.
func TestRWNoHoldAndWait(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 32<<20, target.Config{})
	c := connectHost(t, addr, testNQN, Config{IOQueues: 2, QueueDepth: 2})
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	size := 8 * c.maxData
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, size)
			for range 5 {
				if _, err := ns.ReadAtContext(ctx, buf, int64(w*size)); err != nil {
					errs <- err
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
}
