//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd || solaris || aix

package perf

import (
	"os"

	"golang.org/x/sys/unix"
)

// isTerminalFile says whether f is a terminal: it has terminal attributes.
func isTerminalFile(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), ioctlGetTermios)
	return err == nil
}
