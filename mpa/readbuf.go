package mpa

import (
	"errors"
	"net"
	"sync"
)

// A Reader's buffer is only needed while octets are on their way. On a TCP
// connection (anything with a syscall.RawConn) fill reads with read(2)
// itself, as net's own Read does, so that it sees the socket run dry: when
// the socket has nothing and the buffer holds nothing, the connection is
// idle and the buffer goes back to a pool until data arrives. An idle QP
// then holds no pool's buffer, only the Reader's own 512 octets (small,
// which carry a ping-pong's small FPDUs with no trip to a pool), and one
// that streamed does not keep its grown one.

// readBufPools holds one pool of *[]byte per buffer size.
var readBufPools sync.Map

func readBufPool(size int) *sync.Pool {
	if p, ok := readBufPools.Load(size); ok {
		return p.(*sync.Pool)
	}
	p, _ := readBufPools.LoadOrStore(size, &sync.Pool{New: func() any {
		b := make([]byte, size)
		return &b
	}})
	return p.(*sync.Pool)
}

// release gives the (empty) buffer back while the connection is idle.
func (r *Reader) release() {
	if r.bufRef != nil {
		r.bufPool.Put(r.bufRef)
		r.idlePool = r.bufPool
	}
	r.buf, r.bufRef, r.bufPool = nil, nil, nil
	r.head, r.tail = 0, 0
}

// acquire takes a buffer if the Reader has none: its own small one until
// a read has filled that, and then one as large as the one it gave back,
// since a connection that needed a grown buffer before an idle spell is
// likely to again.
func (r *Reader) acquire() {
	if r.buf == nil {
		if r.idlePool == nil {
			r.buf = r.small[:]
			return
		}
		r.setBuf(r.idlePool)
	}
}

// setBuf makes a buffer of pool p the Reader's (it has none in a pool).
func (r *Reader) setBuf(p *sync.Pool) {
	r.bufRef, r.bufPool = p.Get().(*[]byte), p
	r.buf = *r.bufRef
}

// read reads from the stream into buf[tail:], taking a buffer first if the
// Reader gave its own back.
func (r *Reader) read() (int, error) {
	if r.raw == nil {
		r.acquire()
		if r.onWait != nil {
			r.onWait() // no telling whether this read waits
		}
		return r.r.Read(r.buf[r.tail:])
	}
	r.rawN, r.rawErr = 0, nil
	if err := r.raw.Read(r.rawFn); err != nil {
		// Waiting failed: a deadline, or the connection closed. RawConn
		// calls that a "raw-read"; to the caller it is the read it made.
		var oe *net.OpError
		if errors.As(err, &oe) {
			err = oe.Err
		}
		return 0, r.readError(err)
	}
	return r.rawN, r.rawErr
}

// readError reports err as net.Conn's Read does.
func (r *Reader) readError(err error) error {
	la := r.conn.LocalAddr()
	return &net.OpError{Op: "read", Net: la.Network(), Source: la, Addr: r.conn.RemoteAddr(), Err: err}
}
