package transport

import (
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/verbs"
)

// CRCMaxFPDU is the FPDU size ConnConfig caps FPDUs at when CRCs are asked
// for, unless verbs.ConnConfig.MaxFPDU is set: 1440 octets, the TCP
// segments QEMU's user-mode network hands a guest and at most one segment
// on any Ethernet path. Linux siw mis-reads a CRC whose trailer arrives
// split across two socket buffers; an FPDU alone in one segment is not
// split. docs/nvmeof-crc.md has the whole story.
const CRCMaxFPDU = 1440

// ConnConfig returns the iWARP configuration of a queue: without askCRC
// the MPA CRC policy is mpa.CRCOff (CRCs only if the peer asks, as siw and
// Linux's nvme-rdma); with it, CRCs are asked for and, unless the caller
// sized FPDUs itself, FPDUs are at most CRCMaxFPDU octets, one per TCP
// segment.
func ConnConfig(cc verbs.ConnConfig, askCRC bool) verbs.ConnConfig {
	if !askCRC {
		if cc.MPA.CRC == mpa.CRCOn {
			cc.MPA.CRC = mpa.CRCOff
		}
		return cc
	}
	if cc.MaxFPDU == 0 {
		cc.MaxFPDU = CRCMaxFPDU
		cc.SegmentPerFPDU = true
	}
	return cc
}
