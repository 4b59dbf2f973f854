//go:build unix

package perf

import (
	"os"

	"golang.org/x/sys/unix"
)

// isTerminalFile says whether f is a terminal: the terminal driver answers
// its window size. TIOCGWINSZ, unlike the request that reads termios, has
// one name on every Unix.
func isTerminalFile(f *os.File) bool {
	_, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	return err == nil
}
