//go:build linux

// Command blkstress is a block device's data-integrity judge for the
// interop tests: it runs in the siw VM against the block device the
// kernel's NVMe host makes of our target, and fails on the first octet
// that is not what was last written there.
//
// Workers each own a disjoint stripe of the device and, for a while, write,
// read, zero (BLKZEROOUT: Write Zeroes) and flush it with O_DIRECT at random
// sector offsets and sizes from one sector to -max (which the block layer
// splits at the controller's MDTS), from buffers at random 512-octet
// offsets into a page, so that the host's SGLs start mid-page. Every
// sector written carries its number, the write's sequence number and a
// fill derived from both; each worker keeps the sequence number of every
// sector it owns and checks each read against it. At the end every stripe
// is read back and checked, and one pass prints the SHA-256 of the whole
// device, which the test compares with what the target holds.
//
// Output, one line each: "MISMATCH ..." and exit status 1 on the first
// wrong sector; "IOERR ..." and exit status 2 on an I/O error; at the end
// "STRESS ..." (the counts), "VERIFY ok sectors=N" and "SHA256 <hex>".
package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

const sector = 512

// Linux's block device ioctls.
const (
	blkZeroOut = 0x127f // _IO(0x12, 127)
)

type counts struct {
	writes, reads, zeroes, flushes, big, midPage atomic.Int64
	written, read                                atomic.Int64
}

func main() {
	dev := flag.String("dev", "/dev/nvme0n1", "block device")
	workers := flag.Int("workers", 16, "workers, each with its own stripe")
	dur := flag.Duration("time", 20*time.Second, "how long the random phase runs")
	maxIO := flag.Int("max", 2<<20, "largest I/O in octets")
	seed := flag.Uint64("seed", uint64(time.Now().UnixNano()), "random seed")
	flag.Parse()
	fd, err := syscall.Open(*dev, syscall.O_RDWR|syscall.O_DIRECT, 0)
	if err != nil {
		fail(2, "IOERR open %s: %v", *dev, err)
	}
	size, err := syscall.Seek(fd, 0, 2)
	if err != nil {
		fail(2, "IOERR size of %s: %v", *dev, err)
	}
	fmt.Printf("DEVICE %s %d octets, %d workers, seed %d\n", *dev, size, *workers, *seed)
	stripe := size / int64(*workers) / sector * sector
	var c counts
	var wg sync.WaitGroup
	deadline := time.Now().Add(*dur)
	ws := make([]*worker, *workers)
	for i := range ws {
		ws[i] = &worker{id: uint32(i + 1), fd: fd, base: stripe * int64(i), n: stripe / sector,
			rnd: rand.New(rand.NewPCG(*seed, uint64(i))), max: *maxIO, c: &c}
		ws[i].seq = make([]uint32, ws[i].n)
		ws[i].buf = alignedBuf(*maxIO + 4096)
		wg.Add(1)
		go func(w *worker) {
			defer wg.Done()
			for time.Now().Before(deadline) {
				w.step()
			}
		}(ws[i])
	}
	wg.Wait()
	fmt.Printf("STRESS writes=%d reads=%d zeroes=%d flushes=%d big=%d midpage=%d written=%d read=%d\n",
		c.writes.Load(), c.reads.Load(), c.zeroes.Load(), c.flushes.Load(), c.big.Load(), c.midPage.Load(),
		c.written.Load(), c.read.Load())
	if err := syscall.Fdatasync(fd); err != nil {
		fail(2, "IOERR fdatasync: %v", err)
	}
	for _, w := range ws {
		wg.Add(1)
		go func(w *worker) { defer wg.Done(); w.verifyAll() }(w)
	}
	wg.Wait()
	fmt.Printf("VERIFY ok sectors=%d\n", stripe/sector*int64(*workers))
	h := sha256.New()
	buf := alignedBuf(1 << 20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		p := buf[:min(int64(len(buf)), size-off)]
		if _, err := syscall.Pread(fd, p, off); err != nil {
			fail(2, "IOERR read %d at %d: %v", len(p), off, err)
		}
		h.Write(p)
	}
	fmt.Printf("SHA256 %s\n", hex.EncodeToString(h.Sum(nil)))
}

func fail(code int, format string, args ...any) {
	fmt.Printf(format+"\n", args...)
	os.Exit(code)
}

// alignedBuf returns n octets that start on a page, as O_DIRECT needs.
func alignedBuf(n int) []byte {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		fail(2, "IOERR mmap: %v", err)
	}
	return b
}

