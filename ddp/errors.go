package ddp

import "fmt"

// EType is a DDP error type, reported in a Terminate message with layer DDP
// (RFC 5041 section 7.2).
type EType uint8

// DDP error types.
const (
	ETypeCatastrophic EType = 0 // local catastrophic error
	ETypeTagged       EType = 1 // tagged buffer error
	ETypeUntagged     EType = 2 // untagged buffer error
)

// Tagged buffer error codes (error type ETypeTagged).
const (
	CodeInvalidSTag   uint8 = 0x00 // invalid STag
	CodeBaseBounds    uint8 = 0x01 // base or bounds violation
	CodeSTagNotAssoc  uint8 = 0x02 // STag not associated with DDP stream
	CodeTOWrap        uint8 = 0x03 // tagged offset wrap
	CodeTaggedVersion uint8 = 0x04 // invalid DDP version
)

// Untagged buffer error codes (error type ETypeUntagged).
const (
	CodeInvalidQN       uint8 = 0x01 // invalid queue number
	CodeMSNNoBuffer     uint8 = 0x02 // invalid MSN: no buffer available
	CodeMSNRange        uint8 = 0x03 // invalid MSN: MSN range is not valid
	CodeInvalidMO       uint8 = 0x04 // invalid message offset
	CodeMsgTooLong      uint8 = 0x05 // DDP message too long for available buffer
	CodeUntaggedVersion uint8 = 0x06 // invalid DDP version
)

// Error is a DDP-layer error detected locally; EType and Code are what the
// Terminate message for it carries.
type Error struct {
	EType EType
	Code  uint8
	Msg   string // detail for humans
}

func (e *Error) Error() string {
	s := fmt.Sprintf("ddp: %s", CodeString(e.EType, e.Code))
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
func Errorf(t EType, code uint8, format string, args ...any) *Error {
	return &Error{EType: t, Code: code, Msg: fmt.Sprintf(format, args...)}
}

// CodeString names a DDP error type and code as RFC 5041 does.
func CodeString(t EType, code uint8) string {
	switch t {
	case ETypeCatastrophic:
		return "local catastrophic error"
	case ETypeTagged:
		switch code {
		case CodeInvalidSTag:
			return "invalid STag"
		case CodeBaseBounds:
			return "base or bounds violation"
		case CodeSTagNotAssoc:
			return "STag not associated with DDP stream"
		case CodeTOWrap:
			return "tagged offset wrap"
		case CodeTaggedVersion:
			return "invalid DDP version"
		}
	case ETypeUntagged:
		switch code {
		case CodeInvalidQN:
			return "invalid QN"
		case CodeMSNNoBuffer:
			return "invalid MSN - no buffer available"
		case CodeMSNRange:
			return "invalid MSN - MSN range is not valid"
		case CodeInvalidMO:
			return "invalid MO"
		case CodeMsgTooLong:
			return "DDP message too long for available buffer"
		case CodeUntaggedVersion:
			return "invalid DDP version"
		}
	}
	return fmt.Sprintf("DDP error type %d code %#02x", t, code)
}

var etypeNames = [...]string{
	ETypeCatastrophic: "local catastrophic error",
	ETypeTagged:       "tagged buffer error",
	ETypeUntagged:     "untagged buffer error",
	3:                 "reserved for the LLP",
}

// String names the error type as RFC 5041 section 7.2 does.
func (t EType) String() string {
	if int(t) < len(etypeNames) {
		return etypeNames[t]
	}
	return fmt.Sprintf("DDP error type %d", uint8(t))
}

// Sentinel values for errors.Is: each matches any *Error with its type and
// code, whatever its Msg.
var (
	ErrCatastrophic    = &Error{EType: ETypeCatastrophic, Code: 0}
	ErrInvalidSTag     = &Error{EType: ETypeTagged, Code: CodeInvalidSTag}
	ErrBaseBounds      = &Error{EType: ETypeTagged, Code: CodeBaseBounds}
	ErrSTagNotAssoc    = &Error{EType: ETypeTagged, Code: CodeSTagNotAssoc}
	ErrTOWrap          = &Error{EType: ETypeTagged, Code: CodeTOWrap}
	ErrTaggedVersion   = &Error{EType: ETypeTagged, Code: CodeTaggedVersion}
	ErrInvalidQN       = &Error{EType: ETypeUntagged, Code: CodeInvalidQN}
	ErrMSNNoBuffer     = &Error{EType: ETypeUntagged, Code: CodeMSNNoBuffer}
	ErrMSNRange        = &Error{EType: ETypeUntagged, Code: CodeMSNRange}
	ErrInvalidMO       = &Error{EType: ETypeUntagged, Code: CodeInvalidMO}
	ErrMsgTooLong      = &Error{EType: ETypeUntagged, Code: CodeMsgTooLong}
	ErrUntaggedVersion = &Error{EType: ETypeUntagged, Code: CodeUntaggedVersion}
)
