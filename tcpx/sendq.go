package tcpx

import (
	"fmt"
	"net"
	"syscall"
)

// SendQueue reports how many octets a socket's send queue holds (written,
// not yet acknowledged by the peer), without allocating: a probe cheap
// enough to call per message, for a sender that paces itself or a monitor.
type SendQueue struct {
	rc  syscall.RawConn
	n   int
	err error
	fn  func(fd uintptr) // made once: a closure per call would allocate
}

// NewSendQueue returns c's send-queue probe.
func NewSendQueue(c *net.TCPConn) (*SendQueue, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("tcpx: %w", err)
	}
	q := &SendQueue{rc: rc}
	q.fn = q.probe
	return q, nil
}

// Len returns the octets written and not yet acknowledged by the peer
// (SIOCOUTQ). It does not wait. Not for concurrent use.
func (q *SendQueue) Len() (int, error) {
	q.n, q.err = 0, nil
	if err := q.rc.Control(q.fn); err != nil {
		return 0, fmt.Errorf("tcpx: %w", err)
	}
	return q.n, q.err
}
