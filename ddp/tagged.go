package ddp

import "encoding/binary"

// Tagged is a view of a tagged-buffer DDP header (RFC 5041 section 4.2):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|T|L| Rsvd  | DV|   RsvdULP     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                              STag                             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                            TO (64)                            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// It must hold at least TaggedHdrLen octets (check with Parse first).
type Tagged []byte

const (
	taggedSTagOff = 2
	taggedTOOff   = 6
)

// Last reports the L flag: this is the message's last segment.
func (h Tagged) Last() bool { return h[ctrlOff]&FlagLast != 0 }

// Version returns the DV field.
func (h Tagged) Version() uint8 { return h[ctrlOff] & VersionMask }

// ULPCtrl returns RsvdULP, the octet that RDMAP uses as its control field.
func (h Tagged) ULPCtrl() byte { return h[ulpCtrlOff] }

// STag returns the Data Sink's steering tag.
func (h Tagged) STag() uint32 { return binary.BigEndian.Uint32(h[taggedSTagOff:]) }

// TO returns the tagged offset of the segment's first payload octet.
func (h Tagged) TO() uint64 { return binary.BigEndian.Uint64(h[taggedTOOff:]) }

// AppendTagged appends a tagged DDP header to b.
func AppendTagged(b []byte, last bool, ulpCtrl byte, stag uint32, to uint64) []byte {
	b = append(b, ctrl(true, last), ulpCtrl)
	b = binary.BigEndian.AppendUint32(b, stag)
	return binary.BigEndian.AppendUint64(b, to)
}
