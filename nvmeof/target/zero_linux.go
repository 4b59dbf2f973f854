package target

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// fileZero makes n octets at off of f read as zeros: a hole punched if
// deallocate, else zeroed in place, as Linux's nvmet does for Deallocate
// and Write Zeroes.
func fileZero(f *os.File, off, n int64, deallocate bool) error {
	mode := uint32(unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE)
	if deallocate {
		mode = unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE
	}
	err := unix.Fallocate(int(f.Fd()), mode, off, n)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return errors.ErrUnsupported
	}
	return err
}
