//go:build unix

package mpa

import (
	"io"
	"net"
	"os"
	"syscall"
)

// rawConnOf returns r as a net.Conn with its syscall.RawConn, or nils.
func rawConnOf(r io.Reader) (net.Conn, syscall.RawConn) {
	c, ok := r.(net.Conn)
	sc, ok2 := r.(syscall.Conn)
	if !ok || !ok2 {
		return nil, nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, nil
	}
	return c, raw
}

// rawRead is fill's syscall.RawConn callback: one read(2), as net.Conn's
// Read makes, with its results as Read reports them. A socket with nothing
// to read while the buffer holds nothing is an idle connection: the buffer
// goes back to its pool before RawConn waits.
func (r *Reader) rawRead(fd uintptr) bool {
	r.acquire()
	for {
		n, err := sysRead(fd, r.buf[r.tail:])
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			if r.tail == r.head {
				r.release()
			}
			if r.onWait != nil {
				r.onWait()
			}
			return false // RawConn waits until the socket is readable, then calls again
		case err != 0:
			r.rawErr = r.readError(os.NewSyscallError("read", err))
		case n == 0:
			r.rawErr = io.EOF
		default:
			r.rawN = n
		}
		return true
	}
}
