package nvme

import "encoding/binary"

// CompletionSize is the size of a completion queue entry (CQE), the whole
// of a response capsule on RDMA.
const CompletionSize = 16

// Completion is a view of a 16-octet completion queue entry (NVMe base 2.0
// figure 89), little endian:
//
//	0-7    command specific result (DW0, DW1)
//	8-9    SQ head pointer
//	10-11  SQ identifier
//	12-13  command identifier
//	14-15  status (bits 15:1) and phase tag (bit 0, unused on fabrics)
type Completion []byte

// ParseCompletion returns the CQE at the start of b, or false if b is
// shorter than 16 octets.
func ParseCompletion(b []byte) (Completion, bool) {
	if len(b) < CompletionSize {
		return nil, false
	}
	return Completion(b[:CompletionSize:CompletionSize]), true
}

func (c Completion) Result() uint64 { return binary.LittleEndian.Uint64(c[0:]) }
func (c Completion) SQHead() uint16 { return binary.LittleEndian.Uint16(c[8:]) }
func (c Completion) SQID() uint16   { return binary.LittleEndian.Uint16(c[10:]) }
func (c Completion) CID() uint16    { return binary.LittleEndian.Uint16(c[12:]) }
func (c Completion) Status() Status { return Status(binary.LittleEndian.Uint16(c[14:]) >> 1) }

// AppendCompletion appends a CQE to b.
func AppendCompletion(b []byte, result uint64, sqhd, sqid, cid uint16, st Status) []byte {
	b = binary.LittleEndian.AppendUint64(b, result)
	b = binary.LittleEndian.AppendUint16(b, sqhd)
	b = binary.LittleEndian.AppendUint16(b, sqid)
	b = binary.LittleEndian.AppendUint16(b, cid)
	return binary.LittleEndian.AppendUint16(b, uint16(st)<<1)
}
