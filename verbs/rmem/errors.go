package rmem

import (
	"errors"
	"fmt"

	"github.com/goiwarp/iwarp/verbs"
)

var (
	// ErrClosed: the Buffer has been closed.
	ErrClosed = errors.New("rmem: buffer closed")
	// ErrOutOfRange: a call's octets are not all inside the remote buffer;
	// the error is a *RangeError.
	ErrOutOfRange = errors.New("rmem: outside the remote buffer")
	// ErrNoReads: the connection allows no RDMA Reads (its negotiated ORD
	// is 0: the peer's IRD, or the QP's ORD, is none).
	ErrNoReads = errors.New("rmem: the connection allows no RDMA Reads (ORD 0)")
)

// RangeError is a call whose octets [Off, Off+Len) are not all inside the
// remote buffer's Size octets.
type RangeError struct {
	Off  int64
	Len  int
	Size int64
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("rmem: octets %d to %d outside the remote buffer's %d", e.Off, e.Off+int64(e.Len), e.Size)
}

// Unwrap returns ErrOutOfRange.
func (e *RangeError) Unwrap() error { return ErrOutOfRange }

// QPError is a call that failed because the QP ended: one of its WRs (or
// an earlier call's) completed with Status, and Err is the QP's Err, which
// says why.
type QPError struct {
	Status verbs.WCStatus
	Err    error
}

func (e *QPError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("rmem: the QP ended (%v)", e.Status)
	}
	return fmt.Sprintf("rmem: the QP ended (%v): %v", e.Status, e.Err)
}

// Unwrap returns the QP's error.
func (e *QPError) Unwrap() error { return e.Err }
