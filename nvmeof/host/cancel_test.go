package host

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// One call's context ends that call alone: an 8 MiB read with a 2 ms
// deadline returns DeadlineExceeded, while other callers' reads go on
// undisturbed on the same queues, and plain ReadAt, a fresh Namespace and
// the controller work after it (issue 40: the deadline once ended both I/O
// queues for good, and the other callers' errors matched
// DeadlineExceeded).
func TestHostCancelOneCall(t *testing.T) {
	checkRoutines(t)
	const size = 16 << 20
	c, ns := hostNS(t, size, Config{IOQueues: 2})
	ctx := testCtx(t)
	want := make([]byte, size)
	fill(want, 40)
	_, err := ns.WriteAtContext(ctx, want, 0)
	require.NoError(t, err)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64<<10)
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				off := int64((g*977+k*131)%(size/len(buf))) * int64(len(buf))
				if _, err := ns.ReadAt(buf, off); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(buf, want[off:off+int64(len(buf))]) {
					errs <- errors.New("read the wrong data")
					return
				}
			}
		}()
	}
	big := make([]byte, 8<<20)
	cut := 0
	for range 20 {
		short, cancel := context.WithTimeout(ctx, 2*time.Millisecond)
		_, err := ns.ReadAtContext(short, big, 0)
		cancel()
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded)
			cut++
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err, "another caller's read")
	}
	require.NotZero(t, cut, "no read was cut short by its 2 ms deadline")
	require.NoError(t, c.Err())
	for i := range c.IOQueues() {
		select {
		case <-c.IOQueueDone(i):
			t.Fatalf("I/O queue %d ended: %v", i+1, c.io[i].err)
		default:
		}
	}
	got := make([]byte, 8<<20)
	_, err = ns.ReadAt(got, 4<<20)
	require.NoError(t, err)
	require.Equal(t, want[4<<20:12<<20], got)
	ns2, err := c.Namespace(ctx, 1)
	require.NoError(t, err)
	_, err = ns2.ReadAt(got[:4096], 0)
	require.NoError(t, err)
}

// A command abandoned by its caller keeps its slot until its response
// comes: the target still writes into the slot's buffer then. The slot
// comes back afterwards, and the queue serves every slot again.
func TestHostAbandonedSlotComesBack(t *testing.T) {
	checkRoutines(t)
	be := &gateWriteBackend{MemBackend: target.NewMemBackend(1 << 20), off: 8192, reads: true,
		entered: make(chan struct{}, 1), release: make(chan struct{})}
	_, _, addr := newBackendTarget(t, be, target.Config{})
	t.Cleanup(be.open) // before the target's Close, which waits for the read
	c := connectHost(t, addr, testNQN, Config{IOQueues: 1, QueueDepth: 2})
	ctx := testCtx(t)
	ns, err := c.Namespace(ctx, 1)
	require.NoError(t, err)
	want := bytes.Repeat([]byte{0x5a}, 4096)
	_, err = ns.WriteAt(want, 0)
	require.NoError(t, err)

	short, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := ns.ReadAtContext(short, make([]byte, 4096), 8192)
		done <- err
	}()
	<-be.entered
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	// One slot of two is the abandoned command's until it is answered
	// (our target runs a queue's commands in order: the next would wait
	// behind it).
	q := c.io[0]
	require.Len(t, q.free, 1)
	require.NoError(t, c.Identify(ctx, 1, 0, make([]byte, 4096)), "the controller goes on")
	be.open()
	require.Eventually(t, func() bool { return len(q.free) == 2 }, 5*time.Second, time.Millisecond, "the slot came back")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := make([]byte, 4096)
			_, err := ns.ReadAt(b, 0)
			if err == nil && !bytes.Equal(b, want) {
				err = errors.New("wrong data")
			}
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	require.NoError(t, c.Err())
}

// A target that answers Keep Alive but never completes an I/O: the command
// ends after Config.IOTimeout with ErrCommandTimeout, which is not the
// caller's DeadlineExceeded, and Err reports it.
func TestHostCommandTimeout(t *testing.T) {
	checkRoutines(t)
	be := &gateWriteBackend{MemBackend: target.NewMemBackend(1 << 20), off: 0, reads: true,
		entered: make(chan struct{}, 1), release: make(chan struct{})}
	_, _, addr := newBackendTarget(t, be, target.Config{})
	t.Cleanup(be.open) // before the target's Close, which waits for the read
	// Keep Alive goes every KATO/2 and the target ends a controller that
	// hears nothing for KATO: a KATO of a second leaves room for a loaded
	// machine, and IOTimeout spans several of them.
	const kato, ioTimeout = time.Second, 2500 * time.Millisecond
	c := connectHost(t, addr, testNQN, Config{IOQueues: 2, KATO: kato, IOTimeout: ioTimeout})
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	start := time.Now()
	_, err = ns.ReadAt(make([]byte, 4096), 0)
	took := time.Since(start)
	require.ErrorIs(t, err, ErrCommandTimeout)
	require.ErrorIs(t, err, ErrQueueDead)
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	require.GreaterOrEqual(t, took, ioTimeout)
	require.Less(t, took, 3*ioTimeout)
	t.Logf("after %v: %v", took.Round(time.Millisecond), err)
	require.ErrorIs(t, c.Err(), ErrCommandTimeout)
	_, err = ns.ReadAt(make([]byte, 4096), 4096)
	require.ErrorIs(t, err, ErrCommandTimeout, "the other queue ended with the controller")
}
