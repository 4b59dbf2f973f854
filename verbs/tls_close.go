package verbs

import (
	"errors"
	"time"
)

// The end of a connection inside TLS. TLS marks an orderly end with a
// close_notify alert before the TCP FIN (RFC 8446 section 6.1), so that
// an attacker on the path cannot end the stream early with a FIN of its
// own. crypto/tls reports both as io.EOF; tlsSock tells them apart: after
// a close_notify tls.Conn reads no further, so a TCP end of stream that
// reached it came without one.

// errTLSTruncated is the cause of a QP whose peer's FIN came without
// close_notify; the QP's error Is ErrConnLost.
var errTLSTruncated = errors.New("verbs: TLS: the peer's TCP FIN came without close_notify (a truncated stream, not an orderly close)")

// tlsCloseNotifyWait bounds the close_notify of a QP's orderly end: a peer
// that reads nothing does not hold Close (tls.Conn would wait 5 s).
const tlsCloseNotifyWait = 100 * time.Millisecond

// truncated reports whether the stream ended with a FIN and no close_notify.
func (s *tlsStream) truncated() bool { return s.sock.tcpEOF.Load() }

// closeNotify sends close_notify (once; later calls do nothing), waiting
// at most d for the socket to take it.
func (s *tlsStream) closeNotify(d time.Duration) {
	limit := time.Now().Add(d)
	s.sock.wlimit.Store(&limit)
	s.Conn.CloseWrite()
}

// SetWriteDeadline is tls.Conn's way to the socket's deadline: once
// closeNotify has set a limit, no deadline goes past it.
func (c *tlsSock) SetWriteDeadline(t time.Time) error {
	if lim := c.wlimit.Load(); lim != nil && (t.IsZero() || t.After(*lim)) {
		t = *lim
	}
	return c.Conn.SetWriteDeadline(t)
}

// orderly reports whether a QP's error is an orderly end of ours or the
// peer's (ErrDisconnected), not a reset (ErrAborted) or a failure.
func orderly(err error) bool {
	return errors.Is(err, ErrDisconnected) && !errors.Is(err, ErrAborted)
}
