package target

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// writeDSync writes p at off and returns once it is durable: pwritev2 with
// RWF_DSYNC, which syncs that write's range as nvmet's IOCB_DSYNC does,
// on the same descriptor as every other write; a kernel without it
// (before 4.7) gets the write and an fdatasync of the file.
func writeDSync(f *os.File, p []byte, off int64) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	done := 0
	var werr error
	cerr := rc.Control(func(fd uintptr) {
		for done < len(p) {
			n, err := unix.Pwritev2(int(fd), [][]byte{p[done:]}, off+int64(done), unix.RWF_DSYNC)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				werr = err
				return
			}
			done += n
		}
	})
	if cerr != nil {
		return done, cerr
	}
	if errors.Is(werr, unix.ENOSYS) || errors.Is(werr, unix.EOPNOTSUPP) {
		n, err := f.WriteAt(p[done:], off+int64(done))
		done += n
		if err != nil {
			return done, err
		}
		return done, unix.Fdatasync(int(f.Fd()))
	}
	if werr != nil {
		return done, &os.PathError{Op: "pwritev2", Path: f.Name(), Err: werr}
	}
	return done, nil
}
