//go:build unix && !solaris && !aix

package mpa

import (
	"io"
	"os"
	"syscall"
	"unsafe"
)

// iovecs is TryFlush's system call argument, kept between calls.
type iovecs = []syscall.Iovec

// rawWriterOf returns w's syscall.RawConn, or nil.
func rawWriterOf(w io.Writer) syscall.RawConn {
	sc, ok := w.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}

// TryFlush writes what the socket takes now, with one writev that never
// waits, and keeps the rest queued for the next Flush or TryFlush. all
// reports whether nothing is left. On a stream that is not a socket it
// writes nothing and reports false: a caller that must not wait leaves
// the octets to whoever may.
//
// It is how a goroutine that must never block on the peer (a receive loop
// answering a Read or a handler's post) sends: asking the socket whether
// it has room and then writing would cost a system call more.
func (w *Writer) TryFlush() (all bool, err error) {
	if len(w.vecs) == 0 {
		return true, nil
	}
	if w.raw == nil {
		return false, nil
	}
	// One piece (a small message's FPDUs, framed into the arena) goes
	// out with write(2): writev would have the kernel copy in and check
	// an iovec array, and this side build and clear one.
	var iov iovecs
	call := "write"
	if len(w.vecs) == 1 && len(w.vecs[0]) > 0 {
		w.rawOne = w.vecs[0]
	} else {
		call = "writev"
		iov = w.iov[:0]
		for _, v := range w.vecs {
			if len(v) > 0 {
				iov = append(iov, syscall.Iovec{Base: &v[0]})
				iov[len(iov)-1].SetLen(len(v))
			}
		}
		w.iov = iov
		if len(iov) == 0 {
			w.reset()
			return true, nil
		}
	}
	if w.rawFn == nil {
		w.rawFn = w.rawWrite // once: a method value made per call would allocate
	}
	err = w.raw.Write(w.rawFn)
	w.rawOne = nil
	clear(iov) // drop the pointers to caller memory
	if err != nil {
		return false, err
	}
	n, errno := w.rawN, w.rawErrno
	switch {
	case errno == syscall.EAGAIN:
		return false, nil
	case errno != 0:
		return false, os.NewSyscallError(call, errno)
	}
	w.written += uint64(n)
	if n == w.queued {
		w.reset()
		return true, nil
	}
	w.consumed(n)
	return false, nil
}

// rawWrite is TryFlush's syscall.RawConn callback: one write(2) of
// w.rawOne or writev(2) of w.iov, that never waits for room.
func (w *Writer) rawWrite(fd uintptr) bool {
	for {
		var r uintptr
		var e syscall.Errno
		if p := w.rawOne; len(p) > 0 {
			r, _, e = syscall.Syscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		} else {
			r, _, e = syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(len(w.iov)))
		}
		if e == syscall.EINTR {
			continue
		}
		w.rawN, w.rawErrno = int(r), e
		return true
	}
}
