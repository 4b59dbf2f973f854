package verbs

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goiwarp/iwarp/mpa"
)

// A QP's stream inside TLS, and the connection under the tls.Conn.

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
}

// WriteVectored's memory, shared by the QPs: the staging of small pieces,
// and the batch of sealed records a flush writes at once.
var (
	tlsStagePool = sync.Pool{New: func() any { b := make([]byte, 0, tlsRecordBuf); return &b }}
	tlsBatchPool = sync.Pool{New: func() any { b := make([]byte, 0, tlsBatchBuf); return &b }}
)

// tlsBatchBuf holds the records of a full transmit batch (txBatch).
const tlsBatchBuf = 264 << 10

// WriteVectored writes a flush's FPDUs in as few records as they fill (a
// record per header, payload and CRC piece, as net.Buffers would write
// them, would cost a seal and 22 octets each), and the records in one
// system call.
func (s *tlsStream) WriteVectored(v [][]byte) (int64, error) {
	stage := tlsStagePool.Get().(*[]byte)
	defer tlsStagePool.Put(stage)
	s.sock.batch()
	var n int64
	b := (*stage)[:0]
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

// tlsAfterMax bounds the records the receive side may write while a
// flush is blocked (an alert is 24 octets).
const tlsAfterMax = 4 << 10

var errTLSAfter = errors.New("verbs: TLS records to send pile up behind a write the peer does not read")

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
	wbuf     *[]byte    // the batch, from tlsBatchPool while batching
	batching bool
	flushing bool   // flush is writing the batch, without mu
	after    []byte // records written meanwhile, sent after the batch

	tcpEOF atomic.Bool               // TCP's end of stream reached tls.Conn (tls_close.go)
	wlimit atomic.Pointer[time.Time] // the latest write deadline tls.Conn may set (tls_close.go)
}

func (c *tlsSock) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.keep && len(c.got) < mpa.FrameHeaderLen+mpa.MaxPrivateData {
		c.got = append(c.got, p[:n]...)
	}
	if err == io.EOF {
		c.tcpEOF.Store(true)
	}
	return n, err
}

func (c *tlsSock) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.batching {
		*c.wbuf = append(*c.wbuf, p...)
		return len(p), nil
	}
	if c.flushing {
		// The receive side's alert, while the batch is stuck on a peer
		// that does not read: it must not wait for that write, or the
		// QP would not learn of the failed record that caused it. A peer
		// that makes us answer more (KeyUpdates) while it reads nothing
		// fails the stream rather than grow the backlog.
		if len(c.after)+len(p) > tlsAfterMax {
			return 0, errTLSAfter
		}
		c.after = append(c.after, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// batch gathers writes until flush.
func (c *tlsSock) batch() {
	c.mu.Lock()
	c.batching = true
	c.wbuf = tlsBatchPool.Get().(*[]byte)
	c.mu.Unlock()
}

// flush writes what batch gathered, and gives its memory back: a QP at
// rest holds none.
func (c *tlsSock) flush() error {
	c.mu.Lock()
	c.batching = false
	wbuf := c.wbuf
	c.wbuf = nil
	c.flushing = true
	c.mu.Unlock()
	var err error
	if len(*wbuf) > 0 {
		_, err = c.Conn.Write(*wbuf)
	}
	*wbuf = (*wbuf)[:0]
	tlsBatchPool.Put(wbuf)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flushing = false
	if len(c.after) > 0 {
		if err == nil {
			_, err = c.Conn.Write(c.after)
		}
		c.after = nil
	}
	return err
}
