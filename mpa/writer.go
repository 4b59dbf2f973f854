package mpa

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
)

// Writer frames ULPDUs into FPDUs on one direction of a TCP stream and hands
// many of them to the kernel in one gather write (writev), like siw_tx_hdt:
// header octets, the payload slice of the caller's memory (never copied when
// it is large), pad and CRC, with markers spliced in where the stream offset
// crosses a 512-octet boundary.
//
// A Writer is owned by one goroutine (the QP's transmit loop).
type Writer struct {
	w       io.Writer
	crc     bool
	markers bool

	pos   uint64 // stream octets queued since the first FPDU
	start uint64 // stream offset of the current FPDU's length field
	c     uint32 // running CRC of the current FPDU
	// crcLater: the current FPDU goes into the arena whole, and its CRC is
	// computed there in one pass when it is complete, but for payloads
	// that crc32cCopy checksums as it copies them; arena[crcFrom:] is what
	// c does not cover yet.
	crcLater bool
	crcFrom  int

	vecs      [][]byte    // queued iovecs
	bufs      net.Buffers // handed to WriteTo; shares vecs' backing array
	arena     []byte      // header, small payload, marker and trailer octets
	arenaRef  *[]byte     // arena's pool entry; nil for small
	lastArena bool        // the last iovec ends at len(arena) and can grow
	refs      bool        // a queued iovec references caller memory (Copied)
	queued    int
	written   uint64  // octets written by successful Flushes
	scratch   [8]byte // length field, marker and trailer octets on their way into the arena
	one       [1][]byte
	hdrWords  [24]byte // AppendWords' header, when it takes AppendV's path

	raw      syscall.RawConn // the socket, for TryFlush; nil on other streams
	rawFn    func(uintptr) bool
	iov      iovecs // TryFlush's iovecs, grown as needed
	rawOne   []byte // TryFlush's one piece, when that is all it writes
	rawN     int    // what rawFn's write returned
	rawErrno syscall.Errno

	vw VectoredWriter // w, if it takes a whole gather list at once

	// small is the arena of a Writer that sends a small FPDU with none
	// taken: a pool's Get and Put around every message of a ping-pong
	// (Idle gives the arena back after each) cost its latency more than
	// the copy they would save. Last, so that the fields above keep
	// their cache lines.
	small [smallArena]byte
}

// Sizes of the Writer's staging memory.
const (
	// arenaSize holds a whole transmit batch (256 KiB in verbs) of small
	// FPDUs, copied, so that a bulk sender of Ethernet-MSS FPDUs writes one
	// iovec per batch: two iovecs per FPDU and a writev per 32 KiB cost the
	// kernel so much more that an MTU-1500 path ran at 0.6 of plain TCP.
	// Arenas are shared through a pool: a Writer holds one only while it
	// has FPDUs queued or keeps it across Flushes until Idle.
	arenaSize = 256 << 10
	// MaxHeader is the largest ULPDU header Append copies: the DDP and RDMAP
	// headers of any message, a Terminate with both headers included among
	// them.
	MaxHeader = 128
	// copyMax is the payload size up to which Append copies the payload next
	// to the header: up to a few KiB, a copy is cheaper than an iovec of its
	// own (an Ethernet-MSS FPDU carries at most 1442 octets).
	copyMax = 4096
	// maxVecs bounds the iovecs of one flush (Linux's IOV_MAX is 1024).
	maxVecs = 1024
	// smallArena is the size of a Writer's own arena, for FPDUs of up to
	// that many octets when it holds no other (a message of a few hundred
	// octets, and the requests and acknowledgements of a connection).
	smallArena = 512
)

// NewWriter returns a Writer on w. crc says whether CRC32c was negotiated;
// markers whether the peer asked to receive markers.
func NewWriter(w io.Writer, crc, markers bool) *Writer {
	wr := &Writer{
		w:       w,
		crc:     crc,
		markers: markers,
		vecs:    make([][]byte, 0, 16),
		raw:     rawWriterOf(w),
	}
	wr.vw, _ = w.(VectoredWriter)
	return wr
}

// VectoredWriter is a stream that takes a Flush's whole gather list in one
// call. The Writer hands an io.Writer the pieces one at a time
// (net.Buffers.WriteTo), which a stream that frames its own records, such
// as TLS, would turn into a record per header, payload and CRC; given the
// list at once it can fill whole records.
type VectoredWriter interface {
	WriteVectored(v [][]byte) (int64, error)
}

// ErrTooLong is returned by Append for a ULPDU that does not fit one FPDU.
var ErrTooLong = errors.New("mpa: ULPDU too long for one FPDU")

