package rdmap

import (
	"encoding/binary"
	"fmt"
)

// Header lengths after the untagged DDP header (RFC 7306 sections 5.2.1 and
// 5.2.2). RFC 7306 section 4 calls the response header "32 bytes long"; its
// Figure 6 and Appendix A.2 show 12, as do Wireshark and urdma.
const (
	AtomicRequestLen  = 52
	AtomicResponseLen = 12
)

// AtomicOpcode is the AOpCode of an Atomic Request (RFC 7306 section 10.1,
// IANA "RDMAP Message Atomic Operation Subcodes").
type AtomicOpcode uint8

// Atomic operation codes. 0x1 is reserved: RFC 7306's field descriptions
// mention a "Swap" but Figure 5 and the registry define only these two.
const (
	AtomicFetchAdd AtomicOpcode = 0x0
	AtomicCmpSwap  AtomicOpcode = 0x2
)

func (o AtomicOpcode) String() string {
	switch o {
	case AtomicFetchAdd:
		return "FetchAdd"
	case AtomicCmpSwap:
		return "CmpSwap"
	}
	return fmt.Sprintf("AtomicOpcode(%d)", uint8(o))
}

// AtomicRequest is a view of an Atomic Operation Request header (RFC 7306
// section 5.2.1, Figure 4), sent on queue 1 like a Read Request:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      Reserved (Not Used)              |AOpCode|
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       Request Identifier                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Remote STag                          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Remote Tagged Offset (64)                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Add or Swap Data (64)                      |
//	|                    Add or Swap Mask (64)                      |
//	|                      Compare Data (64)                        |
//	|                      Compare Mask (64)                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// It must hold at least AtomicRequestLen octets (check with CheckLen first).
type AtomicRequest []byte

const (
	arOpOff       = 0
	arReqIDOff    = 4
	arSTagOff     = 8
	arTOOff       = 12
	arAddSwapOff  = 20
	arAddMaskOff  = 28
	arCompareOff  = 36
	arCmpMaskOff  = 44
	aopcodeMask   = 0x0f
	arsReqIDOff   = 0
	arsOrigValOff = 4
)

// Opcode returns the AOpCode. The 28 reserved bits before it are "set to zero
// on transmit, ignored on receive" (RFC 7306 section 5.2.1).
func (r AtomicRequest) Opcode() AtomicOpcode {
	return AtomicOpcode(binary.BigEndian.Uint32(r[arOpOff:]) & aopcodeMask)
}

// ReqID returns the Request Identifier, echoed in the response.
func (r AtomicRequest) ReqID() uint32 { return binary.BigEndian.Uint32(r[arReqIDOff:]) }

// STag returns the Remote STag of the target buffer.
func (r AtomicRequest) STag() uint32 { return binary.BigEndian.Uint32(r[arSTagOff:]) }

// TO returns the Remote Tagged Offset of the 64-bit target.
func (r AtomicRequest) TO() uint64 { return binary.BigEndian.Uint64(r[arTOOff:]) }

// AddSwap returns the Add Data (FetchAdd) or Swap Data (CmpSwap).
func (r AtomicRequest) AddSwap() uint64 { return binary.BigEndian.Uint64(r[arAddSwapOff:]) }

// AddSwapMask returns the Add Mask or Swap Mask.
func (r AtomicRequest) AddSwapMask() uint64 { return binary.BigEndian.Uint64(r[arAddMaskOff:]) }

// Compare returns the Compare Data (CmpSwap only).
func (r AtomicRequest) Compare() uint64 { return binary.BigEndian.Uint64(r[arCompareOff:]) }

// CompareMask returns the Compare Mask (CmpSwap only).
func (r AtomicRequest) CompareMask() uint64 { return binary.BigEndian.Uint64(r[arCmpMaskOff:]) }

// AppendAtomicRequest appends an Atomic Request header to b. For FetchAdd RFC
// 7306 section 5.2.1 wants Compare Data zero and Compare Mask all ones on
// transmit; the caller passes them.
func AppendAtomicRequest(b []byte, op AtomicOpcode, reqID, stag uint32, to, addSwap, addSwapMask, compare, compareMask uint64) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(op)&aopcodeMask)
	b = binary.BigEndian.AppendUint32(b, reqID)
	b = binary.BigEndian.AppendUint32(b, stag)
	b = binary.BigEndian.AppendUint64(b, to)
	b = binary.BigEndian.AppendUint64(b, addSwap)
	b = binary.BigEndian.AppendUint64(b, addSwapMask)
	b = binary.BigEndian.AppendUint64(b, compare)
	return binary.BigEndian.AppendUint64(b, compareMask)
}

// CheckAtomicRequest does the Responder's RDMAP checks of RFC 7306 on an
// Atomic Request whose target resolves to the ULP buffer address addr:
//
//   - section 5.2.1 item 4: an AOpCode the RNIC does not support is an error.
//     The RFC names no code; "unexpected opcode" is the closest.
//   - section 8.2: a target not 64-bit aligned is a remote operation error,
//     "catastrophic error, localized to RDMAP stream".
//
// The STag and bounds checks are the QP's, as for RDMA Reads.
func CheckAtomicRequest(r AtomicRequest, addr uint64) error {
	if op := r.Opcode(); op != AtomicFetchAdd && op != AtomicCmpSwap {
		return Errorf(ETypeRemoteOperation, CodeUnexpectedOpcode, "atomic %v", op)
	}
	if addr%8 != 0 {
		return Errorf(ETypeRemoteOperation, CodeCatastrophicStream, "atomic target %#x not 64-bit aligned", addr)
	}
	return nil
}

// AtomicResponse is a view of an Atomic Operation Response header (RFC 7306
// section 5.2.2, Figure 6), sent on queue 3:
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Original Request Identifier                |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Original Remote Data Value (64)               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// It must hold at least AtomicResponseLen octets (check with CheckLen first).
type AtomicResponse []byte

// ReqID returns the Original Request Identifier.
func (r AtomicResponse) ReqID() uint32 { return binary.BigEndian.Uint32(r[arsReqIDOff:]) }

// Original returns the Original Remote Data Value, the target's value before
// the operation.
func (r AtomicResponse) Original() uint64 { return binary.BigEndian.Uint64(r[arsOrigValOff:]) }

// AppendAtomicResponse appends an Atomic Response header to b.
func AppendAtomicResponse(b []byte, reqID uint32, original uint64) []byte {
	b = binary.BigEndian.AppendUint32(b, reqID)
	return binary.BigEndian.AppendUint64(b, original)
}
