//go:build unix && (!linux || race)

package mpa

import (
	"errors"
	"syscall"
)

// sysRead is read(2) through syscall.Read, where a raw system call is not
// the way (OpenBSD's go through libc) or the race detector should see the
// write into p.
func sysRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), p)
	if err == nil {
		return n, 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return n, e
	}
	return n, syscall.EIO
}
