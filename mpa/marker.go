package mpa

import "encoding/binary"

// Markers (RFC 5044 section 5): when the receiver asked for them, the sender
// puts a 4-octet marker at every 512th octet of its stream, counted from the
// first octet of the first FPDU after start-up. A marker is 16 reserved bits
// and FPDUPTR, the distance in stream octets from the FPDU's ULPDU_Length
// field to the marker. A marker that falls exactly where an FPDU begins
// precedes that FPDU's length field and has FPDUPTR 0. Markers are not counted
// in ULPDU_Length but are covered by the CRC of the FPDU they sit in.

// markerBytes encodes a marker with the given FPDU pointer.
func markerBytes(b *[MarkerLen]byte, fpduPtr uint16) {
	b[0], b[1] = 0, 0
	binary.BigEndian.PutUint16(b[2:], fpduPtr)
}

// toNextMarker returns how many stream octets remain before the next marker
// position, given the stream offset pos; 0 means a marker is due at pos.
func toNextMarker(pos uint64) int {
	return int((MarkerInterval - pos%MarkerInterval) % MarkerInterval)
}
