package ddp

import "fmt"

// Header lengths in octets, control octet and RsvdULP included (RFC 5041
// sections 4.2 and 4.3). Over MPA the 2-octet ULPDU_Length precedes them.
const (
	TaggedHdrLen   = 14 // control, RsvdULP octet, STag (32), TO (64)
	UntaggedHdrLen = 18 // control, RsvdULP[0:7], RsvdULP[8:39], QN, MSN, MO
)

// Version is the DDP version this package speaks (RFC 5041 section 4.1: DV
// "MUST be set to one").
const Version = 1

// DDP control octet (RFC 5041 section 4.1, Figure 3).
const (
	FlagTagged   byte = 0x80 // T: tagged buffer model
	FlagLast     byte = 0x40 // L: last segment of a message
	ReservedMask byte = 0x3c // Rsvd: zero on transmit, not checked on receive
	VersionMask  byte = 0x03 // DV
)

// Octet offsets shared by both header formats.
const (
	ctrlOff    = 0
	ulpCtrlOff = 1
)

// HdrLen returns the DDP header length of the tagged or untagged model.
func HdrLen(tagged bool) int {
	if tagged {
		return TaggedHdrLen
	}
	return UntaggedHdrLen
}

// ctrl builds a DDP control octet with DV = 1 and the reserved bits zero, as
// RFC 5041 section 4.1 requires on transmit.
func ctrl(tagged, last bool) byte {
	c := byte(Version)
	if tagged {
		c |= FlagTagged
	}
	if last {
		c |= FlagLast
	}
	return c
}

// Parse checks the DDP header at the start of a DDP segment b and returns its
// length and buffer model. Only the header octets are examined; b may carry
// the payload after them, or end with the header: a receiver that reads its
// stream piece by piece reads the first octet, then as much of the segment as
// HdrLen of its T flag asks for (all of it, if the segment is shorter), and
// passes that (package verbs does, for every segment it receives).
//
// The version is checked first because with any other DV the rest of the
// layout is unknown. A wrong version is an "invalid DDP version" error of the
// segment's buffer model (RFC 5041 section 7.2). The reserved bits are not
// looked at: RFC 5041 section 4.1 says they are "not checked on receive".
//
// A segment too short for its header has no error number of its own in RFC
// 5041; it is reported as a DDP local catastrophic error.
func Parse(b []byte) (hdrLen int, tagged bool, err error) {
	if len(b) == 0 {
		return 0, false, errShort(0, false)
	}
	c := b[ctrlOff]
	tagged = c&FlagTagged != 0
	if v := c & VersionMask; v != Version {
		// RFC 5041 section 4.1: "This field MUST be set to one".
		if tagged {
			return 0, true, Errorf(ETypeTagged, CodeTaggedVersion, "DV %d", v)
		}
		return 0, false, Errorf(ETypeUntagged, CodeUntaggedVersion, "DV %d", v)
	}
	hdrLen = HdrLen(tagged)
	if len(b) < hdrLen {
		return 0, tagged, errShort(len(b), tagged)
	}
	return hdrLen, tagged, nil
}

func errShort(n int, tagged bool) *Error {
	model := "untagged"
	if tagged {
		model = "tagged"
	}
	return &Error{EType: ETypeCatastrophic, Code: 0,
		Msg: fmt.Sprintf("%d-octet segment is shorter than the %d-octet %s header", n, HdrLen(tagged), model)}
}
