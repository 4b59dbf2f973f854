package rdmap

import "encoding/binary"

// ImmediateLen is the length of the Immediate Data header (RFC 7306 section
// 6.2): the whole message after the untagged DDP header.
const ImmediateLen = 8

// Immediate is a view of the Immediate Data header of an Immediate Data or
// Immediate Data with SE message (RFC 7306 section 6.2, Figure 7): 64 bits of
// data, sent on queue 0. It must hold ImmediateLen octets (check with
// CheckLen first).
type Immediate []byte

// Data returns the 8 octets of immediate data as a big-endian number.
func (h Immediate) Data() uint64 { return binary.BigEndian.Uint64(h) }

// AppendImmediate appends an Immediate Data header to b.
func AppendImmediate(b []byte, data uint64) []byte { return binary.BigEndian.AppendUint64(b, data) }