// Append queues one FPDU whose ULPDU is hdr followed by payload. hdr is copied;
// payload is referenced until the next Flush returns and must not change
// before then, unless Copied says the Writer took a copy. Append flushes
// first when its staging memory is full.
func (w *Writer) Append(hdr, payload []byte) error {
	w.one[0] = payload
	err := w.AppendV(hdr, w.one[:])
	w.one[0] = nil
	return err
}

// AppendV is Append with the payload gathered from several slices (the
// scatter/gather list of a work request).
func (w *Writer) AppendV(hdr []byte, payload [][]byte) error {
	n := len(hdr)
	for _, p := range payload {
		n += len(p)
	}
	if len(hdr) > MaxHeader {
		return fmt.Errorf("mpa: header of %d octets exceeds %d", len(hdr), MaxHeader)
	}
	total := FPDULen(n)
	if w.markers {
		total += MarkerLen * (total/MarkerInterval + 2)
	}
	// With markers the FPDU pointer of the last marker must fit 16 bits.
	if n > MaxULPDU || (w.markers && total > 0xffff) {
		return ErrTooLong
	}
	if !w.hasRoom(len(payload), total) {
		if err := w.makeRoom(len(payload), total); err != nil {
			return err
		}
	}

	if !w.markers && allCopied(payload) {
		w.appendCopied(hdr, payload, n, total)
		return nil
	}

	p0 := w.pos
	w.c = 0
	if w.markers && toNextMarker(w.pos) == 0 {
		w.putMarker(0) // a marker at an FPDU boundary precedes the length field
	}
	w.start = w.pos

	// Without markers an FPDU whose payload is all copied lies in one piece
	// of the arena (the room was made above): one CRC pass over it costs
	// less than one per piece, and a payload's pass costs less still when
	// it is the copy's (see emit).
	w.crcLater = w.crc && !w.markers
	for _, p := range payload {
		w.crcLater = w.crcLater && len(p) <= copyMax
	}
	w.crcFrom = len(w.arena)

	// Local arrays would escape through crc32cUpdate; the scratch field does not allocate.
	binary.BigEndian.PutUint16(w.scratch[:2], uint16(n))
	w.emit(w.scratch[:2], true)
	w.emit(hdr, true)
	for _, p := range payload {
		w.emit(p, len(p) <= copyMax)
	}
	w.emit(zeros[:PadLen(n)], true)
	if w.crcLater {
		w.c, w.crcLater = crc32cUpdate(w.c, w.arena[w.crcFrom:]), false
	}
	if w.markers && toNextMarker(w.pos) == 0 {
		w.putMarker(uint16(w.pos - w.start)) // between pad and CRC
	}
	t := w.scratch[:CRCLen]
	binary.LittleEndian.PutUint32(t, 0)
	if w.crc {
		binary.LittleEndian.PutUint32(t, w.c)
	}
	w.copyIn(t)
	w.pos += CRCLen
	w.queued += int(w.pos - p0)
	return nil
}

// hasRoom reports whether the arena and the iovecs take an FPDU of total
// octets with its payload in pieces without a flush (room).
func (w *Writer) hasRoom(pieces, total int) bool {
	return w.arena != nil && cap(w.arena)-len(w.arena) >= room(pieces, total) && len(w.vecs)+2*pieces+4 <= maxVecs
}

// makeRoom makes what hasRoom looks for: it takes an arena if the Writer
// has none (a QP that does not send holds none), and flushes if there is
// not room. An FPDU of up to smallArena octets, the Writer holding no
// arena, goes into the Writer's own small one (see small).
func (w *Writer) makeRoom(pieces, total int) error {
	switch {
	case w.arena == nil && total <= smallArena:
		w.arena = w.small[:0]
	case w.arena == nil:
		w.takeArena()
	}
	if w.hasRoom(pieces, total) {
		return nil
	}
	if w.arenaRef == nil {
		// The small arena. room bounds what copying an FPDU could take
		// from a pool's arena; here the FPDU itself must fit (total
		// counts its markers), and its iovecs: its pieces, a marker,
		// the length field, pad and CRC.
		if cap(w.arena)-len(w.arena) >= total && len(w.vecs)+2*pieces+4 <= maxVecs {
			return nil
		}
		// On to a pool's arena. What is queued in the small one stays
		// there until written: it is not taken again before Idle.
		w.takeArena()
		w.lastArena = false
		if w.hasRoom(pieces, total) {
			return nil
		}
	}
	return w.Flush()
}

// takeArena takes an arena of arenaSize from the pool.
func (w *Writer) takeArena() {
	w.arenaRef = arenaPool.Get().(*[]byte)
	w.arena = (*w.arenaRef)[:0]
}

