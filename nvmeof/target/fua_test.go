package target

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/stretchr/testify/require"
)

// fuaBackend records how the target writes: plainly, durably, zeroing,
// and its flushes (onFlush, if set, is called in each; failFlush fails
// them). With noFUA it is a Backend without WriteAtFUA.
type fuaBackend struct {
	*MemBackend
	plain, fua, zeroes, flushes atomic.Int64
	failFlush                   atomic.Bool
	onFlush                     atomic.Pointer[func()]
}

func (b *fuaBackend) Zero(off, n int64, deallocate bool) error {
	b.zeroes.Add(1)
	return b.MemBackend.Zero(off, n, deallocate)
}

func (b *fuaBackend) WriteAt(p []byte, off int64) (int, error) {
	b.plain.Add(1)
	return b.MemBackend.WriteAt(p, off)
}

func (b *fuaBackend) WriteAtFUA(p []byte, off int64) (int, error) {
	b.fua.Add(1)
	return b.MemBackend.WriteAt(p, off)
}

func (b *fuaBackend) Flush() error {
	b.flushes.Add(1)
	if f := b.onFlush.Load(); f != nil {
		(*f)()
	}
	if b.failFlush.Load() {
		return errors.New("the disk is gone")
	}
	return nil
}

// noFUABackend hides fuaBackend's WriteAtFUA and Zero.
type noFUABackend struct{ b *fuaBackend }

func (n noFUABackend) ReadAt(p []byte, off int64) (int, error) { return n.b.ReadAt(p, off) }

func (n noFUABackend) WriteAt(p []byte, off int64) (int, error) { return n.b.WriteAt(p, off) }

func (n noFUABackend) Size() int64 { return n.b.Size() }

func (n noFUABackend) Flush() error { return n.b.Flush() }

// A backend without WriteAtFUA gets a FUA write as WriteAt and Flush.
func TestWriteFUAFlushes(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	be := &fuaBackend{MemBackend: NewMemBackend(1 << 20)}
	_, _, addr := newBackendTarget(t, noFUABackend{be}, Config{})
	c := connectHost(t, addr, testNQN, host.Config{IOQueues: 1})
	ns, err := c.Namespace(ctx, 1)
	require.NoError(t, err)
	_, err = ns.WriteAtFUA(ctx, make([]byte, 4096), 0)
	require.NoError(t, err)
	require.Equal(t, int64(1), be.plain.Load())
	require.Equal(t, int64(1), be.flushes.Load(), "the write flushed")
	require.Zero(t, be.fua.Load())
}
