// Package blkstress is a block device's data-integrity judge: workers each
// own a disjoint stripe of a Device and, for a while, write, read, zero
// and flush it at random sector offsets and sizes from one sector to Max,
// from buffers at random 512-octet offsets into a page. Every sector
// written carries its number, the write's sequence number and a fill
// derived from both; each worker keeps the sequence number of every
// sector it owns and checks each read against it, and at the end every
// stripe is read back and checked. Run fails on the first sector that is
// not what was last written there. The blkstress command runs it on a
// Linux block device with O_DIRECT; the interop tests also run it on
// namespaces of nvmeof/host.
package blkstress

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Sector is the unit of I/O and of checking.
const Sector = 512

// Device is what Run drives: Sector-aligned reads and writes of buffers
// that Alloc returned (or slices of them at Sector multiples), zeroing a
// range so that it reads as zeros, and flushing.
type Device interface {
	Size() int64
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Zero(off, n int64) error
	Flush() error
	// Alloc returns n octets that start on a page.
	Alloc(n int) []byte
}

// Config is a run's shape.
type Config struct {
	Workers int           // each with its own stripe (default 16)
	Time    time.Duration // of the random phase (default 20 s)
	Steps   int           // each worker's least steps, even past Time: what a run covers on a slow machine too
	Max     int           // largest I/O in octets (default 2 MiB)
	Align   int           // every I/O's offset and length a multiple of it: a multiple of Sector (default Sector)
	Seed    uint64
	// Least, if set, makes the random phase go on after Time until each of
	// its I/O counts (Writes, Reads, Zeroes, Flushes, Big, MidPage) is
	// reached, for at most Limit in all (default 10 × Time): a judge that
	// wants so many of each kind gets them from a slow device too, and
	// from a fast one no more than Time's worth.
	Least Counts
	Limit time.Duration
}

// Counts is what a run did.
type Counts struct {
	Writes, Reads, Zeroes, Flushes, Big, MidPage int64
	Written, Read                                int64
	Sectors                                      int64 // checked at the end
}

func (c Counts) String() string {
	return fmt.Sprintf("writes=%d reads=%d zeroes=%d flushes=%d big=%d midpage=%d written=%d read=%d",
		c.Writes, c.Reads, c.Zeroes, c.Flushes, c.Big, c.MidPage, c.Written, c.Read)
}

// MismatchError is a sector that was not what was last written there.
type MismatchError struct {
	Worker              uint32
	LBA, First, N       int64 // the sector, and the read it was part of
	BufOff              int   // the read buffer's offset into its page
	Want                uint32
	GotLBA              uint64
	GotWrite, GotWorker uint32
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("worker %d: sector %d (read of %d sectors from %d, buffer offset %d): want write %d, got sector %d write %d worker %d",
		e.Worker, e.LBA, e.N, e.First, e.BufOff, e.Want, e.GotLBA, e.GotWrite, e.GotWorker)
}

type counts struct {
	writes, reads, zeroes, flushes, big, midPage atomic.Int64
	written, read                                atomic.Int64
}

// reached reports whether every I/O count is at least least's.
func (c *counts) reached(least Counts) bool {
	return c.writes.Load() >= least.Writes && c.reads.Load() >= least.Reads && c.zeroes.Load() >= least.Zeroes &&
		c.flushes.Load() >= least.Flushes && c.big.Load() >= least.Big && c.midPage.Load() >= least.MidPage
}