type worker struct {
	id   uint32
	fd   int
	base int64    // the stripe's first octet
	n    int64    // sectors in the stripe
	seq  []uint32 // per sector: the write that put it there, 0 for zeros
	next uint32
	rnd  *rand.Rand
	max  int
	buf  []byte
	c    *counts
}

// pick returns a random run of sectors in the stripe and a buffer for it
// at a random 512-octet offset into its first page.
func (w *worker) pick() (first, n int64, p []byte) {
	var want int64
	switch r := w.rnd.IntN(10); {
	case r < 4:
		want = 1 + w.rnd.Int64N(8) // up to 4 KiB: in the command capsule
	case r < 8:
		want = 9 + w.rnd.Int64N(248) // up to 128 KiB
	default:
		want = 1 + w.rnd.Int64N(int64(w.max/sector))
	}
	n = min(want, w.n)
	first = w.rnd.Int64N(w.n - n + 1)
	shift := sector * w.rnd.IntN(8)
	if shift != 0 {
		w.c.midPage.Add(1)
	}
	if n*sector > 1<<20 {
		w.c.big.Add(1)
	}
	return first, n, w.buf[shift : shift+int(n*sector)]
}

func (w *worker) step() {
	switch r := w.rnd.IntN(100); {
	case r < 55:
		first, n, p := w.pick()
		for i := range n {
			w.next++
			w.seq[first+i] = w.next
			stamp(p[i*sector:(i+1)*sector], w.base/sector+first+i, w.next, w.id)
		}
		if _, err := syscall.Pwrite(w.fd, p, w.base+first*sector); err != nil {
			fail(2, "IOERR worker %d: write %d at %d: %v", w.id, len(p), w.base+first*sector, err)
		}
		w.c.writes.Add(1)
		w.c.written.Add(int64(len(p)))
	case r < 95:
		first, n, p := w.pick()
		w.readCheck(first, n, p)
	case r < 98:
		first, n, _ := w.pick()
		arg := [2]uint64{uint64(w.base + first*sector), uint64(n * sector)}
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(w.fd), blkZeroOut, uintptr(unsafe.Pointer(&arg))); e != 0 {
			fail(2, "IOERR worker %d: BLKZEROOUT %d at %d: %v", w.id, arg[1], arg[0], e)
		}
		clear(w.seq[first : first+n])
		w.c.zeroes.Add(1)
	default:
		if err := syscall.Fdatasync(w.fd); err != nil {
			fail(2, "IOERR worker %d: fdatasync: %v", w.id, err)
		}
		w.c.flushes.Add(1)
	}
}

// readCheck reads n sectors from first into p and checks each.
func (w *worker) readCheck(first, n int64, p []byte) {
	for i := range p {
		p[i] = 0xa5 // nothing left over from before passes for data read
	}
	if _, err := syscall.Pread(w.fd, p, w.base+first*sector); err != nil {
		fail(2, "IOERR worker %d: read %d at %d: %v", w.id, len(p), w.base+first*sector, err)
	}
	var want [sector]byte
	for i := range n {
		got := p[i*sector : (i+1)*sector]
		s := w.seq[first+i]
		if s == 0 {
			clear(want[:])
		} else {
			stamp(want[:], w.base/sector+first+i, s, w.id)
		}
		if string(got) != string(want[:]) {
			fail(1, "MISMATCH worker %d: sector %d (read of %d sectors from %d, buffer offset %d): want write %d, got sector %d write %d worker %d",
				w.id, w.base/sector+first+i, n, w.base/sector+first, int(uintptr(unsafe.Pointer(&p[0])))%4096,
				s, binary.LittleEndian.Uint64(got), binary.LittleEndian.Uint32(got[8:]), binary.LittleEndian.Uint32(got[12:]))
		}
	}
	w.c.reads.Add(1)
	w.c.read.Add(int64(len(p)))
}

// verifyAll reads the whole stripe back and checks it.
func (w *worker) verifyAll() {
	step := int64(len(w.buf)-4096) / sector
	for first := int64(0); first < w.n; first += step {
		n := min(step, w.n-first)
		w.readCheck(first, n, w.buf[:n*sector])
	}
}

// stamp fills a sector as write seq of worker id put it at sector lba:
// the three numbers, then a fill that depends on all of them.
func stamp(p []byte, lba int64, seq, id uint32) {
	binary.LittleEndian.PutUint64(p, uint64(lba))
	binary.LittleEndian.PutUint32(p[8:], seq)
	binary.LittleEndian.PutUint32(p[12:], id)
	x := uint64(lba)*0x9e3779b97f4a7c15 ^ uint64(seq)<<32 ^ uint64(id) | 1
	for i := 16; i < sector; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(p[i:], x)
	}
}
