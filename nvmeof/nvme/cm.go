package nvme

import (
	"encoding/binary"
	"errors"
)

// The RDMA connection manager's private data (NVMe/RDMA transport binding
// 1.0 section 3.2, figures 3-5): 32 octets, little endian. On iWARP it
// follows the MPA rev 2 IRD/ORD word, which verbs adds and strips.
const cmPrivSize = 32

// CMRequest is the host's private data in the connect request:
//
//	0-1  RECFMT (0)
//	2-3  QID (0: admin queue)
//	4-5  HRQSIZE, the host's receive queue size (1's based)
//	6-7  HSQSIZE, the host's send queue size (0's based, the Connect's SQSIZE)
//	8-9  CNTLID (newer specs; reserved in Linux 6.1, which sends 0)
//	10-31 reserved
type CMRequest struct {
	RecFmt, QID, HRQSize, HSQSize, CntlID uint16
}

// CMReply is the controller's private data in the accept: RECFMT and
// CRQSIZE, the controller's receive queue size.
type CMReply struct {
	RecFmt, CRQSize uint16
}

// CMReject is the controller's private data in a reject: RECFMT and a
// status (CMRejectXxx).
type CMReject struct {
	RecFmt, Status uint16
}

// NVMe/RDMA CM reject status codes (transport binding figure 5).
const (
	CMRejectInvalidRecFmt  = 0x01
	CMRejectInvalidQID     = 0x02
	CMRejectInvalidHSQSize = 0x03
	CMRejectInvalidHRQSize = 0x04
	CMRejectNoResources    = 0x05
	CMRejectInvalidIRD     = 0x06
	CMRejectInvalidORD     = 0x07
	CMRejectInvalidCntlID  = 0x08
)

var errShortCM = errors.New("nvmeof: RDMA CM private data shorter than 32 octets")

// Append appends the request's 32 octets to b.
func (r CMRequest) Append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint16(b, r.RecFmt)
	b = binary.LittleEndian.AppendUint16(b, r.QID)
	b = binary.LittleEndian.AppendUint16(b, r.HRQSize)
	b = binary.LittleEndian.AppendUint16(b, r.HSQSize)
	b = binary.LittleEndian.AppendUint16(b, r.CntlID)
	return append(b, make([]byte, cmPrivSize-10)...)
}

// ParseCMRequest decodes a host's private data.
func ParseCMRequest(b []byte) (CMRequest, error) {
	if len(b) < cmPrivSize {
		return CMRequest{}, errShortCM
	}
	le := binary.LittleEndian
	return CMRequest{RecFmt: le.Uint16(b), QID: le.Uint16(b[2:]), HRQSize: le.Uint16(b[4:]),
		HSQSize: le.Uint16(b[6:]), CntlID: le.Uint16(b[8:])}, nil
}

// Append appends the reply's 32 octets to b.
func (r CMReply) Append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint16(b, r.RecFmt)
	b = binary.LittleEndian.AppendUint16(b, r.CRQSize)
	return append(b, make([]byte, cmPrivSize-4)...)
}

// ParseCMReply decodes a controller's accept private data.
func ParseCMReply(b []byte) (CMReply, error) {
	if len(b) < cmPrivSize {
		return CMReply{}, errShortCM
	}
	return CMReply{RecFmt: binary.LittleEndian.Uint16(b), CRQSize: binary.LittleEndian.Uint16(b[2:])}, nil
}

// Append appends the reject's private data (4 octets: RECFMT, STS) to b.
func (r CMReject) Append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint16(b, r.RecFmt)
	return binary.LittleEndian.AppendUint16(b, r.Status)
}

// ParseCMReject decodes a controller's reject private data.
func ParseCMReject(b []byte) (CMReject, error) {
	if len(b) < 4 {
		return CMReject{}, errors.New("nvmeof: RDMA CM reject private data shorter than 4 octets")
	}
	return CMReject{RecFmt: binary.LittleEndian.Uint16(b), Status: binary.LittleEndian.Uint16(b[2:])}, nil
}
