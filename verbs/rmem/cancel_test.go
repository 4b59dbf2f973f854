package rmem

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

// Large Reads and Writes with a 1 ms deadline while small Reads go on: the
// deadline ends each large call alone (its error wraps
// context.DeadlineExceeded), the small Reads all succeed, the QP lives,
// and a buffer whose call has returned is never touched again: each is
// filled with a sentinel on return, and the sentinels are intact after
// Close has waited for every quarantined WR; nor does a Write's sentinel
// reach the peer.
func TestCancelMidFlight(t *testing.T) {
	checkRoutines(t)
	const (
		size  = 32 << 20
		half  = size / 2 // Reads below, cancelled Writes above
		large = 2 << 20
	)
	p := newPair(t, pairOpts{size: size})
	want := initialMem(size)

	sentinels := bytes.Repeat([]byte{sentinel}, large)
	var mu sync.Mutex
	var returned [][]byte // buffers of cancelled calls, sentinel-filled
	var cancelled, quarantined int
	bg := context.Background()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errc := make(chan error, 16)
	for w := range 4 { // small Reads, checked
		wg.Go(func() {
			buf := make([]byte, 4096)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				off := (i*7919 + w*104729) % (half - 4096)
				if _, err := p.b.ReadAt(bg, buf, int64(off)); err != nil {
					errc <- err
					return
				}
				if !bytes.Equal(buf, want[off:off+4096]) {
					errc <- errors.New("a small Read returned wrong data")
					return
				}
			}
		})
	}
	var bigCalls sync.WaitGroup
	for w := range 2 {
		bigCalls.Go(func() {
			for i := range 30 {
				read := (i+w)%2 == 0
				buf := make([]byte, large)
				off := int64(i%3) * 4096
				if !read {
					buf = bytes.Repeat([]byte{0x11}, large)
					off += half
				}
				ctx, cancel := context.WithTimeout(bg, time.Millisecond)
				var err error
				if read {
					_, err = p.b.ReadAt(ctx, buf, off)
				} else {
					_, err = p.b.WriteAt(ctx, buf, off)
				}
				cancel()
				if err == nil {
					if read && !bytes.Equal(buf, want[off:off+large]) {
						errc <- errors.New("a large Read returned wrong data")
					}
					continue
				}
				copy(buf, sentinels)
				q := p.b.Stats().Quarantined
				mu.Lock()
				returned = append(returned, buf)
				cancelled++
				quarantined = max(quarantined, q)
				mu.Unlock()
				if !errors.Is(err, context.DeadlineExceeded) {
					errc <- err
				}
			}
		})
	}
	bigCalls.Wait()
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}
	require.NotZero(t, cancelled, "no large call was cancelled")
	require.NotZero(t, quarantined, "no cancelled call left a WR in flight")
	t.Logf("%d of 60 large calls cancelled; at most %d WRs quarantined", cancelled, quarantined)

	// The QP lives: a Read of the whole Write half works, and finds no
	// sentinel there.
	require.NoError(t, p.client.Err())
	require.Equal(t, verbs.StateRTS, p.client.State())
	back := make([]byte, half)
	_, err := p.b.ReadAt(bg, back, half)
	require.NoError(t, err)
	require.Equal(t, -1, bytes.IndexByte(back, sentinel), "a Write carried a buffer's contents after its call returned")

	require.NoError(t, p.b.Close())
	require.Zero(t, p.b.Stats().InFlight)
	for _, buf := range returned {
		if !bytes.Equal(buf, sentinels) {
			t.Fatalf("a cancelled call's buffer was written after the call returned")
		}
	}
}
