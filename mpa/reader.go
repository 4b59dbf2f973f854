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

// Reader takes FPDUs off one direction of a TCP stream. It owns its receive
// buffer, strips markers (checking each FPDU pointer), folds every octet into
// the CRC and checks it at the end of each FPDU. The caller reads a ULPDU in
// pieces: Header for the DDP/RDMAP header, then ReadFull straight into the
// memory the payload belongs in (a registered region or a posted receive
// buffer), so payload octets are copied at most once; large payloads go from
// the socket into that memory with no copy at all.
//
// Payload is placed before the CRC at the end of the FPDU is checked, as
// hardware RNICs and siw do; a CRC error then tears the connection down
// (RFC 5044 section 8) before the message it belongs to can complete.
//
// A Reader is owned by one goroutine (the QP's receive loop).
type Reader struct {
	r       io.Reader
	crc     bool
	markers bool
	max     int // largest ULPDU accepted

	buf        []byte
	head, tail int // buffered stream octets are buf[head:tail]

	pos   uint64 // stream offset of buf[head], counted from the first FPDU
	start uint64 // stream offset of the current FPDU's length field
	ulen  int    // ULPDU length of the current FPDU
	left  int    // ULPDU octets not yet consumed
	in    bool   // between Next and Finish
	c     uint32 // running CRC
	// crcDone: c already covers the whole FPDU, which was in the buffer
	// when it began (one CRC pass instead of one per piece).
	crcDone bool
	// crcLazy: the FPDU was in the buffer whole when it began, and
	// buf[crcFrom:head] is not in c yet: the octets before a piece whose
	// CRC a fused copy takes join that copy's call, and Finish takes the
	// rest (the length field and a header cost one call, not three).
	crcLazy bool
	crcFrom int
	// whole: the FPDU was in the buffer whole when it began, its CRC
	// trailer too, with no marker in it: ReadFull and Finish take their
	// octets straight from the buffer (readWhole, finishWhole).
	whole bool

	hdr [MaxHeader]byte

	bufMax   int        // the size buf grows to
	bufRef   *[]byte    // buf's pool entry; nil for a buffer of its own (small, pre)
	bufPool  *sync.Pool // bufRef's pool
	idlePool *sync.Pool // where the next buffer comes from after an idle spell; nil: small (readbuf.go)

	// With a raw connection (readbuf.go) fill reads itself.
	conn   net.Conn
	raw    syscall.RawConn
	rawFn  func(fd uintptr) bool // rawRead, made once
	rawN   int
	rawErr error

	onWait func() // SetOnWait's

	small [smallReadBuffer]byte // the buffer before a read fills it (readbuf.go); last, as Writer's
}

// SetOnWait has fn called whenever the Reader is about to wait for the
// stream: on a TCP connection when the socket has nothing to read (before
// the goroutine parks), on other streams before every read. A receive loop
// uses it to hand on what it held back while more octets were already
// waiting (verbs' CQ moderation). fn runs on the reading goroutine and
// must not block.
func (r *Reader) SetOnWait(fn func()) { r.onWait = fn }

// smallReadBuffer is the size of a Reader's own buffer, which it reads
// into before traffic makes it take a larger one from a pool: an FPDU
// of a few hundred octets fits it whole, and a connection that goes idle
// between small messages costs no pool's Get and Put for each (readbuf.go).
const smallReadBuffer = 512

// DefaultReadBuffer is the receive buffer size of a Reader.
const DefaultReadBuffer = 64 << 10

// fuseRxMin is the ULPDU length from which Next leaves the CRC of an FPDU
// it holds whole to ReadFull's fused copy (fuseMin is the shortest piece
// fused): below, one pass over the whole FPDU costs less than a pass per
// piece.
const fuseRxMin = 1024

// directMin is the piece size from which ReadFull reads from the socket
// straight into the caller's memory instead of through the buffer.
const directMin = 8 << 10

// NewReader returns a Reader on r with a buffer of size octets (at least
// 1 KiB). pre holds stream octets already read from r past the MPA
// start-up frames (normally none: the start-up reads exactly its frames).
//
// The buffer starts small, the Reader's own (an idle connection costs
// little), and grows to size, from a pool, the first time a read fills it,
// which is when batching pays. On a TCP connection the Reader holds no
// pool's buffer while the connection is idle (readbuf.go).
func NewReader(r io.Reader, crc, markers bool, size int, pre []byte) *Reader {
	size = max(size, 1<<10, len(pre))
	rd := &Reader{r: r, crc: crc, markers: markers, max: MaxULPDU, bufMax: size}
	rd.conn, rd.raw = rawConnOf(r)
	if rd.raw != nil {
		rd.rawFn = rd.rawRead
	}
	if len(pre) > 0 {
		rd.buf = make([]byte, max(smallReadBuffer, len(pre)))
		rd.tail = copy(rd.buf, pre)
	}
	return rd
}