// room is the arena space an FPDU of total octets, its payload in pieces,
// is sure to fit in: the largest header, copyMax a piece, the length
// field, trailer and markers. The arena is flushed when less is left.
//
// That bound also sets the size of a bulk sender's writes, and the size
// matters: at an Ethernet MSS an arena flushed at this bound writes 178
// FPDUs of 1448 octets, which TCP sends in GSO packets of 43 to 45
// segments. Flushed only when the next FPDU no longer fits (181 FPDUs),
// every write ended in a GSO packet of one segment, which cost CPU on both
// sides (docs/measurements.md).
func room(pieces, total int) int {
	return LenFieldLen + MaxHeader + copyMax*pieces + 8 + MarkerLen*(total/MarkerInterval+2)
}

// allCopied reports whether every piece of a payload is copied into the
// arena rather than referenced.
func allCopied(payload [][]byte) bool {
	for _, p := range payload {
		if len(p) > copyMax {
			return false
		}
	}
	return true
}

// appendCopied is AppendV for an FPDU without markers whose payload is all
// copied (the room was made): it lies in one piece of the arena, written in
// place, so a small FPDU costs one pass over its octets and one CRC call
// instead of one of each per piece (a 64-octet Write's FPDU is most of its
// cost in the transmit loop). A piece of fuseMin octets or more has its CRC
// taken as it is copied where the CPU can.
func (w *Writer) appendCopied(hdr []byte, payload [][]byte, n, total int) {
	a := len(w.arena)
	w.arena = w.arena[:a+total]
	f := w.arena[a:]
	var c uint32
	var k, from int // f[from:k] is not in c yet
	if (len(hdr) == prefixHdr || len(hdr) == prefixHdr20) && w.crc && crc32cCopyFused && len(payload) > 0 && len(payload[0]) >= fuseMin {
		// A DDP header ahead of a payload the fused copy takes: the CRC of
		// the length field and header from registers, not from the
		// octets just stored.
		h0, h1, h2 := hdrWords(hdr)
		c = w.putPrefix(f, n, len(hdr), h0, h1, h2)
		k, from = LenFieldLen+len(hdr), LenFieldLen+len(hdr)
	} else {
		binary.BigEndian.PutUint16(f, uint16(n))
		k = LenFieldLen + copy(f[LenFieldLen:], hdr)
	}
	for _, p := range payload {
		if w.crc && crc32cCopyFused && len(p) >= fuseMin {
			if from < k {
				c = crc32cUpdate(c, f[from:k])
			}
			c = crc32cCopy(c, f[k:], p)
			k += len(p)
			from = k
			continue
		}
		k += copy(f[k:], p)
	}
	end := total - CRCLen
	clear(f[k:end]) // pad
	if w.crc && from < end {
		c = crc32cUpdate(c, f[from:end])
	}
	binary.LittleEndian.PutUint32(f[end:], c) // 0 without CRCs
	w.grew(a)
	w.pos += uint64(total)
	w.queued += total
}

// prefixHdr is the header length whose FPDU prefix (length field and
// header) is two 8-octet words: DDP's tagged header. prefixHdr20's prefix
// is two words and a 4-octet one: DDP's untagged header.
const (
	prefixHdr   = 14
	prefixHdr20 = 18
)

// EndsAtMarker reports whether an FPDU with a ULPDU of n octets, appended
// next, would end exactly where a marker is due. RFC 5044 section 4.3 puts
// that marker at the start of the following FPDU; a sender that keeps FPDUs
// and TCP segments aligned can shorten such an FPDU for packet analysers
// that count the marker in the segment it ends (Wireshark 4.0 does). It is
// false without markers.
func (w *Writer) EndsAtMarker(n int) bool {
	if !w.markers {
		return false
	}
	pos, left := w.pos, uint64(FPDULen(n))
	for left > 0 {
		d := uint64(toNextMarker(pos))
		if d == 0 {
			pos += MarkerLen
			continue
		}
		step := min(d, left)
		pos += step
		left -= step
	}
	return toNextMarker(pos) == 0
}

// emit queues b as FPDU octets, splitting it where markers are due and
// folding it into the running CRC.
func (w *Writer) emit(b []byte, copied bool) {
	for len(b) > 0 {
		n := len(b)
		if w.markers {
			d := toNextMarker(w.pos)
			if d == 0 {
				w.putMarker(uint16(w.pos - w.start))
				continue
			}
			n = min(n, d)
		}
		piece := b[:n]
		b = b[n:]
		if w.crc && !w.crcLater {
			w.c = crc32cUpdate(w.c, piece)
		}
		switch {
		case copied && w.crcLater && crc32cCopyFused && n >= fuseMin:
			// The octets before it in the arena, then the payload's CRC
			// taken as it is copied: it is read once.
			w.c = crc32cUpdate(w.c, w.arena[w.crcFrom:])
			w.c = w.copyInCRC(w.c, piece)
			w.crcFrom = len(w.arena)
		case copied:
			w.copyIn(piece)
		default:
			w.vecs = append(w.vecs, piece)
			w.lastArena = false
			w.refs = true
		}
		w.pos += uint64(n)
	}
}

