package main

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// offer is what the server tells each client in the private data of its
// MPA Reply: where the file's contents are and what they hash to.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        magic "FTC1"                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Addr: the region's tagged                  |
//	+                    offset (MR.Addr), 64 bits                  +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Len: octets to read                        |
//	+                    from Addr, 64 bits                         +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    RKey: the region's STag                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |
//	~                    SHA-256 of the Len octets (32 octets)      ~
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |
//	~                    Name: the file's base name, UTF-8,         ~
//	|                    the rest of the private data (may be empty)|
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Integers are big-endian. A change of layout takes a new magic, so that
// a client never misreads a server of another version.
type offer struct {
	Addr, Len uint64
	RKey      uint32
	Sum       [32]byte
	Name      string
}

// offerMagic starts every offer; offerLen is the fixed part's length.
const (
	offerMagic = "FTC1"
	offerLen   = 4 + 8 + 8 + 4 + 32
)

var errNotOffer = errors.New("not a fetch server: its private data has no offer")

// appendOffer appends o's encoding to b.
func appendOffer(b []byte, o offer) []byte {
	b = append(b, offerMagic...)
	b = binary.BigEndian.AppendUint64(b, o.Addr)
	b = binary.BigEndian.AppendUint64(b, o.Len)
	b = binary.BigEndian.AppendUint32(b, o.RKey)
	b = append(b, o.Sum[:]...)
	return append(b, o.Name...)
}

// parseOffer decodes an offer.
func parseOffer(b []byte) (offer, error) {
	if len(b) < offerLen || string(b[:4]) != offerMagic {
		return offer{}, fmt.Errorf("%w (%d octets)", errNotOffer, len(b))
	}
	o := offer{
		Addr: binary.BigEndian.Uint64(b[4:]),
		Len:  binary.BigEndian.Uint64(b[12:]),
		RKey: binary.BigEndian.Uint32(b[20:]),
		Name: string(b[offerLen:]),
	}
	copy(o.Sum[:], b[24:offerLen])
	return o, nil
}
