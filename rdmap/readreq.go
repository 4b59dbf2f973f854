package rdmap

import "encoding/binary"

// ReadRequestLen is the length of the RDMA Read Request header that follows
// the untagged DDP header (RFC 5040 section 4.4).
const ReadRequestLen = 28

// ReadRequest is a view of an RDMA Read Request header (RFC 5040 section
// 4.4, Figure 6):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Data Sink STag (SinkSTag)                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|               Data Sink Tagged Offset (SinkTO, 64)            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  RDMA Read Message Size (RDMARDSZ)            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Data Source STag (SrcSTag)                |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|              Data Source Tagged Offset (SrcTO, 64)            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// It must hold at least ReadRequestLen octets (check with CheckLen first).
type ReadRequest []byte

const (
	rrSinkSTagOff = 0
	rrSinkTOOff   = 4
	rrSizeOff     = 12
	rrSrcSTagOff  = 16
	rrSrcTOOff    = 20
)

// SinkSTag returns the Data Sink STag the Read Response is addressed to.
func (r ReadRequest) SinkSTag() uint32 { return binary.BigEndian.Uint32(r[rrSinkSTagOff:]) }

// SinkTO returns the Data Sink tagged offset.
func (r ReadRequest) SinkTO() uint64 { return binary.BigEndian.Uint64(r[rrSinkTOOff:]) }

// Size returns the RDMA Read Message Size (0 to 2^32-1 octets).
func (r ReadRequest) Size() uint32 { return binary.BigEndian.Uint32(r[rrSizeOff:]) }

// SrcSTag returns the Data Source STag, the buffer to read from.
func (r ReadRequest) SrcSTag() uint32 { return binary.BigEndian.Uint32(r[rrSrcSTagOff:]) }

// SrcTO returns the Data Source tagged offset.
func (r ReadRequest) SrcTO() uint64 { return binary.BigEndian.Uint64(r[rrSrcTOOff:]) }

// AppendReadRequest appends an RDMA Read Request header to b.
func AppendReadRequest(b []byte, sinkSTag uint32, sinkTO uint64, size, srcSTag uint32, srcTO uint64) []byte {
	b = binary.BigEndian.AppendUint32(b, sinkSTag)
	b = binary.BigEndian.AppendUint64(b, sinkTO)
	b = binary.BigEndian.AppendUint32(b, size)
	b = binary.BigEndian.AppendUint32(b, srcSTag)
	return binary.BigEndian.AppendUint64(b, srcTO)
}
