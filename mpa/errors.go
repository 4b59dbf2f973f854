package mpa

import (
	"errors"
	"fmt"
)

// LLPCode is an MPA error code, reported in a Terminate message with layer LLP
// and error type MPA (RFC 5044 section 8; RFC 6581 section 10 adds 5..7).
type LLPCode uint8

// The LLP error codes.
const (
	CodeStreamLost        LLPCode = 0x01 // TCP connection closed, terminated or lost
	CodeCRC               LLPCode = 0x02 // MPA CRC error
	CodeMarker            LLPCode = 0x03 // MPA marker and ULPDU length field mismatch
	CodeInvalidReqRep     LLPCode = 0x04 // invalid MPA Request or Reply frame
	CodeLocalCatastrophic LLPCode = 0x05 // local catastrophic error (RFC 6581)
	CodeInsufficientIRD   LLPCode = 0x06 // insufficient IRD resources (RFC 6581)
	CodeNoMatchingRTR     LLPCode = 0x07 // no matching RTR option (RFC 6581)
)

var llpCodeNames = [...]string{
	CodeStreamLost:        "TCP connection lost",
	CodeCRC:               "MPA CRC error",
	CodeMarker:            "MPA marker and ULPDU length mismatch",
	CodeInvalidReqRep:     "invalid MPA request/reply",
	CodeLocalCatastrophic: "local catastrophic error",
	CodeInsufficientIRD:   "insufficient IRD resources",
	CodeNoMatchingRTR:     "no matching RTR option",
}

func (c LLPCode) String() string {
	if int(c) < len(llpCodeNames) && llpCodeNames[c] != "" {
		return llpCodeNames[c]
	}
	return fmt.Sprintf("LLP code %#02x", uint8(c))
}

// Error is an MPA-layer error detected locally. Code says which LLP error code
// the Terminate message for it carries.
type Error struct {
	Code LLPCode
	Msg  string // detail for humans
	Err  error  // underlying cause, if any (for example an I/O error)
}

func (e *Error) Error() string {
	s := "mpa: " + e.Code.String()
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, &Error{Code: c}) match any *Error with code c.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Msg == "" && t.Code == e.Code
}

func errorf(code LLPCode, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Sentinel values for errors.Is.
var (
	ErrStreamLost      = &Error{Code: CodeStreamLost}
	ErrCRC             = &Error{Code: CodeCRC}
	ErrMarker          = &Error{Code: CodeMarker}
	ErrInvalidFrame    = &Error{Code: CodeInvalidReqRep}
	ErrInsufficientIRD = &Error{Code: CodeInsufficientIRD}
	ErrNoMatchingRTR   = &Error{Code: CodeNoMatchingRTR}
)

// ErrRejected is returned to the initiator when the responder's Reply has the
// Reject bit set.
var ErrRejected = errors.New("mpa: connection rejected by peer")
