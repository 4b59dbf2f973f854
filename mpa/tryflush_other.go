//go:build !unix || solaris || aix

package mpa

import (
	"io"
	"syscall"
)

type iovecs = struct{}

func rawWriterOf(io.Writer) syscall.RawConn { return nil }

// TryFlush writes nothing on this platform and reports false, unless
// nothing is queued: the caller leaves the octets to a Flush.
func (w *Writer) TryFlush() (all bool, err error) { return len(w.vecs) == 0, nil }
