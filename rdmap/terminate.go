package rdmap

import (
	"encoding/binary"

	"github.com/goiwarp/iwarp/ddp"
)

// Terminate header lengths (RFC 5040 section 4.8).
const (
	TerminateCtrlLen = 4 // Terminate Control (19 bits) and Reserved (13 bits)
	termSegLenLen    = 2 // DDP Segment Length
	// TerminateMaxLen is the longest Terminate header: control word, segment
	// length, untagged DDP header and Read Request header.
	TerminateMaxLen = TerminateCtrlLen + termSegLenLen + ddp.UntaggedHdrLen + ReadRequestLen
)

// Header control bits in the third octet of the Terminate control word, as
// RFC 5040 section 4.8 (Figure 8, bits 16-18) places them, and where Linux siw
// puts them on little-endian hosts.
const (
	termM byte = 0x80
	termD byte = 0x40
	termR byte = 0x20
	siwM  byte = 0x01
	siwD  byte = 0x02
	siwR  byte = 0x04
)

// Terminate is the Terminate header (RFC 5040 section 4.8, Figure 7), the
// body of a Terminate message after its untagged DDP header:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| Layer | EType |  Error Code   |M|D|R|       Reserved          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  DDP Segment Length (if D)    |                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	|          Terminated DDP Header (if D): 14 or 18 octets        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     Terminated RDMA Header (if R): 28 octets, a Read Request  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// M says SegLen is valid, D that the DDP header (and the segment length
// field) is present, R that the RDMA header is. RFC 5040: the segment length
// "MUST be valid if the M bit is set. It MUST be present when the D bit is
// set"; the RDMA header "is only sent back if the terminate is associated
// with an RDMA Read Request Message".
type Terminate struct {
	Layer    Layer
	EType    uint8
	Code     uint8
	M, D, R  bool
	SegLen   uint16 // length of the terminated DDP segment; meaningful if M
	DDPHdr   []byte // terminated DDP header, 14 or 18 octets; written if D
	RDMAPHdr []byte // terminated Read Request header, 28 octets; written if R
	SiwForm  bool   // decoded from Linux siw's byte-swapped control word
}

// Cause returns the layer, error type and code.
func (t Terminate) Cause() Cause { return Cause{t.Layer, t.EType, t.Code} }

// Len returns the length of the header Append writes.
func (t Terminate) Len() int {
	n := TerminateCtrlLen
	if t.D {
		n += termSegLenLen + len(t.DDPHdr)
	}
	if t.R {
		n += len(t.RDMAPHdr)
	}
	return n
}

// Append appends the Terminate header to b, always in the RFC encoding: layer
// in the high nibble of the first octet, error type in the low one, M, D and
// R as 0x80, 0x40 and 0x20 of the third, reserved bits zero. DDPHdr and
// RDMAPHdr are written as they are when D and R are set.
func (t Terminate) Append(b []byte) []byte {
	var hc byte
	if t.M {
		hc |= termM
	}
	if t.D {
		hc |= termD
	}
	if t.R {
		hc |= termR
	}
	b = append(b, byte(t.Layer)<<4|t.EType&0x0f, t.Code, hc, 0)
	if t.D {
		b = binary.BigEndian.AppendUint16(b, t.SegLen)
		b = append(b, t.DDPHdr...)
	}
	if t.R {
		b = append(b, t.RDMAPHdr...)
	}
	return b
}

// Clone returns a copy of t that shares no memory with the octets it was
// parsed from.
func (t Terminate) Clone() Terminate {
	if t.DDPHdr != nil {
		t.DDPHdr = append([]byte(nil), t.DDPHdr...)
	}
	if t.RDMAPHdr != nil {
		t.RDMAPHdr = append([]byte(nil), t.RDMAPHdr...)
	}
	return t
}

// ParseTerminate decodes the Terminate header in b, the Terminate message
// after its untagged DDP header. DDPHdr and RDMAPHdr alias b. Octets after
// the header are ignored. It checks structure only: a cause the RFCs do not
// define is returned as it is (see Cause.Valid).
//
// It also reads the form Linux siw sends from little-endian hosts. siw
// declares the control word as C bitfields (layer:4, etype:4, ecode:8,
// flag_m:1, flag_d:1, flag_r:1, ...), which x86 lays out from the low bit: the
// layer lands in the low nibble of the first octet, the error type in the
// high one, and M, D, R in bits 0, 1, 2 of the third octet, which RFC 5040
// reserves. The word is taken as siw's when the third octet has flags only in
// siw's positions, or when it has none and only the swapped nibbles make a
// cause the RFCs define (siw's CRC error "02 02 00 00" reads as RDMAP remote
// operation error 0x02 the RFC way, which does not exist). SiwForm reports
// the choice.
func ParseTerminate(b []byte) (Terminate, error) {
	if len(b) < TerminateCtrlLen {
		return Terminate{}, errMalformed("Terminate", len(b), TerminateCtrlLen)
	}
	t := decodeTermCtrl(b[0], b[1], b[2])
	rest := b[TerminateCtrlLen:]
	if t.R && !t.D {
		return Terminate{}, Errorf(ETypeRemoteOperation, CodeUnspecified, "Terminate with R but no DDP header")
	}
	if t.D {
		// The terminated header's own T flag says how long it is.
		if len(rest) < termSegLenLen+1 {
			return Terminate{}, errMalformed("Terminate", len(b), TerminateCtrlLen+termSegLenLen+ddp.TaggedHdrLen)
		}
		n := ddp.HdrLen(rest[termSegLenLen]&ddp.FlagTagged != 0)
		if len(rest) < termSegLenLen+n {
			return Terminate{}, errMalformed("Terminate", len(b), TerminateCtrlLen+termSegLenLen+n)
		}
		t.SegLen = binary.BigEndian.Uint16(rest)
		t.DDPHdr = rest[termSegLenLen : termSegLenLen+n]
		rest = rest[termSegLenLen+n:]
	}
	if t.R {
		switch {
		case len(rest) >= ReadRequestLen:
			t.RDMAPHdr = rest[:ReadRequestLen]
		case len(rest) == 0 && CtrlOpcode(t.DDPHdr[1]) != OpReadRequest:
			// siw sets R for remote protection errors on Sends too, with
			// no RDMA header after the DDP one (siw_send_terminate):
			// there is no Read Request header to send back.
		default:
			return Terminate{}, errMalformed("Terminate", len(b), len(b)-len(rest)+ReadRequestLen)
		}
	}
	return t, nil
}

// decodeTermCtrl decodes the first three octets of a Terminate control word,
// in the RFC encoding or siw's.
func decodeTermCtrl(b0, code, hc byte) Terminate {
	rfc := Terminate{Layer: Layer(b0 >> 4), EType: b0 & 0x0f, Code: code,
		M: hc&termM != 0, D: hc&termD != 0, R: hc&termR != 0}
	siw := Terminate{Layer: Layer(b0 & 0x0f), EType: b0 >> 4, Code: code,
		M: hc&siwM != 0, D: hc&siwD != 0, R: hc&siwR != 0, SiwForm: true}
	rfcFlags, siwFlags := hc&(termM|termD|termR), hc&(siwM|siwD|siwR)
	switch {
	case siwFlags != 0 && rfcFlags == 0:
		return siw
	case siwFlags == 0 && rfcFlags == 0 && !rfc.Cause().Valid() && siw.Cause().Valid():
		return siw
	}
	return rfc
}
