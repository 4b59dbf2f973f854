//go:build !linux

package target

import "os"

// writeDSync writes p at off and returns once it is durable: the write,
// then the file's sync (on darwin F_FULLFSYNC, which also empties the
// drive's cache, where O_SYNC would not).
func writeDSync(f *os.File, p []byte, off int64) (int, error) {
	n, err := f.WriteAt(p, off)
	if err != nil {
		return n, err
	}
	return n, f.Sync()
}
