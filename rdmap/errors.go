package rdmap

import (
	"errors"
	"fmt"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
)

// Error is an RDMAP-layer error detected locally; EType and Code are what the
// Terminate message for it carries (RFC 5040 section 4.8).
type Error struct {
	EType uint8
	Code  uint8
	Msg   string // detail for humans
}

func (e *Error) Error() string {
	s := "rdmap: " + Cause{LayerRDMAP, e.EType, e.Code}.describe()
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// Is makes errors.Is(err, &Error{EType: t, Code: c}) match any *Error with the
// same type and code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Msg == "" && t.EType == e.EType && t.Code == e.Code
}

// Errorf returns a *Error with a formatted detail message.
func Errorf(etype, code uint8, format string, args ...any) *Error {
	return &Error{EType: etype, Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Sentinel values for errors.Is.
var (
	ErrInvalidSTag        = &Error{EType: ETypeRemoteProtection, Code: CodeInvalidSTag}
	ErrBaseBounds         = &Error{EType: ETypeRemoteProtection, Code: CodeBaseBounds}
	ErrAccessRights       = &Error{EType: ETypeRemoteProtection, Code: CodeAccessRights}
	ErrSTagNotAssoc       = &Error{EType: ETypeRemoteProtection, Code: CodeSTagNotAssoc}
	ErrTOWrap             = &Error{EType: ETypeRemoteProtection, Code: CodeTOWrap}
	ErrCannotInvalidate   = &Error{EType: ETypeRemoteOperation, Code: CodeCannotInvalidate}
	ErrInvalidVersion     = &Error{EType: ETypeRemoteOperation, Code: CodeInvalidVersion}
	ErrUnexpectedOpcode   = &Error{EType: ETypeRemoteOperation, Code: CodeUnexpectedOpcode}
	ErrCatastrophicStream = &Error{EType: ETypeRemoteOperation, Code: CodeCatastrophicStream}
	ErrMalformed          = &Error{EType: ETypeRemoteOperation, Code: CodeUnspecified}
)

// errMalformed reports an RDMAP header too short for its opcode. RFC 5040 has
// no code for it; "remote operation error: unspecified" is the closest.
func errMalformed(what string, n, want int) *Error {
	return Errorf(ETypeRemoteOperation, CodeUnspecified, "%d-octet %s header, want %d", n, what, want)
}

// RemoteError is a Terminate message received from the peer. It is a
// different type from the locally detected errors so that a QP never answers
// a Terminate with a Terminate (RFC 5040 section 5.4: after a Terminate the
// stream carries nothing more). Its DDPHdr and RDMAPHdr alias the received
// octets unless it was built from Terminate.Clone.
type RemoteError struct {
	Terminate
}

func (e *RemoteError) Error() string {
	s := "rdmap: peer sent Terminate: " + e.Cause().String()
	if e.SiwForm {
		s += " (Linux siw byte-swapped control word)"
	}
	return s
}

// CauseOf returns the Terminate cause for a locally detected error: an
// *mpa.Error is layer LLP with error type MPA and its code, a *ddp.Error
// layer DDP, a *Error layer RDMAP, found with errors.As in that order of
// layers from the top. A *RemoteError gives the peer's cause (but see
// NewTerminate, which never answers one). Anything else, an I/O or internal
// error, is an RDMAP local catastrophic error with code 0x07, "localized to
// RDMAP stream": RFC 5040 Figure 9 accepts any code with that type, and 0x07
// says that only this stream is affected.
func CauseOf(err error) Cause {
	var (
		re *RemoteError
		e  *Error
		de *ddp.Error
		me *mpa.Error
	)
	switch {
	case errors.As(err, &re):
		return re.Cause()
	case errors.As(err, &e):
		return Cause{LayerRDMAP, e.EType, e.Code}
	case errors.As(err, &de):
		return Cause{LayerDDP, uint8(de.EType), de.Code}
	case errors.As(err, &me):
		return Cause{LayerLLP, ETypeMPA, uint8(me.Code)}
	}
	return Cause{LayerRDMAP, ETypeLocalCatastrophic, CodeCatastrophicStream}
}
