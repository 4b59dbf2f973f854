package main

import (
	"math/bits"
	"os"

	"golang.org/x/sys/unix"
)

// deviceBlockSize is the logical block size Linux's nvmet gives a
// namespace over path: a block device's logical block size, or for a file
// its file system's block size, at most 4096 (nvmet_file_ns_enable).
func deviceBlockSize(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFBLK {
		return unix.IoctlGetInt(int(f.Fd()), unix.BLKSSZGET)
	}
	b := min(max(int(st.Blksize), 512), 4096)
	return 1 << (bits.Len(uint(b)) - 1), nil // i_blkbits: a power of two
}
