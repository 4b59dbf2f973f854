package verbs

import (
	"encoding/binary"
	"fmt"
)

// RemoteBuffer is what a peer needs to reach a memory region with RDMA: its
// address, RKey and length, the triple RDMA programs exchange in MPA
// private data or in a Send before they Write or Read. Its wire form is
// rping's (RemoteBufferLen octets, big-endian): address, RKey, length.
type RemoteBuffer struct {
	Addr uint64
	RKey uint32
	Len  uint32
}

// RemoteBufferLen is the size of a RemoteBuffer on the wire.
const RemoteBufferLen = 16

// RemoteBuffer returns what a peer needs to reach the whole of mr.
func (mr *MR) RemoteBuffer() RemoteBuffer {
	return RemoteBuffer{Addr: mr.Addr(), RKey: mr.RKey(), Len: clampU32(mr.Len())}
}

// Append appends b's wire form to dst.
func (b RemoteBuffer) Append(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, b.Addr)
	dst = binary.BigEndian.AppendUint32(dst, b.RKey)
	return binary.BigEndian.AppendUint32(dst, b.Len)
}

// ParseRemoteBuffer reads a RemoteBuffer from the first RemoteBufferLen
// octets of p.
func ParseRemoteBuffer(p []byte) (RemoteBuffer, error) {
	if len(p) < RemoteBufferLen {
		return RemoteBuffer{}, fmt.Errorf("%w: %d octets, a remote buffer takes %d", ErrInvalidArg, len(p), RemoteBufferLen)
	}
	return RemoteBuffer{Addr: binary.BigEndian.Uint64(p), RKey: binary.BigEndian.Uint32(p[8:]), Len: binary.BigEndian.Uint32(p[12:])}, nil
}
