package mpa

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"
)

// MPA Request and Reply frames (RFC 5044 section 7.1, RFC 6581 section 9):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|        Key (16 octets): "MPA ID Req Frame" or "MPA ID Rep Frame"
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|M|C|R|H|  Res  |      Rev      |           PD_Length           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	~                 Private Data (PD_Length octets)               ~
//
// An enhanced frame (Rev 2 with H set, RFC 6581) starts its private data
// with the IRD/ORD word:
//
//	|A|B|           IRD             |C|D|           ORD             |
const (
	KeyLen         = 16
	FrameHeaderLen = 20 // key, flags, Rev, PD_Length
	// MaxPrivateData is the most private data a frame may carry (RFC 5044
	// section 7.1). Linux rdma_cm offers its ULPs only 256 octets.
	MaxPrivateData = 512
	IRDORDLen      = 4      // the RFC 6581 IRD/ORD word
	MaxIRDORD      = 0x3fff // IRD and ORD are 14-bit fields
	// MaxRev is the highest MPA revision understood here: 1 is RFC 5044,
	// 2 is RFC 6581. Revision 0 (pre-standard) parses but is not spoken.
	MaxRev = 2
)

const (
	keyReq = "MPA ID Req Frame"
	keyRep = "MPA ID Rep Frame"

	flagMarkers  = 0x80
	flagCRC      = 0x40
	flagReject   = 0x20
	flagEnhanced = 0x10
	flagReserved = 0x0f // siw uses 0x08 for its GSO experiment

	wordFlag1 = 0x8000 // A in the IRD half, C in the ORD half
	wordFlag2 = 0x4000 // B in the IRD half, D in the ORD half
)

// Frame is an MPA Request or Reply. Every bit of the header is kept, so a
// parsed frame re-encodes to the same octets.
type Frame struct {
	Reply    bool  // key "MPA ID Rep Frame"; false means "MPA ID Req Frame"
	Markers  bool  // M: the sender wants to receive markers
	CRC      bool  // C: the sender wants CRCs (then both directions use them)
	Reject   bool  // R: a Reply refusing the connection
	Enhanced bool  // H: RFC 6581 enhanced connection establishment
	Reserved uint8 // the low four flag bits; only those are sent
	Rev      uint8
	// PrivateData is everything after the header, including the IRD/ORD
	// word of an enhanced frame.
	PrivateData []byte
}

// Len returns the encoded length of f.
func (f Frame) Len() int { return FrameHeaderLen + len(f.PrivateData) }

// Append appends the encoded frame to b.
func (f Frame) Append(b []byte) ([]byte, error) {
	if len(f.PrivateData) > MaxPrivateData {
		return b, errorf(CodeInvalidReqRep, "%d octets of private data, more than %d", len(f.PrivateData), MaxPrivateData)
	}
	if f.Reply {
		b = append(b, keyRep...)
	} else {
		b = append(b, keyReq...)
	}
	flags := f.Reserved&flagReserved | bit(f.Markers, flagMarkers) | bit(f.CRC, flagCRC) |
		bit(f.Reject, flagReject) | bit(f.Enhanced, flagEnhanced)
	b = append(b, flags, f.Rev)
	b = binary.BigEndian.AppendUint16(b, uint16(len(f.PrivateData)))
	return append(b, f.PrivateData...), nil
}

// ParseFrame parses the frame at the start of b and returns it with the
// number of octets it took. PrivateData aliases b. A b too short for the frame
// gives an error wrapping io.ErrUnexpectedEOF; a bad key, an unknown revision
// or too much private data give an *Error with CodeInvalidReqRep.
func ParseFrame(b []byte) (f Frame, n int, err error) {
	pdLen, err := parseHeader(&f, b)
	if err != nil {
		return Frame{}, 0, err
	}
	n = FrameHeaderLen + pdLen
	if len(b) < n {
		return Frame{}, 0, truncated(n, len(b))
	}
	if pdLen > 0 {
		f.PrivateData = b[FrameHeaderLen:n:n]
	}
	return f, n, nil
}

