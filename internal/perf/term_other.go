//go:build !unix

package perf

import "os"

// isTerminalFile says whether f is a character device, the best guess
// without terminal ioctls (Windows, Plan 9, wasm).
func isTerminalFile(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