// SetMaxULPDU sets the largest ULPDU length accepted; a longer one is an
// error (CodeMarker: the length field does not describe an FPDU we accept).
func (r *Reader) SetMaxULPDU(n int) { r.max = min(n, MaxULPDU) }

// ErrShortULPDU is returned when the caller asks for more ULPDU octets than
// the FPDU has left.
var ErrShortULPDU = errors.New("mpa: ULPDU shorter than its header")

// Next starts the next FPDU and returns its ULPDU length. At a clean end of
// stream between FPDUs it returns io.EOF.
func (r *Reader) Next() (int, error) {
	if r.in {
		return 0, errors.New("mpa: Next called before Finish")
	}
	r.c, r.crcDone, r.crcLazy, r.whole = 0, false, false, false
	if r.tail == r.head {
		if err := r.fill(1); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return 0, io.EOF
			}
			var me *Error
			if errors.As(err, &me) {
				me.Msg = "connection failed between FPDUs"
			}
			return 0, err
		}
	}
	if r.markers && toNextMarker(r.pos) == 0 {
		if err := r.marker(true); err != nil {
			return 0, err
		}
	}
	r.start = r.pos
	if err := r.fill(LenFieldLen); err != nil {
		return 0, err
	}
	// The length field is never split by a marker: FPDUs and markers are
	// 4-aligned in the stream.
	b := r.take(LenFieldLen)
	n := int(binary.BigEndian.Uint16(b))
	if n > r.max {
		return 0, errorf(CodeMarker, "ULPDU length %d exceeds %d", n, r.max)
	}
	r.whole = !r.markers && r.tail-r.head >= n+PadLen(n)+CRCLen
	if r.crc {
		// Small FPDUs usually arrive whole: checksum them in one pass.
		at := r.head - LenFieldLen
		// (Except a long ULPDU where the CPU fuses the CRC with a copy:
		// ReadFull's copy into the destination takes it then, so the
		// payload is read once, not twice.)
		covered := LenFieldLen + n + PadLen(n)
		switch whole := !r.markers && r.tail-at >= covered; {
		case whole && crc32cCopyFused && n >= fuseRxMin:
			r.crcLazy, r.crcFrom = true, at
		case whole:
			r.c, r.crcDone = crc32cUpdate(0, r.buf[at:at+covered]), true
		default:
			// Piece by piece; r.c already holds a marker that preceded
			// the length field.
			r.c = crc32cUpdate(r.c, b)
		}
	}
	r.ulen, r.left, r.in = n, n, true
	return n, nil
}

// ULPDULen returns the length of the current (or last) FPDU's ULPDU.
func (r *Reader) ULPDULen() int { return r.ulen }

// Left returns the ULPDU octets of the current FPDU not yet consumed.
func (r *Reader) Left() int { return r.left }

// Header returns the next n octets of the ULPDU (n <= MaxHeader) as one
// slice, valid until the next call to Header or Next.
func (r *Reader) Header(n int) ([]byte, error) {
	if n > MaxHeader {
		return nil, fmt.Errorf("mpa: header of %d octets exceeds %d", n, MaxHeader)
	}
	if n > r.left {
		return nil, ErrShortULPDU
	}
	if err := r.ReadFull(r.hdr[:n]); err != nil {
		return nil, err
	}
	return r.hdr[:n], nil
}

// ReadFull reads the next len(dst) octets of the ULPDU into dst.
func (r *Reader) ReadFull(dst []byte) error {
	if len(dst) > r.left {
		return ErrShortULPDU
	}
	if r.whole {
		r.readWhole(dst)
		return nil
	}
	for len(dst) > 0 {
		n := len(dst)
		if r.markers {
			d := toNextMarker(r.pos)
			if d == 0 {
				if err := r.marker(false); err != nil {
					return err
				}
				continue
			}
			n = min(n, d)
		}
		crcd := false // dst[:n] is in r.c already
		switch {
		case r.tail > r.head && r.crc && !r.crcDone && crc32cCopyFused && min(n, r.tail-r.head) >= fuseMin:
			n = min(n, r.tail-r.head)
			if r.crcLazy {
				r.c = crc32cUpdate(r.c, r.buf[r.crcFrom:r.head])
				r.crcFrom = r.head + n
			}
			r.c, crcd = crc32cCopy(r.c, dst[:n], r.buf[r.head:r.head+n]), true
			r.head += n
		case r.tail > r.head:
			n = copy(dst[:n], r.buf[r.head:r.tail])
			r.head += n
		case n >= directMin:
			if r.onWait != nil {
				r.onWait() // the read below may wait
			}
			m, err := r.r.Read(dst[:n])
			if m == 0 {
				if err == nil {
					continue
				}
				return r.lost(err)
			}
			n = m
		default:
			if err := r.fill(1); err != nil {
				return err
			}
			continue
		}
		if r.crc && !r.crcDone && !crcd && !r.crcLazy {
			r.c = crc32cUpdate(r.c, dst[:n])
		}
		r.pos += uint64(n)
		r.left -= n
		dst = dst[n:]
	}
	return nil
}

