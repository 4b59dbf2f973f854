//go:build unix

package verbs

import "syscall"

func setRcvBuf(fd uintptr, n int) {
	syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, n)
}
