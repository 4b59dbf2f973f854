//go:build linux && !race

package mpa

import (
	"syscall"
	"unsafe"
)

// sysRead is read(2) with its errno as a number: syscall.Read's error
// interface costs an interface comparison per errno checked, on every read
// of a latency test (docs/measurements.md). (Under the race detector,
// syscall.Read tells it of the write into p: sysread_other.go.)
func sysRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.Syscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	return int(n), e
}
