package verbs

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
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

// tlsRecordBuf is how much of a flush a tlsStream hands tls.Conn.Write at
// once: four full records.
const tlsRecordBuf = 64 << 10

// tlsDirect is the piece size from which WriteVectored hands tls.Conn the
// caller's memory rather than a copy: a full record's worth.
const tlsDirect = 16 << 10

// tlsStream is a QP's stream inside TLS: reads and writes go through the
// tls.Conn, closing and half-closing to the TCP connection under it, so
// that they never wait for the peer (tls.Conn.Close would send a
// close_notify, for up to 5 s).
type tlsStream struct {
	*tls.Conn
	tcp  *net.TCPConn
	sock *tlsSock // what the tls.Conn reads and writes
	buf  []byte   // WriteVectored's staging, made on first use
}

// WriteVectored writes a flush's FPDUs in as few records as they fill (a
// record per header, payload and CRC piece, as net.Buffers would write
// them, would cost a seal and 22 octets each), and the records in one
// system call.
func (s *tlsStream) WriteVectored(v [][]byte) (int64, error) {
	if s.buf == nil {
		s.buf = make([]byte, 0, tlsRecordBuf)
	}
	s.sock.batch()
	var n int64
	b := s.buf[:0]
	for _, p := range v {
		if len(p) >= tlsDirect {
			// A record or more of payload: sealed from the caller's
			// memory, sparing the copy; what is staged goes first.
			if len(b) > 0 {
				m, err := s.Conn.Write(b)
				n += int64(m)
				if err != nil {
					s.sock.flush()
					return n, err
				}
				b = b[:0]
			}
			m, err := s.Conn.Write(p)
			n += int64(m)
			if err != nil {
				s.sock.flush()
				return n, err
			}
			continue
		}
		for len(p) > 0 {
			k := copy(b[len(b):cap(b)], p)
			b, p = b[:len(b)+k], p[k:]
			if len(b) == cap(b) {
				m, err := s.Conn.Write(b)
				n += int64(m)
				if err != nil {
					s.sock.flush()
					return n, err
				}
				b = b[:0]
			}
		}
	}
	if len(b) > 0 {
		m, err := s.Conn.Write(b)
		n += int64(m)
		if err != nil {
			s.sock.flush()
			return n, err
		}
	}
	return n, s.sock.flush()
}

// Close closes the TCP connection at once.
func (s *tlsStream) Close() error { return s.tcp.Close() }

// CloseWrite sends close_notify, then FIN.
func (s *tlsStream) CloseWrite() error {
	s.Conn.CloseWrite()
	return s.tcp.CloseWrite()
}

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

// tlsSock is the connection a tls.Conn runs on. While the transmit loop
// writes a flush, it gathers the records tls.Conn writes one by one and
// sends them in one system call. During a listener's handshake it keeps
// what it reads, so that a cleartext MPA Request can still be read whole
// and answered.
type tlsSock struct {
	net.Conn
	got  []byte // sniffed octets
	keep bool   // sniffing

	mu       sync.Mutex // the batch: the receive side may write an alert meanwhile
	wbuf     []byte
	batching bool
}

func (c *tlsSock) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.keep && len(c.got) < mpa.FrameHeaderLen+mpa.MaxPrivateData {
		c.got = append(c.got, p[:n]...)
	}
	return n, err
}

func (c *tlsSock) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.batching {
		c.wbuf = append(c.wbuf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// batch gathers writes until flush.
func (c *tlsSock) batch() {
	c.mu.Lock()
	c.batching = true
	c.mu.Unlock()
}

// flush writes what batch gathered.
func (c *tlsSock) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batching = false
	if len(c.wbuf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.wbuf)
	c.wbuf = c.wbuf[:0]
	return err
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
// tls.Conn usable). Only for a connection about to be refused if so.
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
