//go:build interop

package interop

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
)

// An MPA judge of our own, for streams too long or too reordered for
// Wireshark to keep its place in: it walks one direction of a connection
// (a tcpFlow's octets) as RFC 5044 frames it, the start-up frame and then
// FPDUs back to back (with markers where they were asked for), and takes
// every FPDU's CRC32c again with hash/crc32, an implementation independent
// of package mpa's.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// mpaWalk is what walking one direction found.
type mpaWalk struct {
	startup       string // "request" or "reply"
	rev           uint8
	crcFlag       bool // the start-up frame's C bit
	markerFlag    bool // its M bit
	start         int  // the first FPDU's octet
	fpdus, badCRC int  // FPDUs walked, and those whose CRC is wrong
	bad           []string
	tail          int   // octets after the last whole FPDU: the stream ends inside one
	err           error // the stream is not MPA: framing broken at some octet
}

func (w mpaWalk) String() string {
	s := fmt.Sprintf("MPA %s rev %d, %d FPDUs, %d bad CRCs", w.startup, w.rev, w.fpdus, w.badCRC)
	if w.tail > 0 {
		s += fmt.Sprintf(", ends %d octets into an FPDU", w.tail)
	}
	if w.err != nil {
		s += ", " + w.err.Error()
	}
	if len(w.bad) > 0 {
		s += ": " + strings.Join(w.bad, "; ")
	}
	return s
}

// walkStartup reads the MPA Request or Reply at the start of data and
// returns its length.
func walkStartup(data []byte, w *mpaWalk) int {
	const hdr = 20
	if len(data) < hdr {
		w.err = fmt.Errorf("%d octets: no MPA start-up frame", len(data))
		return -1
	}
	switch string(data[:16]) {
	case "MPA ID Req Frame":
		w.startup = "request"
	case "MPA ID Rep Frame":
		w.startup = "reply"
	default:
		w.err = fmt.Errorf("no MPA key: %q", data[:16])
		return -1
	}
	w.markerFlag, w.crcFlag, w.rev = data[16]&0x80 != 0, data[16]&0x40 != 0, data[17]
	if data[16]&0x20 != 0 {
		w.err = fmt.Errorf("a rejecting Reply")
	}
	return hdr + int(binary.BigEndian.Uint16(data[18:]))
}

// walkFPDUs walks data from off as FPDUs without markers; with crc, every
// one's CRC32c (over its length, ULPDU and pad, sent little-endian as
// siw and Wireshark take it) must match, and without it the field must be
// zero.
func walkFPDUs(data []byte, off int, crc bool, w *mpaWalk) {
	w.start = off
	for off < len(data) {
		if len(data)-off < 2 {
			w.tail = len(data) - off
			return
		}
		ulpdu := int(binary.BigEndian.Uint16(data[off:]))
		n := int(framing(ulpdu))
		if !w.lengthOK(off, ulpdu) {
			return
		}
		if len(data)-off < n {
			w.tail = len(data) - off
			return
		}
		if !w.check(off, data[off:off+n-4], data[off+2+ulpdu:off+n-4], binary.LittleEndian.Uint32(data[off+n-4:]), crc) {
			return
		}
		off += n
	}
}

// lengthOK checks the ULPDU length of the FPDU at octet off: at least the
// shortest DDP header (RFC 5041: 14 tagged, 18 untagged).
func (w *mpaWalk) lengthOK(off, ulpdu int) bool {
	if ulpdu < 14 {
		w.err = fmt.Errorf("FPDU %d at octet %d: ULPDU length %d, shorter than any DDP header", w.fpdus, off, ulpdu)
	}
	return w.err == nil
}

// check counts the FPDU at octet off: covered, the octets its CRC covers
// (markers inside included); got, its CRC field, which with crc must be
// their CRC32c and without it zero; pad, which must be zeros.
func (w *mpaWalk) check(off int, covered, pad []byte, got uint32, crc bool) bool {
	want := uint32(0)
	if crc {
		want = crc32.Checksum(covered, castagnoli)
	}
	if got != want {
		w.badCRC++
		if len(w.bad) < 5 {
			w.bad = append(w.bad, fmt.Sprintf("FPDU %d at octet %d: CRC %08x, its octets' %08x", w.fpdus, off, got, want))
		}
	}
	if !bytes.Equal(pad, make([]byte, len(pad))) {
		w.err = fmt.Errorf("FPDU %d at octet %d: pad not zero", w.fpdus, off)
		return false
	}
	w.fpdus++
	return true
}

// walkConn walks both directions of one MPA connection: init is the
// initiator's (which starts with the Request), resp the responder's. The
// Reply's C bit says whether both directions carry CRCs (RFC 5044
// section 7.1.2: a responder that sees C set in the Request sets it too);
// M in a start-up frame asks the other side for markers in the frames it
// sends.
func walkConn(init, resp []byte) (mpaWalk, mpaWalk) {
	var i, r mpaWalk
	ni, nr := walkStartup(init, &i), walkStartup(resp, &r)
	if i.err == nil && i.startup != "request" {
		i.err = fmt.Errorf("the initiator's stream starts with a %s", i.startup)
	}
	if r.err == nil && r.startup != "reply" {
		r.err = fmt.Errorf("the responder's stream starts with a %s", r.startup)
	}
	if i.err != nil || r.err != nil {
		return i, r
	}
	walkMarkedFPDUs(init, ni, r.crcFlag, r.markerFlag, &i)
	walkMarkedFPDUs(resp, nr, r.crcFlag, i.markerFlag, &r)
	return i, r
}

