package verbs

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/tcpx"
)

// Listener accepts iWARP connections: it reads each MPA Request (bounded by
// RequestTimeout) and queues valid ones for GetRequest (bounded by Backlog
// and BacklogTimeout). One bad client never stops it, and a flood of silent
// ones does not lock others out: past maxHandshakes start-ups in progress,
// each new connection evicts a silent one (listen_startups.go).
//
// GetRequest may be called from several goroutines; Close releases them.
type Listener struct {
	dev    *Device
	ln     *tcpx.Listener
	cfg    ConnConfig
	tls    *tls.Config // the server's, as tlsConfig made it; nil: cleartext
	stop   chan struct{}
	starts startups // connections in start-up, closed on Close
	wg     sync.WaitGroup
	once   sync.Once

	mu    sync.Mutex
	queue []*ConnRequest            // read, not yet taken; oldest first
	taken map[*ConnRequest]struct{} // taken, not yet answered: still watched
	ready chan struct{}             // capacity 1: the queue has requests
}

// maxHandshakes bounds the start-ups a Listener runs at once; one more
// evicts one in progress.
const maxHandshakes = 256

// Listen starts a Listener on addr (network "tcp", "tcp4" or "tcp6"); ctx
// bounds the listen call itself, as net.ListenConfig.Listen's.
func (d *Device) Listen(ctx context.Context, network, addr string, cfg ConnConfig) (*Listener, error) {
	cfg.defaults()
	if d.isClosed() {
		return nil, fmt.Errorf("%w: device", ErrClosed)
	}
	var tcfg *tls.Config
	if cfg.TLS != nil {
		var err error
		if tcfg, err = tlsConfig(cfg.TLS, true, addr); err != nil {
			return nil, err
		}
	}
	ln, err := tcpx.Listen(ctx, network, addr, cfg.TCP)
	if err != nil {
		return nil, err
	}
	l := &Listener{dev: d, ln: ln, cfg: cfg, tls: tcfg, stop: make(chan struct{}), ready: make(chan struct{}, 1),
		taken: make(map[*ConnRequest]struct{})}
	l.starts.max = maxHandshakes
	d.mu.Lock()
	d.listeners[l] = struct{}{}
	d.mu.Unlock()
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Close stops the listener; start-ups in progress and requests not taken
// are dropped. It returns when its goroutines are gone.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.stop)
		l.ln.Close()
		l.starts.close()
		l.mu.Lock()
		for _, r := range l.queue {
			r.conn.Close() // its watch ends and drops it
		}
		for r := range l.taken {
			r.conn.SetReadDeadline(time.Now()) // its watch ends; the request stays the application's
		}
		l.mu.Unlock()
		l.dev.mu.Lock()
		delete(l.dev.listeners, l)
		l.dev.mu.Unlock()
	})
	l.wg.Wait()
	return nil
}

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			select {
			case <-l.stop:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if fdLimit(err) && l.starts.evict(time.Now()) {
				continue // a start-up's fd is free for the next
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and friends: do not spin
			continue
		}
		s, evict := l.starts.add(conn, time.Now())
		if evict != nil {
			evict.Close()
		}
		if s == nil {
			continue // closed: the next Accept fails
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			if r := l.handshake(s); r != nil {
				l.watch(r)
			}
		}()
	}
}

