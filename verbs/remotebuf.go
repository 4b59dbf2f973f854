package verbs

import (
	"encoding/binary"
	"fmt"
)

// RemoteBuffer is what a peer needs to reach a memory region with RDMA: its
// address, RKey and length, the triple RDMA programs exchange in MPA
// private data or in a Send before they Write or Read. Its wire form is
// rping's (RemoteBufferLen octets, big-endian): address, RKey, length.
//
// Len is the region's whole length, which may exceed 4 GiB (regions go
// up to DeviceAttr.MaxMRSize). One RDMA Read moves at most 4 GiB - 1
// octets (its Read Request's size is 32 bits on the wire, as an SGE's
// length): reach the rest of a larger region with more WRs, each at
// RemoteAddr = Addr + offset.
type RemoteBuffer struct {
	Addr uint64
	RKey uint32
	Len  uint64
}

// RemoteBufferLen is the size of a RemoteBuffer on the wire.
const RemoteBufferLen = 16

// RemoteBuffer returns what a peer needs to reach the whole of mr: the
// address, RKey and length of one binding, also while a fast registration
// binds the region anew.
func (mr *MR) RemoteBuffer() RemoteBuffer {
	b := mr.b.Load()
	return RemoteBuffer{Addr: b.addr, RKey: b.stag, Len: uint64(len(b.buf))}
}

// Append appends b's wire form to dst. rping's length field has 32 bits: a
// Len of 4 GiB or more goes out as 0xffffffff (the most it can say), so a
// peer of such a region learns its first 4 GiB - 1 octets; send larger
// lengths in a form of your own.
func (b RemoteBuffer) Append(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, b.Addr)
	dst = binary.BigEndian.AppendUint32(dst, b.RKey)
	return binary.BigEndian.AppendUint32(dst, uint32(min(b.Len, 1<<32-1)))
}

// ParseRemoteBuffer reads a RemoteBuffer from the first RemoteBufferLen
// octets of p.
func ParseRemoteBuffer(p []byte) (RemoteBuffer, error) {
	if len(p) < RemoteBufferLen {
		return RemoteBuffer{}, fmt.Errorf("%w: %d octets, a remote buffer takes %d", ErrInvalidArg, len(p), RemoteBufferLen)
	}
	return RemoteBuffer{Addr: binary.BigEndian.Uint64(p), RKey: binary.BigEndian.Uint32(p[8:]), Len: uint64(binary.BigEndian.Uint32(p[12:]))}, nil
}