// markerInterval is RFC 5044's: a marker every 512 octets of a direction's
// stream, counted from its first FPDU's first octet.
const markerInterval = 512

// walkMarkedFPDUs is walkFPDUs for a direction that may carry markers
// (RFC 5044 section 4.3): where one is due, 4 octets, 16 reserved bits of
// zero and FPDUPTR, the distance back to the FPDU's length field (0 for
// one due where an FPDU starts, which goes before the length field: the
// FPDU's first octets).
// Markers count in no length, but the CRC covers those inside its FPDU.
// Every FPDU is a multiple of 4 octets, so a marker never splits the
// length or the CRC field.
func walkMarkedFPDUs(data []byte, off int, crc, markers bool, w *mpaWalk) {
	if !markers {
		walkFPDUs(data, off, crc, w)
		return
	}
	w.start = off
	origin := off
	logical := make([]byte, 0, 1<<16+8)
	for off < len(data) {
		fstart, p, hdr := off, off, off
		logical = logical[:0]
		need, crcAt := 2, -1
		for len(logical) < need {
			if (p-origin)%markerInterval == 0 {
				if len(data)-p < 4 {
					w.tail = len(data) - fstart
					return
				}
				ptr := 0 // before the length field: the FPDU's first
				if p > fstart {
					ptr = p - hdr
				}
				if data[p] != 0 || data[p+1] != 0 || int(binary.BigEndian.Uint16(data[p+2:])) != ptr {
					w.err = fmt.Errorf("FPDU %d at octet %d: the marker at octet %d reads %x, want FPDUPTR %d", w.fpdus, fstart, p, data[p:p+4], ptr)
					return
				}
				p += 4
				if p == fstart+4 {
					hdr = p
				}
				continue
			}
			if p >= len(data) {
				w.tail = len(data) - fstart
				return
			}
			if len(logical) == need-4 && need > 2 {
				crcAt = p
			}
			logical = append(logical, data[p])
			p++
			if len(logical) == 2 {
				ulpdu := int(binary.BigEndian.Uint16(logical))
				if !w.lengthOK(fstart, ulpdu) {
					return
				}
				need = int(framing(ulpdu))
			}
		}
		ulpdu := int(binary.BigEndian.Uint16(logical))
		if !w.check(fstart, data[fstart:crcAt], logical[2+ulpdu:need-4], binary.LittleEndian.Uint32(logical[need-4:]), crc) {
			return
		}
		off = p
	}
}

// siwSplitCopy is what Linux siw 6.1's siw_get_trailer leaves in its
// trailer buffer (pad octets, then the CRC) when an FPDU's trailer
// arrives in two socket buffers, the first holding a of its octets: it
// copies each piece to the buffer's start (interop/README.md, "siw
// mis-checks a CRC whose trailer arrives split"), so the second piece
// overwrites the first, and octets neither piece reached keep whatever
// the previous FPDU left there (known false).
func siwSplitCopy(trailer []byte, a int) (buf []byte, known []bool) {
	buf, known = make([]byte, len(trailer)), make([]bool, len(trailer))
	for i := range a {
		buf[i], known[i] = trailer[i], true
	}
	for i := range len(trailer) - a {
		buf[i], known[i] = trailer[a+i], true
	}
	return buf, known
}

// explainSiwCRC looks for the FPDU of a walked stream (data, FPDUs from
// start, CRCs on) whose trailer, split by siw as siwSplitCopy models,
// gives the CRC error siw logged ("siw: crc error. in: in, own own": the
// CRC it read and the one it took, over the pad octets it read too). It
// returns the FPDU's index and where its trailer was split, or -1.
func explainSiwCRC(data []byte, start int, in, own uint32) (fpdu, split int) {
	for k, off := 0, start; off+2 <= len(data); k++ {
		ulpdu := int(binary.BigEndian.Uint16(data[off:]))
		n := int(framing(ulpdu))
		if ulpdu < 14 || off+n > len(data) {
			break
		}
		body := crc32.Update(0, castagnoli, data[off:off+2+ulpdu])
		if a := siwSplitGives(data[off+2+ulpdu:off+n], body, in, own); a > 0 {
			return k, a
		}
		off += n
	}
	return -1, 0
}

// siwSplitGives returns where a split of trailer (pad octets and CRC)
// makes siw log in and own, given body, the CRC of the FPDU up to its pad;
// 0 if none does.
func siwSplitGives(trailer []byte, body, in, own uint32) int {
	pad := len(trailer) - 4
	var inLE [4]byte
	binary.LittleEndian.PutUint32(inLE[:], in)
	for a := 1; a < len(trailer); a++ {
		buf, known := siwSplitCopy(trailer, a)
		if slices.Contains(known[:pad], false) || crc32.Update(body, castagnoli, buf[:pad]) != own {
			continue
		}
		match := true
		for i := range 4 {
			if known[pad+i] && buf[pad+i] != inLE[i] {
				match = false
			}
		}
		if match {
			return a
		}
	}
	return 0
}
