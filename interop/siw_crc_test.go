//go:build interop

package interop

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/verbs"
)

// A CRC error on a connection with siw is either ours (we checked right
// octets wrong) or siw's (it sent a CRC that does not match its octets).
// CI once saw our QP refuse the 33rd Write FPDU of siw's first 60000-octet
// rping for its CRC, and could not tell which; 4 700 such pings on this
// machine afterwards did not show it again. The capture tells which: it
// holds the octets as TCP handed them to us, and Wireshark checks their
// CRCs itself.

// siwBadCRC is for a case whose exchange failed. It reports whether our QP
// refused an FPDU for its CRC and Wireshark, reading the capture (complete:
// stop reports no packets dropped), finds a bad CRC in an FPDU that siw
// sent (fromSiw, a display filter for siw's direction) and none in ours.
// Then our Terminate was the right answer and the case may run again
// against a fresh peer. A CRC error that the capture does not show is ours,
// and the case fails as it is.
func siwBadCRC(t *testing.T, qp *verbs.QP, pcap string, stop func() int, fromSiw string) bool {
	t.Helper()
	if !errors.Is(qp.Err(), mpa.ErrCRC) {
		return false
	}
	if n := stop(); n > 0 {
		t.Logf("our QP saw a CRC error, and the capture misses %d packets: no telling whose it is", n)
		return false
	}
	theirs := badCRCs(t, pcap, fromSiw)
	ours := badCRCs(t, pcap, "!("+fromSiw+")")
	t.Logf("our QP: %v; Wireshark finds %d bad CRCs in siw's FPDUs (%s), %d in ours", qp.Err(), len(theirs), strings.Join(theirs, "; "), len(ours))
	return len(theirs) > 0 && len(ours) == 0
}

// badCRCRe picks the CRC check's verdict out of Wireshark's PDML, frameRe
// the packet's frame number.
var (
	badCRCRe = regexp.MustCompile(`showname="(CRC[^"]*Bad CRC32[^"]*)"`)
	frameRe  = regexp.MustCompile(`name="frame.number"[^>]*show="(\d+)"`)
)

// badCRCs returns Wireshark's verdict on every FPDU matching filter whose
// CRC is bad, with its frame number.
func badCRCs(t *testing.T, pcap, filter string) []string {
	var bad []string
	for _, pkt := range strings.Split(tshark(t, pcap, "-Y", "iwarp_mpa.fpdu && ("+filter+")", "-T", "pdml"), "<packet>") {
		frame := frameRe.FindStringSubmatch(pkt)
		for _, m := range badCRCRe.FindAllStringSubmatch(pkt, -1) {
			if frame != nil {
				bad = append(bad, "frame "+frame[1]+": "+m[1])
			} else {
				bad = append(bad, m[1])
			}
		}
	}
	return bad
}
