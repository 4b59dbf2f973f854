package rdmap

import (
	"encoding/binary"
	"math/bits"
)

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
type ReadRequest []byte

const (
	rrSinkSTagOff = 0
	rrSinkTOOff   = 4
	rrSizeOff     = 12
	rrSrcSTagOff  = 16
	rrSrcTOOff    = 20
)

// ParseReadRequest returns the Read Request header at the start of b, the
// octets after the untagged DDP header. A Read Request carries no payload
// (RFC 5040 Figure 5), so octets after the header are the caller's concern.
func ParseReadRequest(b []byte) (ReadRequest, error) {
	if len(b) < ReadRequestLen {
		return nil, errMalformed("RDMA Read Request", len(b), ReadRequestLen)
	}
	return ReadRequest(b[:ReadRequestLen]), nil
}

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

// CheckReadSource checks a Read Request's source range [to, to+size) against
// the Data Source buffer whose legal offsets are [base, base+len), once its
// STag was found valid and associated with the stream (RFC 5040 section 7.2,
// checks 4c-4e, which apply to non-zero-length requests only). Errors are
// remote protection errors: base or bounds violation, or TO wrap.
func CheckReadSource(to uint64, size uint32, base, length uint64) error {
	if size == 0 {
		return nil
	}
	// 4c: the TO lies in the buffer.
	if to < base || to-base >= length {
		return Errorf(ETypeRemoteProtection, CodeBaseBounds, "source TO %#x, buffer [%#x, +%d)", to, base, length)
	}
	// 4e: TO + size must not wrap; checked before 4d, whose sum it would
	// make meaningless.
	if _, carry := bits.Add64(to, uint64(size), 0); carry != 0 {
		return Errorf(ETypeRemoteProtection, CodeTOWrap, "%d octets at source TO %#x wrap", size, to)
	}
	// 4d: TO + size lies in the buffer.
	if uint64(size) > length-(to-base) {
		return Errorf(ETypeRemoteProtection, CodeBaseBounds, "%d octets at source TO %#x, buffer [%#x, +%d)", size, to, base, length)
	}
	return nil
}
