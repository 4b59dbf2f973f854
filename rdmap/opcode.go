package rdmap

import (
	"fmt"

	"github.com/goiwarp/iwarp/ddp"
)

// Opcode is an RDMA message opcode, the low four bits of the RDMAP control
// octet (RFC 5040 section 4.1, Figure 4; RFC 7306 section 4.1, Figure 2).
// The constants carry an Op prefix because ReadRequest, Terminate and the
// atomic names are the header types.
type Opcode uint8

// RDMA message opcodes.
const (
	OpWrite            Opcode = 0x0
	OpReadRequest      Opcode = 0x1
	OpReadResponse     Opcode = 0x2
	OpSend             Opcode = 0x3
	OpSendInvalidate   Opcode = 0x4
	OpSendSE           Opcode = 0x5
	OpSendSEInvalidate Opcode = 0x6
	OpTerminate        Opcode = 0x7
	// RFC 7306 section 10 (IANA "RDMAP Message Operation Codes").
	OpImmediateData   Opcode = 0x8
	OpImmediateDataSE Opcode = 0x9
	OpAtomicRequest   Opcode = 0xa
	OpAtomicResponse  Opcode = 0xb
)

// Untagged queue numbers RDMAP uses (RFC 5040 Appendix B; RFC 7306 section
// 10.2, IANA "RDMAP DDP Untagged Queue Numbers").
const (
	QNSend           uint32 = 0 // Send variants; RFC 7306 Immediate Data
	QNReadRequest    uint32 = 1 // RDMA Read Requests; RFC 7306 Atomic Requests
	QNTerminate      uint32 = 2
	QNAtomicResponse uint32 = 3 // RFC 7306 only
)

// NumQueues returns how many untagged queues a stream has: three, or four
// when the RFC 7306 extensions are in use (for ddp.CheckQN).
func NumQueues(ext bool) uint32 {
	if ext {
		return 4
	}
	return 3
}

// Version is the RDMAP version this package speaks: RV = 01b (RFC 5040
// section 4.1). RV = 00b marks the pre-IETF RDMA Consortium protocol.
const Version = 1

// RDMAP control octet (RFC 5040 section 4.1, Figure 3): RV in the top two
// bits, two reserved bits, the opcode in the low four.
const (
	CtrlVersionMask  byte = 0xc0
	CtrlReservedMask byte = 0x30 // zero on transmit, ignored on receive
	CtrlOpcodeMask   byte = 0x0f
)

// Ctrl returns the RDMAP control octet for op: RV = 1, reserved bits zero.
func Ctrl(op Opcode) byte { return Version<<6 | byte(op)&CtrlOpcodeMask }

// CtrlVersion returns the RV field of an RDMAP control octet.
func CtrlVersion(c byte) uint8 { return c >> 6 }

// CtrlOpcode returns the opcode field of an RDMAP control octet.
func CtrlOpcode(c byte) Opcode { return Opcode(c & CtrlOpcodeMask) }

// OpInfo describes how an RDMA message uses DDP (RFC 5040 Figures 4 and 5,
// RFC 7306 Figures 2 and 3), like siw's iwarp_pktinfo[] table.
type OpInfo struct {
	Name    string
	Known   bool   // defined by RFC 5040 or RFC 7306
	Tagged  bool   // carried in the tagged buffer model
	QN      uint32 // untagged queue number; 0 for tagged messages
	HdrLen  int    // DDP header plus RDMAP header, in octets (for Terminate: through its control word)
	Payload bool   // may carry ULP payload after the headers
	RFC7306 bool   // an extension a QP must opt in to
}

var opTable = [16]OpInfo{
	OpWrite:            {"RDMA Write", true, true, 0, ddp.TaggedHdrLen, true, false},
	OpReadRequest:      {"RDMA Read Request", true, false, QNReadRequest, ddp.UntaggedHdrLen + ReadRequestLen, false, false},
	OpReadResponse:     {"RDMA Read Response", true, true, 0, ddp.TaggedHdrLen, true, false},
	OpSend:             {"Send", true, false, QNSend, ddp.UntaggedHdrLen, true, false},
	OpSendInvalidate:   {"Send with Invalidate", true, false, QNSend, ddp.UntaggedHdrLen, true, false},
	OpSendSE:           {"Send with Solicited Event", true, false, QNSend, ddp.UntaggedHdrLen, true, false},
	OpSendSEInvalidate: {"Send with Solicited Event and Invalidate", true, false, QNSend, ddp.UntaggedHdrLen, true, false},
	OpTerminate:        {"Terminate", true, false, QNTerminate, ddp.UntaggedHdrLen + TerminateCtrlLen, false, false},
	OpImmediateData:    {"Immediate Data", true, false, QNSend, ddp.UntaggedHdrLen + ImmediateLen, false, true},
	OpImmediateDataSE:  {"Immediate Data with Solicited Event", true, false, QNSend, ddp.UntaggedHdrLen + ImmediateLen, false, true},
	OpAtomicRequest:    {"Atomic Request", true, false, QNReadRequest, ddp.UntaggedHdrLen + AtomicRequestLen, false, true},
	OpAtomicResponse:   {"Atomic Response", true, false, QNAtomicResponse, ddp.UntaggedHdrLen + AtomicResponseLen, false, true},
}

// Info returns the table entry of op. Unassigned opcodes have Known false.
func (op Opcode) Info() OpInfo { return opTable[op&0x0f] }

func (op Opcode) String() string {
	if op < 16 && opTable[op].Known {
		return opTable[op].Name
	}
	return fmt.Sprintf("Opcode(%d)", uint8(op))
}
