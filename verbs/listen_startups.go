package verbs

import (
	"container/list"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goiwarp/iwarp/tcpx"
)

// A Listener's start-ups in progress: connections accepted whose
// connection request has not been read yet. They are bounded
// (maxHandshakes), but a full table does not stop accepting, which would
// let silent peers hold the port for RequestTimeout each: a new connection
// evicts one in progress, as Linux's full SYN queue drops the oldest.
//
// The victim is the oldest start-up that has received nothing (neither
// read nor waiting in the socket) since it was accepted at least
// silentGrace ago; failing that, the oldest of all. A legitimate initiator
// sends as soon as TCP has connected, so under a flood of silent peers it
// is never the one evicted unless maxHandshakes newer peers came in the
// moment before its first octets. Progress only protects a start-up from
// the silent rule: a flood that sends one octet each is evicted oldest
// first, so sending a little never outranks a peer that has just
// connected. Out of fds (accept's EMFILE), a start-up is evicted the same
// way to make room. No limit is per source address, which would refuse the
// clients behind a NAT together.

// silentGrace is how long a start-up may have received nothing before it
// is evicted ahead of older ones that have.
const silentGrace = 250 * time.Millisecond

// startup is a connection in start-up. Its reads count progress: whatever
// runs the start-up (the MPA Request, a handshake before it) reads through
// it.
type startup struct {
	*net.TCPConn
	at   time.Time
	got  atomic.Int64 // octets read
	elem *list.Element
}

func (s *startup) Read(b []byte) (int, error) {
	n, err := s.TCPConn.Read(b)
	s.got.Add(int64(n))
	return n, err
}

// startups is the table of start-ups in progress, oldest first.
type startups struct {
	mu     sync.Mutex
	max    int
	order  list.List // of *startup
	closed bool
	peak   int // most in progress at once, for Listener tests
}

// add enters conn and returns its startup, and the connection it evicts to
// make room, to be closed by the caller (nil if none). Once the table is
// closed, conn itself comes back as the one to close, and s is nil.
func (t *startups) add(conn *net.TCPConn, now time.Time) (s *startup, evict net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, conn
	}
	if t.order.Len() >= t.max {
		v := t.victim(now)
		t.order.Remove(v.elem)
		v.elem = nil
		evict = v.TCPConn
	}
	s = &startup{TCPConn: conn, at: now}
	s.elem = t.order.PushBack(s)
	t.peak = max(t.peak, t.order.Len())
	return s, evict
}

// victim picks the start-up to evict. t.mu is held; the table is not
// empty.
func (t *startups) victim(now time.Time) *startup {
	for e := t.order.Front(); e != nil; e = e.Next() {
		s := e.Value.(*startup)
		if now.Sub(s.at) < silentGrace {
			break // the rest are younger still
		}
		if s.got.Load() == 0 && !pending(s.TCPConn) {
			return s
		}
	}
	return t.order.Front().Value.(*startup)
}

// pending reports whether octets wait on conn: a start-up whose goroutine
// has not run yet (a loaded machine) has progressed all the same.
func pending(conn *net.TCPConn) bool {
	n, err := tcpx.Buffered(conn)
	return err == nil && n > 0
}

// evict closes a start-up, the one add would: out of fds, accepting one
// more needs one. False if there is none.
func (t *startups) evict(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.order.Len() == 0 {
		return false
	}
	v := t.victim(now)
	t.order.Remove(v.elem)
	v.elem = nil
	v.TCPConn.Close()
	return true
}

// fdLimit reports whether err is accept's "too many open files".
func fdLimit(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// done takes s out of the table once its start-up has ended; false if it
// had been evicted (or the table closed), and its connection closed.
func (t *startups) done(s *startup) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.elem == nil {
		return false
	}
	t.order.Remove(s.elem)
	s.elem = nil
	return true
}

// close closes every connection in start-up; add refuses from now on.
func (t *startups) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for e := t.order.Front(); e != nil; e = e.Next() {
		s := e.Value.(*startup)
		s.elem = nil
		s.TCPConn.Close()
	}
	t.order.Init()
}

// high returns the most start-ups that were in progress at once.
func (t *startups) high() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.peak
}

// len returns the start-ups in progress.
func (t *startups) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.order.Len()
}
