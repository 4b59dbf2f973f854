package rdmap

import (
	"fmt"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
)

// Layer is the layer that detected the error a Terminate reports (RFC 5040
// section 4.8, Figure 9).
type Layer uint8

// Terminate layers.
const (
	LayerRDMAP Layer = 0
	LayerDDP   Layer = 1
	LayerLLP   Layer = 2 // the lower layer protocol: MPA over TCP
)

func (l Layer) String() string {
	switch l {
	case LayerRDMAP:
		return "RDMAP"
	case LayerDDP:
		return "DDP"
	case LayerLLP:
		return "LLP"
	}
	return fmt.Sprintf("layer %d", uint8(l))
}

// RDMAP error types (RFC 5040 section 4.8, Figure 9).
const (
	ETypeLocalCatastrophic uint8 = 0
	ETypeRemoteProtection  uint8 = 1
	ETypeRemoteOperation   uint8 = 2
)

// RDMAP error codes (RFC 5040 section 4.8, Figure 9). Codes 0x00-0x04 belong
// to remote protection errors, 0x05-0x08 to remote operation errors, 0x09 and
// 0xFF to both. A local catastrophic error "does not have an error code. Any
// value in this field is acceptable."
const (
	CodeInvalidSTag        uint8 = 0x00 // invalid STag
	CodeBaseBounds         uint8 = 0x01 // base or bounds violation
	CodeAccessRights       uint8 = 0x02 // access rights violation
	CodeSTagNotAssoc       uint8 = 0x03 // STag not associated with RDMAP stream
	CodeTOWrap             uint8 = 0x04 // TO wrap
	CodeInvalidVersion     uint8 = 0x05 // invalid RDMAP version
	CodeUnexpectedOpcode   uint8 = 0x06 // unexpected opcode
	CodeCatastrophicStream uint8 = 0x07 // catastrophic error, localized to RDMAP stream
	CodeCatastrophicGlobal uint8 = 0x08 // catastrophic error, global
	CodeCannotInvalidate   uint8 = 0x09 // STag cannot be invalidated
	CodeUnspecified        uint8 = 0xff // unspecified error
)

// LLP error type for MPA (RFC 5044 section 8): the only one.
const ETypeMPA uint8 = 0

var rdmapETypeNames = [...]string{
	ETypeLocalCatastrophic: "local catastrophic error",
	ETypeRemoteProtection:  "remote protection error",
	ETypeRemoteOperation:   "remote operation error",
}

var rdmapCodeNames = map[uint8]string{
	CodeInvalidSTag:        "invalid STag",
	CodeBaseBounds:         "base or bounds violation",
	CodeAccessRights:       "access rights violation",
	CodeSTagNotAssoc:       "STag not associated with RDMAP stream",
	CodeTOWrap:             "TO wrap",
	CodeInvalidVersion:     "invalid RDMAP version",
	CodeUnexpectedOpcode:   "unexpected opcode",
	CodeCatastrophicStream: "catastrophic error, localized to RDMAP stream",
	CodeCatastrophicGlobal: "catastrophic error, global",
	CodeCannotInvalidate:   "STag cannot be invalidated",
	CodeUnspecified:        "unspecified error",
}

// Cause is what a Terminate message says went wrong: the layer, and that
// layer's error type and code.
type Cause struct {
	Layer Layer
	EType uint8
	Code  uint8
}

// String names the cause as the RFCs do, for example
// "DDP tagged buffer error: invalid STag" or
// "LLP MPA error: MPA CRC error".
func (c Cause) String() string { return c.Layer.String() + " " + c.describe() }

// describe names the error type and code. A code is named only where the RFCs
// define it for that type; otherwise it is shown as a number. Local
// catastrophic errors have no code of their own (RFC 5040 Figure 9, RFC 5041
// section 7.2), so theirs is shown only if it is not zero.
func (c Cause) describe() string {
	et, code := c.etypeName(), ""
	switch {
	case c.catastrophic():
	case c.Layer == LayerRDMAP && c.Valid():
		code = rdmapCodeNames[c.Code]
	case c.Layer == LayerDDP && c.Valid():
		code = ddp.CodeString(ddp.EType(c.EType), c.Code)
	case c.Layer == LayerLLP && c.EType == ETypeMPA:
		code = mpa.LLPCode(c.Code).String()
	}
	switch {
	case code != "":
		return et + ": " + code
	case c.Code == 0 && c.catastrophic():
		return et
	}
	return fmt.Sprintf("%s (code %#02x)", et, c.Code)
}

func (c Cause) catastrophic() bool {
	return c.EType == 0 && (c.Layer == LayerRDMAP || c.Layer == LayerDDP)
}

func (c Cause) etypeName() string {
	switch {
	case c.Layer == LayerRDMAP && int(c.EType) < len(rdmapETypeNames):
		return rdmapETypeNames[c.EType]
	case c.Layer == LayerDDP:
		return ddp.EType(c.EType).String()
	case c.Layer == LayerLLP && c.EType == ETypeMPA:
		return "MPA error"
	}
	return fmt.Sprintf("error type %d", c.EType)
}

// Valid reports whether the RFCs define this layer, type and code together:
// RFC 5040 Figure 9 for RDMAP, RFC 5041 section 7.2 for DDP, RFC 5044
// section 8 and RFC 6581 section 10 for MPA.
func (c Cause) Valid() bool {
	switch c.Layer {
	case LayerRDMAP:
		switch c.EType {
		case ETypeLocalCatastrophic:
			return true // any code is acceptable
		case ETypeRemoteProtection:
			return c.Code <= CodeTOWrap || c.Code == CodeCannotInvalidate || c.Code == CodeUnspecified
		case ETypeRemoteOperation:
			return c.Code >= CodeInvalidVersion && c.Code <= CodeCannotInvalidate || c.Code == CodeUnspecified
		}
	case LayerDDP:
		switch ddp.EType(c.EType) {
		case ddp.ETypeCatastrophic:
			return c.Code == 0
		case ddp.ETypeTagged:
			return c.Code <= ddp.CodeTaggedVersion
		case ddp.ETypeUntagged:
			return c.Code >= ddp.CodeInvalidQN && c.Code <= ddp.CodeUntaggedVersion
		}
	case LayerLLP:
		return c.EType == ETypeMPA && c.Code >= uint8(mpa.CodeStreamLost) && c.Code <= uint8(mpa.CodeNoMatchingRTR)
	}
	return false
}
