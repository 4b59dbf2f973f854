package ddp

import "encoding/binary"

// Untagged is a view of an untagged-buffer DDP header (RFC 5041 section 4.3):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|T|L| Rsvd  | DV| RsvdULP[0:7]  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                            RsvdULP[8:39]                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                               QN                              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                              MSN                              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                              MO                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// It must hold at least UntaggedHdrLen octets (check with Parse first).
type Untagged []byte

const (
	untaggedULPWordOff = 2
	untaggedQNOff      = 6
	untaggedMSNOff     = 10
	untaggedMOOff      = 14
)

// Last reports the L flag: this is the message's last segment.
func (h Untagged) Last() bool { return h[ctrlOff]&FlagLast != 0 }

// Version returns the DV field.
func (h Untagged) Version() uint8 { return h[ctrlOff] & VersionMask }

// ULPCtrl returns RsvdULP[0:7], the octet that RDMAP uses as its control
// field.
func (h Untagged) ULPCtrl() byte { return h[ulpCtrlOff] }

// ULPWord returns RsvdULP[8:39], which RDMAP uses for the Invalidate STag.
func (h Untagged) ULPWord() uint32 { return binary.BigEndian.Uint32(h[untaggedULPWordOff:]) }

// QN returns the queue number.
func (h Untagged) QN() uint32 { return binary.BigEndian.Uint32(h[untaggedQNOff:]) }

// MSN returns the message sequence number.
func (h Untagged) MSN() uint32 { return binary.BigEndian.Uint32(h[untaggedMSNOff:]) }

// MO returns the message offset of the segment's first payload octet.
func (h Untagged) MO() uint32 { return binary.BigEndian.Uint32(h[untaggedMOOff:]) }

// AppendUntagged appends an untagged DDP header to b.
func AppendUntagged(b []byte, last bool, ulpCtrl byte, ulpWord, qn, msn, mo uint32) []byte {
	b = append(b, ctrl(false, last), ulpCtrl)
	b = binary.BigEndian.AppendUint32(b, ulpWord)
	b = binary.BigEndian.AppendUint32(b, qn)
	b = binary.BigEndian.AppendUint32(b, msn)
	return binary.BigEndian.AppendUint32(b, mo)
}
