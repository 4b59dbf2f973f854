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

// slowDev is a memDev whose every operation takes a while.
type slowDev struct {
	memDev
	d time.Duration
}

func (s *slowDev) ReadAt(p []byte, off int64) (int, error) {
	time.Sleep(s.d)
	return s.memDev.ReadAt(p, off)
}

func (s *slowDev) WriteAt(p []byte, off int64) (int, error) {
	time.Sleep(s.d)
	return s.memDev.WriteAt(p, off)
}

func (s *slowDev) Zero(off, n int64) error {
	time.Sleep(s.d)
	return s.memDev.Zero(off, n)
}

func (s *slowDev) Flush() error {
	time.Sleep(s.d)
	return nil
}

// With Least, a device too slow for Time gets the I/Os asked for all the
// same; Time alone would stop it after a few.
func TestRunLeast(t *testing.T) {
	d := &slowDev{memDev: memDev{b: make([]byte, 1<<20)}, d: 5 * time.Millisecond}
	least := Counts{Writes: 40, Reads: 30, Zeroes: 2, Flushes: 2, MidPage: 20}
	cfg := Config{Workers: 4, Time: 10 * time.Millisecond, Max: 64 << 10, Seed: 2, Least: least, Limit: time.Minute}
	start := time.Now()
	c, err := Run(d, cfg)
	require.NoError(t, err)
	t.Logf("%v in %v", c, time.Since(start).Round(time.Millisecond))
	require.GreaterOrEqual(t, c.Writes, least.Writes)
	require.GreaterOrEqual(t, c.Reads, least.Reads)
	require.GreaterOrEqual(t, c.Zeroes, least.Zeroes)
	require.GreaterOrEqual(t, c.Flushes, least.Flushes)
	require.GreaterOrEqual(t, c.MidPage, least.MidPage)
	require.Less(t, time.Since(start), time.Minute, "ended once Least was reached")
	require.Equal(t, int64(1<<20/Sector), c.Sectors, "every sector checked at the end")
}

// Limit ends a run that does not reach Least, without an error: the
// caller judges the counts.
func TestRunLeastLimit(t *testing.T) {
	d := &slowDev{memDev: memDev{b: make([]byte, 1<<20)}, d: time.Millisecond}
	cfg := Config{Workers: 2, Time: 20 * time.Millisecond, Max: 64 << 10, Seed: 3, Least: Counts{Writes: 1 << 40}, Limit: 300 * time.Millisecond}
	start := time.Now()
	c, err := Run(d, cfg)
	took := time.Since(start)
	require.NoError(t, err)
	require.Less(t, c.Writes, int64(1<<40))
	require.GreaterOrEqual(t, took, 300*time.Millisecond, "ran to Limit")
	require.Less(t, took, 30*time.Second, "and stopped there")
}