func (w *Writer) putMarker(ptr uint16) {
	m := (*[MarkerLen]byte)(w.scratch[4:8])
	markerBytes(m, ptr)
	if w.crc {
		w.c = crc32cUpdate(w.c, m[:])
	}
	w.copyIn(m[:])
	w.pos += MarkerLen
}

// fuseMin is the shortest payload whose CRC emit takes while copying it.
// With 100- to 200-octet payloads the Writer measured the same either way
// (BenchmarkCopyCRC32c alone favours the copy from 64 octets), and one pass
// over the whole FPDU is one call fewer.
const fuseMin = 256

// copyIn appends b to the arena, growing the last iovec when it is the
// arena's tail.
func (w *Writer) copyIn(b []byte) {
	a := len(w.arena)
	w.arena = append(w.arena, b...)
	w.grew(a)
}

// copyInCRC is copyIn that returns the CRC c updated with b.
func (w *Writer) copyInCRC(c uint32, b []byte) uint32 {
	a := len(w.arena)
	if cap(w.arena)-a < len(b) { // not when Append made room
		w.copyIn(b)
		return crc32cUpdate(c, b)
	}
	w.arena = w.arena[:a+len(b)]
	c = crc32cCopy(c, w.arena[a:], b)
	w.grew(a)
	return c
}

// grew queues arena[a:] as an iovec of its own or as the tail of the last.
func (w *Writer) grew(a int) {
	if w.lastArena {
		last := &w.vecs[len(w.vecs)-1]
		*last = (*last)[:len(*last)+len(w.arena)-a]
		return
	}
	w.vecs = append(w.vecs, w.arena[a:len(w.arena)])
	w.lastArena = true
}

var arenaPool = sync.Pool{New: func() any { b := make([]byte, 0, arenaSize); return &b }}

// Idle gives the Writer's staging memory back to a pool shared by all
// Writers, if nothing is queued; the next Append takes one again. A sender
// calls it when it has nothing more to send for now, so that many mostly
// idle connections share a few arenas.
func (w *Writer) Idle() {
	if w.queued > 0 || len(w.vecs) > 0 || w.arena == nil {
		return
	}
	if w.arenaRef != nil {
		*w.arenaRef = w.arena[:0]
		arenaPool.Put(w.arenaRef)
	}
	w.arena, w.arenaRef = nil, nil
}

// Written returns the stream octets successfully written so far, by Flush
// or by an Append that flushed first: a caller can tell from it that what
// it queued before an Append has gone out.
func (w *Writer) Written() uint64 { return w.written }

// Buffered returns the number of stream octets queued and not yet written.
func (w *Writer) Buffered() int { return w.queued }

// Copied reports whether the Writer holds its own copy of every octet
// queued: no queued FPDU references the caller's memory (payloads up to a
// few KiB are copied, see Append), so the caller may reuse that memory
// before the Flush.
func (w *Writer) Copied() bool { return !w.refs }

// Flush writes every queued FPDU with as few system calls as the kernel
// allows (one writev when the socket buffer has room).
func (w *Writer) Flush() error {
	if len(w.vecs) == 0 {
		return nil
	}
	var n int64
	var err error
	if w.vw != nil {
		n, err = w.vw.WriteVectored(w.vecs)
	} else {
		w.bufs = w.vecs
		n, err = w.bufs.WriteTo(w.w)
	}
	if err == nil {
		w.written += uint64(n)
	}
	w.reset()
	return err
}

// reset empties the Writer after a write of everything queued.
func (w *Writer) reset() {
	clear(w.vecs) // drop references to caller memory
	w.vecs = w.vecs[:0]
	w.arena = w.arena[:0]
	w.lastArena = false
	w.refs = false
	w.queued = 0
}

// consumed drops the first n queued octets, which a write took: the
// iovecs they fill go, and the one they end in is cut. The arena keeps
// what remains where it is (later FPDUs go after it).
func (w *Writer) consumed(n int) {
	w.queued -= n
	k := 0
	for n > 0 && n >= len(w.vecs[k]) {
		n -= len(w.vecs[k])
		k++
	}
	if k > 0 {
		m := copy(w.vecs, w.vecs[k:])
		clear(w.vecs[m:])
		w.vecs = w.vecs[:m]
	}
	if n > 0 {
		w.vecs[0] = w.vecs[0][n:]
	}
}