// Run stresses d as cfg says and checks every sector at the end.
func Run(d Device, cfg Config) (Counts, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 16
	}
	if cfg.Time <= 0 {
		cfg.Time = 20 * time.Second
	}
	if cfg.Limit <= 0 {
		cfg.Limit = 10 * cfg.Time
	}
	if cfg.Max <= 0 {
		cfg.Max = 2 << 20
	}
	if cfg.Align <= 0 {
		cfg.Align = Sector
	}
	if cfg.Align%Sector != 0 || cfg.Max < cfg.Align {
		return Counts{}, fmt.Errorf("stress: Align %d: want a multiple of %d up to Max", cfg.Align, Sector)
	}
	stripe := d.Size() / int64(cfg.Workers) / int64(cfg.Align) * int64(cfg.Align)
	if stripe == 0 {
		return Counts{}, errors.New("stress: the device is smaller than a sector a worker")
	}
	var c counts
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	fail := func(err error) { failed.CompareAndSwap(nil, &err) }
	start := time.Now()
	deadline, limit := start.Add(cfg.Time), start.Add(max(cfg.Limit, cfg.Time))
	more := func() bool {
		now := time.Now()
		return now.Before(deadline) || now.Before(limit) && !c.reached(cfg.Least)
	}
	ws := make([]*worker, cfg.Workers)
	for i := range ws {
		ws[i] = &worker{id: uint32(i + 1), d: d, base: stripe * int64(i), n: stripe / Sector,
			rnd: rand.New(rand.NewPCG(cfg.Seed, uint64(i))), max: cfg.Max, unit: int64(cfg.Align / Sector), c: &c}
		ws[i].seq = make([]uint32, ws[i].n)
		ws[i].buf = d.Alloc(cfg.Max + 4096)
		wg.Add(1)
		go func(w *worker) {
			defer wg.Done()
			for i := 0; (i < cfg.Steps || more()) && failed.Load() == nil; i++ {
				if err := w.step(); err != nil {
					fail(err)
				}
			}
		}(ws[i])
	}
	wg.Wait()
	out := Counts{Writes: c.writes.Load(), Reads: c.reads.Load(), Zeroes: c.zeroes.Load(), Flushes: c.flushes.Load(),
		Big: c.big.Load(), MidPage: c.midPage.Load(), Written: c.written.Load(), Read: c.read.Load()}
	if p := failed.Load(); p != nil {
		return out, *p
	}
	if err := d.Flush(); err != nil {
		return out, fmt.Errorf("flush: %w", err)
	}
	for _, w := range ws {
		wg.Add(1)
		go func(w *worker) {
			defer wg.Done()
			if err := w.verifyAll(); err != nil {
				fail(err)
			}
		}(w)
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		return out, *p
	}
	out.Sectors = stripe / Sector * int64(cfg.Workers)
	return out, nil
}

// Sum returns the SHA-256 of the whole device.
func Sum(d Device) ([32]byte, error) {
	h := sha256.New()
	buf := d.Alloc(1 << 20)
	size := d.Size()
	for off := int64(0); off < size; off += int64(len(buf)) {
		p := buf[:min(int64(len(buf)), size-off)]
		if _, err := d.ReadAt(p, off); err != nil {
			return [32]byte{}, fmt.Errorf("read %d at %d: %w", len(p), off, err)
		}
		h.Write(p)
	}
	var s [32]byte
	h.Sum(s[:0])
	return s, nil
}

type worker struct {
	id   uint32
	d    Device
	base int64    // the stripe's first octet
	n    int64    // sectors in the stripe
	seq  []uint32 // per sector: the write that put it there, 0 for zeros
	next uint32
	rnd  *rand.Rand
	max  int
	unit int64 // sectors an I/O's offset and length are multiples of
	buf  []byte
	c    *counts
}

// pick returns a random run of sectors in the stripe and a buffer for it
// at a random 512-octet offset into its first page.
func (w *worker) pick() (first, n int64, p []byte) {
	var want int64
	switch r := w.rnd.IntN(10); {
	case r < 4:
		want = 1 + w.rnd.Int64N(8) // up to 4 KiB: in a command capsule
	case r < 8:
		want = 9 + w.rnd.Int64N(248) // up to 128 KiB
	default:
		want = 1 + w.rnd.Int64N(int64(w.max/Sector))
	}
	n = min((want+w.unit-1)/w.unit*w.unit, w.n, int64(w.max/Sector)/w.unit*w.unit)
	first = w.rnd.Int64N((w.n-n)/w.unit+1) * w.unit
	shift := Sector * w.rnd.IntN(8)
	if shift != 0 {
		w.c.midPage.Add(1)
	}
	if n*Sector > 1<<20 {
		w.c.big.Add(1)
	}
	return first, n, w.buf[shift : shift+int(n*Sector)]
}