// handshake reads one MPA Request and queues the ConnRequest, which it
// returns; nil if the connection was closed, evicted or refused.
func (l *Listener) handshake(s *startup) *ConnRequest {
	conn := s.TCPConn
	var queued *ConnRequest
	defer func() {
		if queued == nil {
			conn.Close()
		}
	}()
	conn.SetDeadline(time.Now().Add(l.cfg.RequestTimeout))
	var stream net.Conn = conn
	var state *tls.ConnectionState
	var req mpa.Frame
	var err error
	if l.tls != nil {
		var ts *tlsStream
		if ts, err = l.serverTLS(s); err == nil {
			st := ts.ConnectionState()
			stream, state = ts, &st
			req, err = mpa.ReadFrame(ts, false)
		}
	} else {
		req, err = mpa.ReadFrame(s, false)
	}
	if !l.starts.done(s) || err != nil {
		// Evicted; no TLS, an untrusted or missing client certificate;
		// wrong key, revision > 2, oversized, silent or slow: close, as siw.
		return nil
	}
	// RFC 5044 section 7.1.1 Rev: a revision we cannot interoperate with
	// closes the connection. Respond never accepts the pre-standard Rev 0,
	// so the application must not see it.
	if req.Rev == 0 {
		return nil
	}
	// Octets behind the Request: the initiator sent them before it could
	// have our Reply (section 7.1.2 rule 3), so they are private data beyond
	// PD_Length, which section 7.1.1 closes for. siw: "peer sent extra
	// data", -EPROTO.
	if earlyData(stream) > 0 {
		return nil
	}
	upd, err := req.ULPPrivateData()
	if err != nil {
		// Enhanced without its IRD/ORD word: siw rejects.
		l.reject(stream, req, nil)
		return nil
	}
	r := &ConnRequest{l: l, conn: conn, stream: stream, req: req, PrivateData: append([]byte(nil), upd...),
		TLS: state, watched: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancelCause(context.Background())
	if v, err := req.IRDORD(); err == nil && req.HasIRDORD() {
		r.IRD, r.ORD, r.P2P = int(v.IRD), int(v.ORD), v.P2P
	}
	// The watch's deadline is set before the request can be taken, so
	// that GetRequest's (now) always comes later and wins.
	conn.SetReadDeadline(time.Now().Add(l.cfg.BacklogTimeout))
	l.mu.Lock()
	select {
	case <-l.stop:
		l.mu.Unlock()
		return nil
	default:
	}
	if len(l.queue) >= l.cfg.Backlog {
		l.mu.Unlock()
		l.reject(stream, req, nil) // as iw_cm past its backlog
		return nil
	}
	l.queue = append(l.queue, r)
	l.mu.Unlock()
	queued = r
	select {
	case l.ready <- struct{}{}:
	default:
	}
	return r
}

// reject sends a Reject to req with private data pd, best effort.
func (l *Listener) reject(conn net.Conn, req mpa.Frame, pd []byte) {
	if b, err := mpa.Reject(l.rejectConfig(), req, pd).Append(nil); err == nil {
		conn.SetWriteDeadline(time.Now().Add(l.cfg.RequestTimeout))
		conn.Write(b)
	}
}

// GetRequest returns the next connection request, as rdma_get_request, or
// the error of ctx, or ErrClosed once the Listener is closed.
func (l *Listener) GetRequest(ctx context.Context) (*ConnRequest, error) {
	for {
		l.mu.Lock()
		if len(l.queue) > 0 {
			r := l.queue[0]
			l.queue[0] = nil
			l.queue = l.queue[1:]
			l.take(r)
			more := len(l.queue) > 0
			l.mu.Unlock()
			if more {
				select {
				case l.ready <- struct{}{}:
				default:
				}
			}
			return r, nil
		}
		l.mu.Unlock()
		select {
		case <-l.ready:
		case <-l.stop:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// rejectConfig is the start-up policy a Listener rejects with: a Reject to
// an enhanced Request carries our IRD and ORD, which RFC 6581 section 9.1
// has the initiator pass to its application (to retry with), so unset ones
// are what a QP of the device would take.
func (l *Listener) rejectConfig() mpa.Config {
	m := l.cfg.MPA
	if m.IRD == 0 {
		m.IRD = uint16(min(l.dev.attr.MaxIRD, mpa.MaxIRDORD))
	}
	if m.ORD == 0 {
		m.ORD = uint16(min(l.dev.attr.MaxORD, mpa.MaxIRDORD))
	}
	return m
}