// ReadLast reads the rest of the ULPDU into dst, which must be as long
// as Left, and then finishes the FPDU as Finish does (CRC checked). When
// the Reader holds the FPDU whole it is one step: the payload's copy, the
// CRC of the octets around it and the trailer's check, with the Reader's
// state stored once. A receive loop places the last piece of a whole FPDU
// (Whole) with it, and calls Finish only for an FPDU still open (InFPDU).
// Otherwise it is ReadFull and Finish, called from here: a caller on the
// path that waits for the socket may rather call those two itself, one
// frame shallower (verbs' receive loop does).
func (r *Reader) ReadLast(dst []byte) error {
	if !r.whole || len(dst) != r.left {
		if err := r.ReadFull(dst); err != nil {
			return err
		}
		return r.Finish()
	}
	h, n := r.head, len(dst)
	pad := PadLen(r.ulen)
	end := h + n + pad
	c := r.c
	switch {
	case r.crcLazy && n >= fuseMin:
		c = crc32cPrefixCopy(c, r.buf[r.crcFrom:h], dst, r.buf[h:h+n])
		if pad > 0 {
			c = crc32cUpdate(c, r.buf[h+n:end])
		}
	case r.crcLazy:
		copy(dst, r.buf[h:h+n])
		c = crc32cUpdate(c, r.buf[r.crcFrom:end])
	default: // the CRC was taken whole (crcDone), or is off
		copy(dst, r.buf[h:h+n])
	}
	got := binary.LittleEndian.Uint32(r.buf[end:])
	r.head = end + CRCLen
	r.pos += uint64(n + pad + CRCLen)
	r.left, r.c = 0, c
	r.in, r.whole, r.crcLazy = false, false, false
	if r.crc && got != c {
		return errorf(CodeCRC, "received %#08x, computed %#08x", got, c)
	}
	return nil
}

// InFPDU reports whether an FPDU is open: Next started it, and neither
// Finish nor ReadLast has finished it.
func (r *Reader) InFPDU() bool { return r.in }

// readWhole is ReadFull within an FPDU the buffer holds whole (whole): no
// fill and no marker, and the CRC, unless Next took it whole (crcDone) or
// it is off, only where a fused copy takes it (crcLazy), with the octets
// before the piece that the pass has not covered yet.
func (r *Reader) readWhole(dst []byte) {
	n := len(dst)
	src := r.buf[r.head : r.head+n]
	if r.crcLazy && n >= fuseMin {
		r.c = crc32cPrefixCopy(r.c, r.buf[r.crcFrom:r.head], dst, src)
		r.crcFrom = r.head + n
	} else {
		copy(dst, src)
	}
	r.advance(n)
}

// Whole returns the unread octets of the current ULPDU when the Reader
// holds its FPDU whole, CRC trailer included, with no marker in it, so that
// a header can be checked where it lies; nil otherwise. The slice is valid
// until the next call that reads. Consume takes what the caller used.
func (r *Reader) Whole() []byte {
	if !r.whole {
		return nil
	}
	return r.buf[r.head : r.head+r.left]
}

// NextBuffered reports, between Finish and Next, whether the next FPDU is
// in the buffer whole, CRC trailer included, so that Next and the reads of
// its ULPDU will not wait for the stream. Always false with markers. A
// receive loop uses it to hold back a reply while more requests are
// already waiting (verbs' Read Responses).
func (r *Reader) NextBuffered() bool {
	if r.in || r.markers {
		return false
	}
	k := r.tail - r.head
	if k < LenFieldLen {
		return false
	}
	n := int(binary.BigEndian.Uint16(r.buf[r.head:]))
	return k >= LenFieldLen+n+PadLen(n)+CRCLen
}

// Consume consumes the first n octets of what Whole returned, as ReadFull
// would, without copying them.
func (r *Reader) Consume(n int) {
	if !r.whole || n > r.left {
		panic("mpa: Consume beyond what Whole returned")
	}
	r.advance(n)
}

// advance consumes n buffered ULPDU octets.
func (r *Reader) advance(n int) {
	r.head += n
	r.pos += uint64(n)
	r.left -= n
}