func (w *worker) step() error {
	switch r := w.rnd.IntN(100); {
	case r < 55:
		first, n, p := w.pick()
		for i := range n {
			w.next++
			w.seq[first+i] = w.next
			Stamp(p[i*Sector:(i+1)*Sector], w.base/Sector+first+i, w.next, w.id)
		}
		if _, err := w.d.WriteAt(p, w.base+first*Sector); err != nil {
			return fmt.Errorf("worker %d: write %d at %d: %w", w.id, len(p), w.base+first*Sector, err)
		}
		w.c.writes.Add(1)
		w.c.written.Add(int64(len(p)))
	case r < 95:
		first, n, p := w.pick()
		return w.readCheck(first, n, p)
	case r < 98:
		first, n, _ := w.pick()
		if err := w.d.Zero(w.base+first*Sector, n*Sector); err != nil {
			return fmt.Errorf("worker %d: zero %d at %d: %w", w.id, n*Sector, w.base+first*Sector, err)
		}
		clear(w.seq[first : first+n])
		w.c.zeroes.Add(1)
	default:
		if err := w.d.Flush(); err != nil {
			return fmt.Errorf("worker %d: flush: %w", w.id, err)
		}
		w.c.flushes.Add(1)
	}
	return nil
}

// readCheck reads n sectors from first into p and checks each.
func (w *worker) readCheck(first, n int64, p []byte) error {
	for i := range p {
		p[i] = 0xa5 // nothing left over from before passes for data read
	}
	if _, err := w.d.ReadAt(p, w.base+first*Sector); err != nil {
		return fmt.Errorf("worker %d: read %d at %d: %w", w.id, len(p), w.base+first*Sector, err)
	}
	var want [Sector]byte
	for i := range n {
		got := p[i*Sector : (i+1)*Sector]
		s := w.seq[first+i]
		if s == 0 {
			clear(want[:])
		} else {
			Stamp(want[:], w.base/Sector+first+i, s, w.id)
		}
		if string(got) != string(want[:]) {
			return &MismatchError{Worker: w.id, LBA: w.base/Sector + first + i, First: w.base/Sector + first, N: n,
				BufOff: int(uintptr(unsafe.Pointer(&p[0])) % 4096), Want: s, GotLBA: binary.LittleEndian.Uint64(got),
				GotWrite: binary.LittleEndian.Uint32(got[8:]), GotWorker: binary.LittleEndian.Uint32(got[12:])}
		}
	}
	w.c.reads.Add(1)
	w.c.read.Add(int64(len(p)))
	return nil
}

// verifyAll reads the whole stripe back and checks it.
func (w *worker) verifyAll() error {
	step := int64(len(w.buf)-4096) / Sector / w.unit * w.unit
	for first := int64(0); first < w.n; first += step {
		n := min(step, w.n-first)
		if err := w.readCheck(first, n, w.buf[:n*Sector]); err != nil {
			return err
		}
	}
	return nil
}

// Stamp fills a sector as write seq of worker id put it at sector lba:
// the three numbers, then a fill that depends on all of them.
func Stamp(p []byte, lba int64, seq, id uint32) {
	binary.LittleEndian.PutUint64(p, uint64(lba))
	binary.LittleEndian.PutUint32(p[8:], seq)
	binary.LittleEndian.PutUint32(p[12:], id)
	x := uint64(lba)*0x9e3779b97f4a7c15 ^ uint64(seq)<<32 ^ uint64(id) | 1
	for i := 16; i < Sector; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(p[i:], x)
	}
}
