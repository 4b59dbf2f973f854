//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package perf

import "golang.org/x/sys/unix"

const ioctlGetTermios = unix.TIOCGETA