// ReadFrame reads one Request (reply false) or Reply (reply true) from r. It
// reads exactly the frame and never an octet past it, so r may be handed to
// the full-operation phase afterwards without losing the first FPDU. The
// header is checked before any private data is read. Read errors come back
// as an *Error with CodeStreamLost wrapping the reader's error.
func ReadFrame(r io.Reader, reply bool) (Frame, error) {
	buf := make([]byte, FrameHeaderLen, FrameHeaderLen+MaxPrivateData)
	if _, err := io.ReadFull(r, buf); err != nil {
		return Frame{}, &Error{Code: CodeStreamLost, Msg: "reading MPA " + kind(reply), Err: err}
	}
	var f Frame
	pdLen, err := parseHeader(&f, buf)
	if err != nil {
		return Frame{}, err
	}
	if f.Reply != reply {
		return Frame{}, errorf(CodeInvalidReqRep, "got an MPA %s, want a %s", kind(f.Reply), kind(reply))
	}
	if pdLen == 0 {
		return f, nil
	}
	buf = buf[:FrameHeaderLen+pdLen]
	if _, err := io.ReadFull(r, buf[FrameHeaderLen:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, &Error{Code: CodeStreamLost, Msg: "reading MPA " + kind(reply) + " private data", Err: err}
	}
	f.PrivateData = buf[FrameHeaderLen:len(buf):len(buf)]
	return f, nil
}

// parseHeader fills f from the 20-octet header at the start of b and returns
// PD_Length.
func parseHeader(f *Frame, b []byte) (int, error) {
	if len(b) < FrameHeaderLen {
		return 0, truncated(FrameHeaderLen, len(b))
	}
	switch string(b[:KeyLen]) {
	case keyReq:
		f.Reply = false
	case keyRep:
		f.Reply = true
	default:
		return 0, errorf(CodeInvalidReqRep, "bad key %q", b[:KeyLen])
	}
	flags := b[KeyLen]
	f.Markers = flags&flagMarkers != 0
	f.CRC = flags&flagCRC != 0
	f.Reject = flags&flagReject != 0
	f.Enhanced = flags&flagEnhanced != 0
	f.Reserved = flags & flagReserved
	f.Rev = b[KeyLen+1]
	// RFC 5044 section 7.1: a receiver that cannot interoperate with the
	// revision closes the connection (siw does so for Rev > 2).
	if f.Rev > MaxRev {
		return 0, errorf(CodeInvalidReqRep, "MPA revision %d not supported", f.Rev)
	}
	pdLen := int(binary.BigEndian.Uint16(b[KeyLen+2:]))
	if pdLen > MaxPrivateData {
		return 0, errorf(CodeInvalidReqRep, "PD_Length %d, more than %d", pdLen, MaxPrivateData)
	}
	return pdLen, nil
}

func bit(on bool, b uint8) uint8 {
	if on {
		return b
	}
	return 0
}

func truncated(need, have int) error {
	return fmt.Errorf("mpa: start-up frame needs %d octets, have %d: %w", need, have, io.ErrUnexpectedEOF)
}

func kind(reply bool) string {
	if reply {
		return "Reply"
	}
	return "Request"
}

// HasIRDORD reports whether f is an enhanced frame, whose private data starts
// with the IRD/ORD word: Rev 2 with H set (RFC 6581 section 9). In a Rev 1
// frame the H bit is reserved and ignored.
func (f Frame) HasIRDORD() bool { return f.Rev >= 2 && f.Enhanced }

// IRDORD returns the IRD/ORD word of an enhanced frame.
func (f Frame) IRDORD() (IRDORD, error) {
	if !f.HasIRDORD() {
		return IRDORD{}, errorf(CodeInvalidReqRep, "not an enhanced (Rev 2, H) frame")
	}
	return ParseIRDORD(f.PrivateData)
}

// ULPPrivateData returns the private data that belongs to the ULP: all of
// it, or what follows the IRD/ORD word in an enhanced frame. An enhanced
// frame too short for the word is an error.
func (f Frame) ULPPrivateData() ([]byte, error) {
	if !f.HasIRDORD() {
		return f.PrivateData, nil
	}
	if len(f.PrivateData) < IRDORDLen {
		return nil, shortIRDORD(len(f.PrivateData))
	}
	return f.PrivateData[IRDORDLen:], nil
}

// IRDORD is the word that starts the private data of an enhanced frame
// (RFC 6581 section 9). Every bit of it has a field here, so it round-trips.
type IRDORD struct {
	IRD, ORD uint16 // 14 bits each
	P2P      bool   // A: peer-to-peer mode, with an RTR message
	RTR      RTR    // B, C, D: offered in a Request, the one chosen in a Reply
}

// Append appends the encoded word to b. IRD and ORD above MaxIRDORD are sent
// as MaxIRDORD; RTR bits other than Send, Write and Read are not sent.
func (v IRDORD) Append(b []byte) []byte {
	ird, ord := min(v.IRD, MaxIRDORD), min(v.ORD, MaxIRDORD)
	if v.P2P {
		ird |= wordFlag1
	}
	if v.RTR&RTRSend != 0 {
		ird |= wordFlag2
	}
	if v.RTR&RTRWrite != 0 {
		ord |= wordFlag1
	}
	if v.RTR&RTRRead != 0 {
		ord |= wordFlag2
	}
	b = binary.BigEndian.AppendUint16(b, ird)
	return binary.BigEndian.AppendUint16(b, ord)
}

// ParseIRDORD parses the IRD/ORD word at the start of b.
func ParseIRDORD(b []byte) (IRDORD, error) {
	if len(b) < IRDORDLen {
		return IRDORD{}, shortIRDORD(len(b))
	}
	ird, ord := binary.BigEndian.Uint16(b), binary.BigEndian.Uint16(b[2:])
	v := IRDORD{IRD: ird & MaxIRDORD, ORD: ord & MaxIRDORD, P2P: ird&wordFlag1 != 0}
	if ird&wordFlag2 != 0 {
		v.RTR |= RTRSend
	}
	if ord&wordFlag1 != 0 {
		v.RTR |= RTRWrite
	}
	if ord&wordFlag2 != 0 {
		v.RTR |= RTRRead
	}
	return v, nil
}

func shortIRDORD(n int) error {
	return errorf(CodeInvalidReqRep, "enhanced frame with %d octets of private data, the IRD/ORD word needs %d", n, IRDORDLen)
}

// RTR is a set of ready-to-receive messages (RFC 6581 section 9). In
// peer-to-peer mode the initiator's first FPDU is a zero-length message of
// the agreed kind; the responder may send only once it has arrived (RFC 5044
// section 7.1: an MPA responder receives an FPDU before sending one). A
// Request offers a set, a Reply picks exactly one.
//
// A zero-length RDMA Write or Read RTR should carry a non-zero STag: Chelsio
// hardware rejects STag 0, and siw sends 1.
type RTR uint8

const (
	RTRNone RTR = 0
	// RTRSend is a zero-length Send (flag B). It consumes a posted receive at
	// the responder; siw and i40iw never offer it.
	RTRSend RTR = 1 << (iota - 1)
	// RTRWrite is a zero-length RDMA Write (flag C).
	RTRWrite
	// RTRRead is a zero-length RDMA Read Request (flag D). It takes an ORD
	// credit at the initiator and an IRD entry at the responder.
	RTRRead

	rtrAll = RTRSend | RTRWrite | RTRRead
)

func (r RTR) String() string {
	if r == RTRNone {
		return "none"
	}
	var parts []string
	for _, k := range [...]struct {
		bit  RTR
		name string
	}{{RTRSend, "Send"}, {RTRWrite, "Write"}, {RTRRead, "Read"}} {
		if r&k.bit != 0 {
			parts = append(parts, k.name)
		}
	}
	if r&^rtrAll != 0 {
		parts = append(parts, fmt.Sprintf("%#02x", uint8(r&^rtrAll)))
	}
	return strings.Join(parts, "|")
}
