//go:build linux

// Command blkstress runs package stress on a Linux block device with
// O_DIRECT (zeroing with BLKZEROOUT, which Linux's NVMe host sends as
// Write Zeroes; flushing with fdatasync): in the siw VM, on the block
// device the kernel's NVMe host makes of our target.
//
// With -least (counts as the STRESS line prints them, "writes=50
// flushes=2 ..."), the random phase goes on after -time until the counts
// are reached, for at most -limit.
//
// Output, one line each: "MISMATCH ..." and exit status 1 on the first
// wrong sector; "IOERR ..." and exit status 2 on an I/O error; at the end
// "STRESS ..." (the counts), "VERIFY ok sectors=N" and "SHA256 <hex>" of
// the whole device, which the test compares with what the target holds.
package main

import (
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/goiwarp/iwarp/internal/blkstress"
)

const blkZeroOut = 0x127f // _IO(0x12, 127)

// blockDev is a block device opened with O_DIRECT.
type blockDev struct {
	fd   int
	size int64
}

func (d *blockDev) Size() int64 { return d.size }

func (d *blockDev) ReadAt(p []byte, off int64) (int, error) { return syscall.Pread(d.fd, p, off) }

func (d *blockDev) WriteAt(p []byte, off int64) (int, error) { return syscall.Pwrite(d.fd, p, off) }

func (d *blockDev) Zero(off, n int64) error {
	arg := [2]uint64{uint64(off), uint64(n)}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(d.fd), blkZeroOut, uintptr(unsafe.Pointer(&arg))); e != 0 {
		return fmt.Errorf("BLKZEROOUT: %w", e)
	}
	return nil
}

func (d *blockDev) Flush() error { return syscall.Fdatasync(d.fd) }

// Alloc maps anonymous memory: page-aligned, as O_DIRECT needs.
func (d *blockDev) Alloc(n int) []byte {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		fail(2, "IOERR mmap: %v", err)
	}
	return b
}

func main() {
	dev := flag.String("dev", "/dev/nvme0n1", "block device")
	workers := flag.Int("workers", 16, "workers, each with its own stripe")
	dur := flag.Duration("time", 20*time.Second, "how long the random phase runs")
	maxIO := flag.Int("max", 2<<20, "largest I/O in octets")
	seed := flag.Uint64("seed", uint64(time.Now().UnixNano()), "random seed")
	leastFlag := flag.String("least", "", `least I/O counts of the random phase, as "writes=50 reads=50 flushes=2"`)
	limit := flag.Duration("limit", 0, "the random phase's bound with -least (default 10 × -time)")
	flag.Parse()
	least, err := parseCounts(*leastFlag)
	if err != nil {
		fail(2, "-least: %v", err)
	}
	fd, err := syscall.Open(*dev, syscall.O_RDWR|syscall.O_DIRECT, 0)
	if err != nil {
		fail(2, "IOERR open %s: %v", *dev, err)
	}
	size, err := syscall.Seek(fd, 0, 2)
	if err != nil {
		fail(2, "IOERR size of %s: %v", *dev, err)
	}
	d := &blockDev{fd: fd, size: size}
	fmt.Printf("DEVICE %s %d octets, %d workers, seed %d\n", *dev, size, *workers, *seed)
	c, err := blkstress.Run(d, blkstress.Config{Workers: *workers, Time: *dur, Max: *maxIO, Seed: *seed, Least: least, Limit: *limit})
	fmt.Printf("STRESS %v\n", c)
	var me *blkstress.MismatchError
	switch {
	case errors.As(err, &me):
		fail(1, "MISMATCH %v", err)
	case err != nil:
		fail(2, "IOERR %v", err)
	}
	fmt.Printf("VERIFY ok sectors=%d\n", c.Sectors)
	sum, err := blkstress.Sum(d)
	if err != nil {
		fail(2, "IOERR %v", err)
	}
	fmt.Printf("SHA256 %s\n", hex.EncodeToString(sum[:]))
}

// parseCounts reads I/O counts written as blkstress.Counts prints them.
func parseCounts(s string) (blkstress.Counts, error) {
	var c blkstress.Counts
	fields := map[string]*int64{"writes": &c.Writes, "reads": &c.Reads, "zeroes": &c.Zeroes, "flushes": &c.Flushes,
		"big": &c.Big, "midpage": &c.MidPage}
	for _, f := range strings.Fields(s) {
		k, v, _ := strings.Cut(f, "=")
		p, ok := fields[k]
		if !ok {
			return c, fmt.Errorf("%q: no such count", f)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return c, fmt.Errorf("%q: not a count", f)
		}
		*p = n
	}
	return c, nil
}

func fail(code int, format string, args ...any) {
	fmt.Printf(format+"\n", args...)
	os.Exit(code)
}
