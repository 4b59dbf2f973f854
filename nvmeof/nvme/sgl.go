package nvme

import "encoding/binary"

// SGLSize is the size of an SGL descriptor.
const SGLSize = 16

// SGL descriptor types (octet 15, bits 7:4) and subtypes (bits 3:0) that
// NVMe over RDMA uses (NVMe base 2.0 figures 116-118, NVMe/RDMA transport
// 1.0 section 3.3).
const (
	SGLTypeDataBlock      = 0x0
	SGLTypeKeyedDataBlock = 0x4

	SGLSubAddress    = 0x0 // keyed: Address is the host's virtual address
	SGLSubOffset     = 0x1 // data block: Address is an offset into in-capsule data
	SGLSubInvalidate = 0xf // keyed: the controller may invalidate Key by Send with Invalidate
)

// SGL is a view of a 16-octet SGL descriptor.
//
// Keyed SGL Data Block (type 4), the host's memory that the target reaches
// by RDMA Read and Write:
//
//	0-7    Address (the host's tagged offset)
//	8-10   Length (24 bits)
//	11-14  Key (the host's STag)
//	15     type 4 << 4 | subtype (0 address, 0xF invalidate)
//
// Data Block with offset subtype (type 0, subtype 1), in-capsule data:
//
//	0-7    Offset into the in-capsule data (after ICDOFF)
//	8-11   Length (32 bits)
//	15     0x01
type SGL []byte

// Type and Subtype return the descriptor's type and subtype.
func (s SGL) Type() uint8    { return s[15] >> 4 }
func (s SGL) Subtype() uint8 { return s[15] & 0xf }

// Addr returns the address (keyed) or in-capsule offset (data block).
func (s SGL) Addr() uint64 { return binary.LittleEndian.Uint64(s[0:]) }

// Keyed reports whether s is a Keyed SGL Data Block descriptor.
func (s SGL) Keyed() bool { return s.Type() == SGLTypeKeyedDataBlock }

// Length returns the data length: 24 bits for a keyed descriptor, 32
// otherwise.
func (s SGL) Length() uint32 {
	if s.Keyed() {
		return uint32(s[8]) | uint32(s[9])<<8 | uint32(s[10])<<16
	}
	return binary.LittleEndian.Uint32(s[8:])
}

// Key returns the keyed descriptor's key (the host's STag).
func (s SGL) Key() uint32 { return binary.LittleEndian.Uint32(s[11:]) }

// Invalidate reports whether the host asks the controller to invalidate
// Key with its response (keyed, subtype 0xF).
func (s SGL) Invalidate() bool { return s.Keyed() && s.Subtype() == SGLSubInvalidate }

// SetKeyed makes s a Keyed SGL Data Block descriptor; length must fit in 24
// bits.
func (s SGL) SetKeyed(addr uint64, length, key uint32, invalidate bool) {
	binary.LittleEndian.PutUint64(s[0:], addr)
	s[8], s[9], s[10] = byte(length), byte(length>>8), byte(length>>16)
	binary.LittleEndian.PutUint32(s[11:], key)
	s[15] = SGLTypeKeyedDataBlock << 4
	if invalidate {
		s[15] |= SGLSubInvalidate
	}
}

// SetInCapsule makes s a Data Block descriptor of length octets at offset
// off of the in-capsule data.
func (s SGL) SetInCapsule(off uint64, length uint32) {
	binary.LittleEndian.PutUint64(s[0:], off)
	binary.LittleEndian.PutUint32(s[8:], length)
	s[12], s[13], s[14] = 0, 0, 0
	s[15] = SGLTypeDataBlock<<4 | SGLSubOffset
}

// Data says where a command's data is, as the target sees it.
type Data struct {
	Len      uint32
	InCap    bool   // in the capsule, at offset Addr after the SQE
	Addr     uint64 // keyed: the host's address; in-capsule: the offset
	Key      uint32 // keyed: the host's STag
	Inval    bool   // keyed: invalidate Key with the response
	Received int    // in-capsule octets that came with the command
}

// ParseData checks the command's SGL descriptor 1 against the in-capsule
// data that arrived with it (inCap octets) and the most the target accepts
// in a capsule (maxInCap), and returns where the data is, or the status
// the command fails with (NVMe/RDMA transport 1.0 section 3.3: keyed data
// blocks with the address or invalidate subtype, and data blocks with the
// offset subtype; anything else is "SGL Descriptor Type Invalid").
func ParseData(c Command, inCap, maxInCap int) (Data, Status) {
	s := c.SGL()
	switch {
	case s.Keyed():
		if st := s.Subtype(); st != SGLSubAddress && st != SGLSubInvalidate {
			return Data{}, StatusSGLInvalidType | DNR
		}
		return Data{Len: s.Length(), Addr: s.Addr(), Key: s.Key(), Inval: s.Invalidate(), Received: inCap}, StatusSuccess
	case s.Type() == SGLTypeDataBlock && s.Subtype() == SGLSubOffset:
		off, n := s.Addr(), uint64(s.Length())
		if off > uint64(maxInCap) || off > uint64(inCap) {
			return Data{}, StatusSGLInvalidOffset | DNR
		}
		if off+n > uint64(inCap) || off+n > uint64(maxInCap) {
			return Data{}, StatusSGLInvalidData | DNR
		}
		return Data{Len: uint32(n), InCap: true, Addr: off, Received: inCap}, StatusSuccess
	}
	return Data{}, StatusSGLInvalidType | DNR
}
