package perf

// tcp_bw --floor: plain TCP plus the work per octet that MPA over a socket
// cannot avoid, whoever writes the stack. The sender takes the CRC32c of
// every FPDU's payload; the receiver, which reads the stream in large
// reads (one system call a segment would cost more than a copy), places
// each payload with one copy out of its read buffer and takes its CRC32c
// as it copies. With --crc=off only the receiver's copy is left. The user
// time a stack spends beyond tcp_bw --floor is its own: headers, STag
// checks, queues and completions. (Its system calls are tcp_bw's: a stack
// that writes more at once spends less system time than it.)

import (
	"net"
	"sync/atomic"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/tcpx"
)

// floorHeader is what an FPDU carries besides its payload: the MPA length
// field, a tagged DDP header and the CRC (2 + 14 + 4 octets).
const floorHeader = 20

// floorOctets counts the octets every floor has worked on (sent and
// received), so that a test can see that the work was done.
var floorOctets atomic.Int64

// floorCRC reports whether --floor takes CRCs (unless --crc=off).
func (p *Params) floorCRC() bool { return p.CRC != mpa.CRCOff }

// floor is one connection's floor work.
type floor struct {
	crc   bool
	piece int    // an FPDU's payload on this connection
	sum   uint32 // the CRCs folded together, so that they are taken
	dst   []byte // the receiver's placement target, one message long
	pos   int    // where the stream is in the message
}

// newFloor sizes the pieces from c's effective MSS, as MPA sizes FPDUs;
// size is the message size, the span the receiver places into.
func newFloor(p *Params, c *net.TCPConn, size int) *floor {
	piece := 1448 - floorHeader
	if m, err := tcpx.EMSS(c); err == nil && m > 2*floorHeader {
		piece = m - floorHeader
	}
	return &floor{crc: p.floorCRC(), piece: piece, dst: make([]byte, max(size, 1))}
}

// sent is the sender's part for one message.
func (f *floor) sent(b []byte) {
	floorOctets.Add(int64(len(b)))
	if !f.crc {
		return
	}
	for len(b) > 0 {
		n := min(f.piece, len(b))
		f.sum ^= mpa.CRC32c(b[:n])
		b = b[n:]
	}
}

// received is the receiver's part for the octets of one read: each piece
// copied into dst, which stands for the message, with its CRC. Pieces lie
// where a message's FPDUs do (every piece octets from its start, the last
// shorter); a read that ends inside one splits it in two, as a reader
// whose buffer ends inside an FPDU takes its CRC in two steps.
func (f *floor) received(b []byte) {
	floorOctets.Add(int64(len(b)))
	for len(b) > 0 {
		if f.pos == len(f.dst) {
			f.pos = 0
		}
		n := min(f.piece-f.pos%f.piece, len(b), len(f.dst)-f.pos)
		d := f.dst[f.pos : f.pos+n]
		if f.crc {
			_, c := mpa.CopyCRC32c(d, b[:n])
			f.sum ^= c
		} else {
			copy(d, b[:n])
		}
		f.pos += n
		b = b[n:]
	}
}
