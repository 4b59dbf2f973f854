package rmem

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// The remote-memory cache of issue 40's user: 10 000 random 4 KiB Reads
// and 1 000 4 KiB Writes from 32 goroutines at once, each Read checked
// against a model of the remote memory, and the memory itself checked at
// the end. A Read runs under read locks of the blocks it spans, a Write
// under its block's write lock, so that the model says what each Read
// must return: a Read posted after a Write completed on the same QP sees
// it.
func TestRandomReadsWrites(t *testing.T) {
	checkRoutines(t)
	const (
		size      = 4 << 20
		block     = 4096
		blocks    = size / block
		workers   = 32
		reads     = 10000
		writes    = 1000
		perWorker = (reads + writes) / workers
	)
	p := newPair(t, pairOpts{size: size, cfg: Config{PieceSize: 16 << 10}})
	model := initialMem(size)
	var locks [blocks]sync.RWMutex
	var nr, nw atomic.Int64
	ctx := context.Background()
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			buf := make([]byte, block)
			for range perWorker + 1 {
				// Writes and Reads in the proportion, in any order.
				if r.IntN(reads+writes) < writes {
					if nw.Add(1) > writes {
						nw.Add(-1)
						continue
					}
					i := r.IntN(blocks)
					fill(buf, r.Uint64())
					locks[i].Lock()
					_, err := p.b.WriteAt(ctx, buf, int64(i*block))
					copy(model[i*block:], buf)
					locks[i].Unlock()
					if err != nil {
						errc <- err
						return
					}
					continue
				}
				if nr.Add(1) > reads {
					nr.Add(-1)
					continue
				}
				off := r.IntN(size - block + 1) // any alignment
				first, last := off/block, (off+block-1)/block
				for i := first; i <= last; i++ {
					locks[i].RLock()
				}
				_, err := p.b.ReadAt(ctx, buf, int64(off))
				ok := err == nil && string(buf) == string(model[off:off+block])
				for i := first; i <= last; i++ {
					locks[i].RUnlock()
				}
				if err != nil {
					errc <- err
					return
				}
				if !ok {
					errc <- fmt.Errorf("Read of octets %d to %d: not the model's data", off, off+block)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}
	// The rest of the counts, from one goroutine.
	buf := make([]byte, block)
	for ; nr.Load() < reads; nr.Add(1) {
		off := rand.IntN(size - block + 1)
		_, err := p.b.ReadAt(ctx, buf, int64(off))
		require.NoError(t, err)
		requireSame(t, model[off:off+block], buf, "read")
	}
	for ; nw.Load() < writes; nw.Add(1) {
		i := rand.IntN(blocks)
		fill(buf, rand.Uint64())
		_, err := p.b.WriteAt(ctx, buf, int64(i*block))
		require.NoError(t, err)
		copy(model[i*block:], buf)
	}
	require.EqualValues(t, reads, nr.Load())
	require.EqualValues(t, writes, nw.Load())
	p.placed(t, writes)
	requireSame(t, model, p.mr.Buf(), "the server's memory")
	require.NoError(t, p.client.Err())
	require.Zero(t, p.b.Stats().InFlight)
}
