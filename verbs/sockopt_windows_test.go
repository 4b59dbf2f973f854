package verbs

import "syscall"

func setRcvBuf(fd uintptr, n int) {
	syscall.SetsockoptInt(syscall.Handle(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, n)
}
