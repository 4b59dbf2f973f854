//go:build !unix

package mpa

import (
	"io"
	"net"
	"syscall"
)

// rawConnOf finds no raw connection: the Reader reads through io.Reader and
// keeps its buffer while idle.
func rawConnOf(io.Reader) (net.Conn, syscall.RawConn) { return nil, nil }

func (r *Reader) rawRead(uintptr) bool { panic("mpa: no raw reads on this platform") }
