//go:build !linux

package tcpx

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
)

var errUnsupported = fmt.Errorf("tcpx: socket options on %s: %w", runtime.GOOS, errors.ErrUnsupported)

func setSockopts(syscall.RawConn, *Config, bool) error { return errUnsupported }

func emss(syscall.RawConn) (int, error) { return 0, errUnsupported }

// readable cannot peek here: AwaitReadable then waits for the deadline.
func readable(uintptr) (bool, error) { return false, nil }

func buffered(syscall.RawConn) (int, error) { return 0, errUnsupported }

func unsent(syscall.RawConn) (int, error) { return 0, errUnsupported }

func info(syscall.RawConn) (Stats, error) { return Stats{}, errUnsupported }

func stateClosed(syscall.RawConn) bool { return false }

func pendingError(syscall.RawConn) error { return nil }

func (q *SendQueue) probe(uintptr) { q.err = errUnsupported }
