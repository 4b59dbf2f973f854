package host

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// A host that sets CC.SHN under writes (not ours: it drains first): the
// target closes the I/O queues and waits for the writes they were amid
// before it flushes, so that CSTS.SHST done covers them.
func TestShutdownUnderWrites(t *testing.T) {
	checkRoutines(t)
	b := &slowBackend{MemBackend: target.NewMemBackend(1 << 20), delay: 20 * time.Millisecond}
	_, _, addr := newBackendTarget(t, b, target.Config{})
	c := connectHost(t, addr, testNQN, Config{IOQueues: 2})
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, err := ns.WriteAt(bytes.Repeat([]byte{byte(w)}, 4096), int64(w)*4096); err != nil {
					return
				}
			}
		}()
	}
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.writes >= 4 && b.inFlight > 0
	}, 10*time.Second, time.Millisecond, "writes under way")
	ctx := testCtx(t)
	require.NoError(t, c.propertySet(ctx, nvme.PropCC, nvme.CCEnable|6<<16|4<<20|1<<14))
	csts, err := c.propertyGet(ctx, nvme.PropCSTS, 4)
	require.NoError(t, err)
	require.EqualValues(t, nvme.CSTSShstDone, csts&nvme.CSTSShstMask, "CSTS %#x", csts)
	wg.Wait() // the I/O queues are gone: every writer's call failed
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.inFlight == 0
	}, 10*time.Second, time.Millisecond, "the target's writes ended")
	b.mu.Lock()
	defer b.mu.Unlock()
	require.False(t, b.flushAt.IsZero(), "no Flush at the shutdown")
	require.False(t, b.lastEnd.After(b.flushAt), "a write ended %v after the shutdown's Flush began", b.lastEnd.Sub(b.flushAt))
}
