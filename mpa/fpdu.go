package mpa

import "encoding/binary"

// FPDU layout (RFC 5044 section 4.1):
//
//	ULPDU_Length (16 bits, big-endian) | ULPDU | PAD (0-3 zero octets) | CRC (32 bits)
//
// ULPDU_Length counts the ULPDU only. PAD makes 2+ULPDU_Length+PAD a multiple
// of four. The CRC is CRC32c over everything from the length field through the
// pad, including any markers in that range, and travels least significant
// octet first: the byte order of RFC 3720 B.4 and of Linux siw, which
// Wireshark calls "Good CRC32".
const (
	LenFieldLen = 2
	CRCLen      = 4
	MarkerLen   = 4
	// MarkerInterval is the marker spacing in octets of the TCP stream
	// (RFC 5044 section 5).
	MarkerInterval = 512
	// MinFPDU is the smallest FPDU on the wire: length field, pad, CRC.
	MinFPDU = 8
	// MaxULPDU is the largest ULPDU the 16-bit length field can describe.
	MaxULPDU = 0xffff
)

// PadLen returns the number of pad octets after a ULPDU of n octets.
func PadLen(n int) int { return -(n + LenFieldLen) & 3 } // (4 - (n+2)%4) % 4 for n >= 0, without signed division

// FPDULen returns the length of an FPDU carrying n ULPDU octets, without
// markers.
func FPDULen(n int) int { return LenFieldLen + n + PadLen(n) + CRCLen }

// AppendFPDU appends one marker-less FPDU carrying ulpdu to b. With crc false
// the CRC field is zero, as RFC 5044 section 6.1 requires when CRC was not
// negotiated. It is the simple path for tests and scripted peers; Writer is
// the data path.
func AppendFPDU(b []byte, ulpdu []byte, crc bool) []byte {
	start := len(b)
	b = binary.BigEndian.AppendUint16(b, uint16(len(ulpdu)))
	b = append(b, ulpdu...)
	b = append(b, zeros[:PadLen(len(ulpdu))]...)
	var c uint32
	if crc {
		c = CRC32c(b[start:])
	}
	return binary.LittleEndian.AppendUint32(b, c)
}

var zeros [4]byte

// MULPDU returns the largest ULPDU that fits, with its FPDU, in one TCP
// segment of emss octets, by RFC 5044 section 4.5:
//
//	MULPDU = EMSS - (6 + 4 * Ceiling(EMSS / 512) + EMSS mod 4)   with markers
//	MULPDU = EMSS - (6 + EMSS mod 4)                             without
//
// Each FPDU then fits one segment, which hardware peers require. The result
// is at most MaxULPDU, less with markers so that every FPDU pointer fits 16
// bits.
func MULPDU(emss int, markers bool) int {
	limit := MaxULPDU
	if markers {
		limit = 0xffff - LenFieldLen - 3 - CRCLen - MarkerLen*(0xffff/MarkerInterval+1)
	}
	n := emss - (LenFieldLen + CRCLen + emss%4)
	if markers {
		n -= MarkerLen * ((emss + MarkerInterval - 1) / MarkerInterval)
	}
	return max(0, min(n, limit))
}
