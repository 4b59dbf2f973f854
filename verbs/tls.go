package verbs

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/tcpx"
)

// A connection with ConnConfig.TLS runs TLS 1.3 on the TCP connection
// first; the MPA start-up and every FPDU then travel inside TLS records.
// The QP keeps the TCP connection under it for everything about the
// socket: deadlines, half-close, reset, TCP_INFO.

// alpnIWARP is the ALPN protocol both sides offer unless their tls.Config
// names its own: a TLS server of another protocol (HTTPS on the same port)
// then fails the handshake instead of reading an MPA Request.
const alpnIWARP = "iwarp"

// tlsRejectReason is the private data of the MPA Reject a TLS listener
// answers a cleartext MPA Request with.
var tlsRejectReason = []byte("iwarp: TLS required")

// sockOf returns the TCP connection under a QP's stream, or nil.
func sockOf(c net.Conn) *net.TCPConn {
	switch c := c.(type) {
	case *net.TCPConn:
		return c
	case *tlsStream:
		return c.tcp
	}
	return nil
}

// tlsConfig returns the QP's copy of a user's tls.Config: TLS 1.3 at
// least, and the iwarp ALPN protocol unless the user named others. A
// client without ServerName verifies the host it dials, as tls.Dial does.
func tlsConfig(c *tls.Config, server bool, addr string) (*tls.Config, error) {
	if c.MaxVersion != 0 && c.MaxVersion < tls.VersionTLS13 {
		return nil, fmt.Errorf("%w: TLS MaxVersion %#x: iWARP runs over TLS 1.3 or later", ErrInvalidArg, c.MaxVersion)
	}
	c = c.Clone()
	c.MinVersion = max(c.MinVersion, tls.VersionTLS13)
	if len(c.NextProtos) == 0 {
		c.NextProtos = []string{alpnIWARP}
	}
	if get := c.GetConfigForClient; server && get != nil {
		// The config it returns replaces this one whole: it gets the
		// same floor, or TLS 1.2 would slip in through it.
		c.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			cc, err := get(h)
			if err != nil || cc == nil {
				return cc, err
			}
			return tlsConfig(cc, true, addr)
		}
	}
	if !server && c.ServerName == "" && !c.InsecureSkipVerify {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		c.ServerName = host
	}
	return c, nil
}

// clientTLS runs the client's TLS handshake on conn, bounded by conn's
// deadline.
func clientTLS(conn *net.TCPConn, cfg *tls.Config) (*tlsStream, error) {
	sock := &tlsSock{Conn: conn}
	tc := tls.Client(sock, cfg)
	if err := tc.Handshake(); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			err = fmt.Errorf("%w (a listener without TLS closes on a ClientHello)", err)
		}
		return nil, err
	}
	return &tlsStream{Conn: tc, tcp: conn, sock: sock}, nil
}

// serverTLS runs the listener's TLS handshake on s, bounded by its
// deadline. A peer that sent an MPA Request instead of a ClientHello (a
// cleartext initiator, Linux siw) gets an MPA Reject whose private data
// says why, so that it fails with a reason rather than a closed
// connection.
func (l *Listener) serverTLS(s *startup) (*tlsStream, error) {
	conn := s.TCPConn
	sock := &tlsSock{Conn: s, keep: true}
	tc := tls.Server(sock, l.tls)
	err := tc.Handshake()
	got := sock.got
	sock.keep, sock.got = false, nil
	if err == nil {
		return &tlsStream{Conn: tc, tcp: conn, sock: sock}, nil
	}
	var rhe tls.RecordHeaderError
	if errors.As(err, &rhe) && bytes.HasPrefix([]byte("MPA ID Req Frame"), rhe.RecordHeader[:]) {
		if req, rerr := mpa.ReadFrame(io.MultiReader(bytes.NewReader(got), s), false); rerr == nil && req.Rev > 0 {
			l.reject(conn, req, tlsRejectReason)
		}
	}
	return nil, err
}

// tlsEarlyData reports whether anything follows the MPA Request inside
// TLS: the octets may already sit in tls.Conn's buffer, beyond what the
// socket says, so it reads one without waiting (a timeout leaves a
// tls.Conn usable). It consumes what it finds: only for a connection that
// finding anything refuses.
func tlsEarlyData(s *tlsStream) int {
	s.tcp.SetReadDeadline(time.Unix(1, 0))
	var one [1]byte
	n, _ := s.Conn.Read(one[:])
	if n == 0 {
		if m, err := tcpx.Buffered(s.tcp); err == nil {
			n = m
		}
	}
	return n
}

// drainConn is what the receive loop reads and discards after an error, so
// that the kernel does not answer our Terminate with a reset: the socket,
// since a TLS stream that failed returns its error at once.
func (qp *QP) drainConn() io.Reader {
	if qp.sock != nil {
		return qp.sock
	}
	return qp.conn
}

// TLS returns the state of the QP's TLS connection (the peer's verified
// certificates, version, cipher suite), or nil for a cleartext QP or one
// not connected.
func (qp *QP) TLS() *tls.ConnectionState {
	qp.startMu.Lock()
	defer qp.startMu.Unlock()
	return qp.tlsState
}

// tlsAlert returns the TLS alert in err's chain (sent or received), or nil.
func tlsAlert(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && (oe.Op == "remote error" || oe.Op == "local error") {
		return oe
	}
	return nil
}
