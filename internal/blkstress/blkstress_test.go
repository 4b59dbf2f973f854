package blkstress

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// memDev is a Device in memory; corrupt, if set, may change what a read
// returns, and dropWrite whether a write is lost.
type memDev struct {
	mu        sync.Mutex
	b         []byte
	corrupt   func(p []byte, off int64)
	dropWrite func(off int64) bool
}

func (d *memDev) Size() int64 { return int64(len(d.b)) }

func (d *memDev) ReadAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	copy(p, d.b[off:])
	if d.corrupt != nil {
		d.corrupt(p, off)
	}
	return len(p), nil
}

func (d *memDev) WriteAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dropWrite == nil || !d.dropWrite(off) {
		copy(d.b[off:], p)
	}
	return len(p), nil
}

func (d *memDev) Zero(off, n int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.b[off : off+n])
	return nil
}

func (d *memDev) Flush() error { return nil }

func (d *memDev) Alloc(n int) []byte { return make([]byte, n) }

// quick runs 200 ms, and 100 steps a worker however slow the machine:
// with its seed, enough for every kind of step the tests count.
var quick = Config{Workers: 4, Time: 200 * time.Millisecond, Steps: 100, Max: 256 << 10, Seed: 1}

func TestRunPasses(t *testing.T) {
	d := &memDev{b: make([]byte, 8<<20)}
	c, err := Run(d, quick)
	require.NoError(t, err)
	require.Positive(t, c.Writes)
	require.Positive(t, c.Reads)
	require.Positive(t, c.Zeroes)
	require.Equal(t, int64(8<<20/Sector), c.Sectors, "every sector checked at the end")
	s1, err := Sum(d)
	require.NoError(t, err)
	d.b[12345] ^= 1
	s2, err := Sum(d)
	require.NoError(t, err)
	require.NotEqual(t, s1, s2)
}

// A flipped bit in one read, and lost writes, are each found.
func TestRunFindsCorruption(t *testing.T) {
	var once atomic.Bool
	d := &memDev{b: make([]byte, 8<<20), corrupt: func(p []byte, off int64) {
		if len(p) > 600 && once.CompareAndSwap(false, true) {
			p[517] ^= 0x10
		}
	}}
	_, err := Run(d, quick)
	var me *MismatchError
	require.True(t, errors.As(err, &me), "%v", err)

	// Every write to the first worker's stripe lost.
	d = &memDev{b: make([]byte, 8<<20), dropWrite: func(off int64) bool { return off < 2<<20 }}
	_, err = Run(d, quick)
	require.True(t, errors.As(err, &me), "lost writes: %v", err)
	require.EqualValues(t, 1, me.Worker)
}

// With Align, every I/O is a multiple of it (a namespace of 4 KiB blocks).
func TestRunAligned(t *testing.T) {
	d := &alignDev{memDev: memDev{b: make([]byte, 8<<20)}, align: 4096}
	cfg := quick
	cfg.Align = 4096
	c, err := Run(d, cfg)
	require.NoError(t, err)
	require.Positive(t, c.Writes)
	require.Zero(t, d.bad.Load(), "I/Os not a multiple of 4096")
	d = &alignDev{memDev: memDev{b: make([]byte, 8<<20)}, align: 4096}
	cfg.Align = 0
	_, err = Run(d, cfg)
	require.NoError(t, err)
	require.Positive(t, d.bad.Load(), "without Align, sector-sized I/Os")
}

type alignDev struct {
	memDev
	align int64
	bad   atomic.Int64
}

func (d *alignDev) check(n int, off int64) {
	if int64(n)%d.align != 0 || off%d.align != 0 {
		d.bad.Add(1)
	}
}

func (d *alignDev) ReadAt(p []byte, off int64) (int, error) {
	d.check(len(p), off)
	return d.memDev.ReadAt(p, off)
}

func (d *alignDev) WriteAt(p []byte, off int64) (int, error) {
	d.check(len(p), off)
	return d.memDev.WriteAt(p, off)
}

func (d *alignDev) Zero(off, n int64) error {
	d.check(int(n), off)
	return d.memDev.Zero(off, n)
}