// Peek returns the next octets of the ULPDU that the Reader already holds,
// at most n, without consuming them: fewer (or none) when the buffer holds
// fewer or a marker comes first. The slice is valid until the next read.
// A receive loop peeks at a DDP header's first octet to read the whole
// header at once.
func (r *Reader) Peek(n int) []byte {
	n = min(n, r.left, r.tail-r.head)
	if r.markers {
		n = min(n, toNextMarker(r.pos))
	}
	return r.buf[r.head : r.head+max(n, 0)]
}

// Skip consumes the next n octets of the ULPDU without placing them.
func (r *Reader) Skip(n int) error {
	for n > 0 {
		k := min(n, len(r.hdr))
		if err := r.ReadFull(r.hdr[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// Finish consumes the rest of the FPDU (pad, any marker, CRC) and checks the
// CRC when it was negotiated. The whole ULPDU must have been consumed.
func (r *Reader) Finish() error {
	if !r.in {
		return errors.New("mpa: Finish without Next")
	}
	if r.left != 0 {
		return fmt.Errorf("mpa: Finish with %d ULPDU octets unread", r.left)
	}
	if r.whole {
		return r.finishWhole()
	}
	r.left = PadLen(r.ulen)
	if err := r.ReadFull(r.hdr[:r.left]); err != nil { // pad octets are not checked: the CRC covers them
		return err
	}
	if r.crcLazy {
		r.c, r.crcLazy = crc32cUpdate(r.c, r.buf[r.crcFrom:r.head]), false
	}
	if r.markers && toNextMarker(r.pos) == 0 {
		if err := r.marker(false); err != nil { // between pad and CRC
			return err
		}
	}
	if err := r.fill(CRCLen); err != nil {
		return err
	}
	got := binary.LittleEndian.Uint32(r.take(CRCLen))
	r.in = false
	if r.crc && got != r.c {
		return errorf(CodeCRC, "received %#08x, computed %#08x", got, r.c)
	}
	return nil
}

// finishWhole is Finish for an FPDU the buffer holds whole (whole): the
// pad and the CRC are there, and no marker.
func (r *Reader) finishWhole() error {
	pad := PadLen(r.ulen)
	end := r.head + pad
	if r.crcLazy && r.crcFrom < end {
		r.c = crc32cUpdate(r.c, r.buf[r.crcFrom:end])
	}
	got := binary.LittleEndian.Uint32(r.buf[end:])
	r.head = end + CRCLen
	r.pos += uint64(pad + CRCLen)
	r.in, r.whole, r.crcLazy = false, false, false
	if r.crc && got != r.c {
		return errorf(CodeCRC, "received %#08x, computed %#08x", got, r.c)
	}
	return nil
}

// marker consumes the marker due at r.pos and checks its FPDU pointer.
func (r *Reader) marker(atStart bool) error {
	if err := r.fill(MarkerLen); err != nil {
		return err
	}
	m := r.take(MarkerLen)
	if r.crc {
		r.c = crc32cUpdate(r.c, m)
	}
	want := uint16(0)
	if !atStart {
		want = uint16(r.pos - MarkerLen - r.start)
	}
	// RFC 5044 section 5: FPDUPTR is the distance from the FPDU's length
	// field back to the marker; 0 for a marker that precedes the FPDU.
	if got := binary.BigEndian.Uint16(m[2:]); got != want {
		return errorf(CodeMarker, "marker at stream offset %d points %d back, want %d", r.pos-MarkerLen, got, want)
	}
	return nil
}

// take consumes n buffered stream octets (the caller made sure they are
// there and that no marker lies among them).
func (r *Reader) take(n int) []byte {
	b := r.buf[r.head : r.head+n]
	r.head += n
	r.pos += uint64(n)
	return b
}

// fill makes at least n stream octets available in the buffer.
func (r *Reader) fill(n int) error {
	if r.tail-r.head >= n {
		return nil
	}
	if r.head > 0 {
		r.tail = copy(r.buf, r.buf[r.head:r.tail])
		r.head = 0
	}
	for r.tail < n {
		m, err := r.read()
		r.tail += m
		if m > 0 && r.tail == len(r.buf) && len(r.buf) < r.bufMax {
			// The socket had more than the buffer holds: grow once.
			old, oldRef, oldPool := r.buf, r.bufRef, r.bufPool
			r.bufRef, r.bufPool = nil, nil
			r.setBuf(readBufPool(r.bufMax))
			copy(r.buf, old[:r.tail])
			if oldRef != nil {
				oldPool.Put(oldRef) // only once copied: other Readers take from the pool
			}
		}
		if r.tail >= n {
			break
		}
		if err != nil {
			return r.lost(err)
		}
	}
	return nil
}

// lost turns an I/O error inside an FPDU into the LLP error "TCP connection
// lost", keeping the cause.
func (r *Reader) lost(err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return &Error{Code: CodeStreamLost, Msg: "stream ended inside an FPDU", Err: err}
}
