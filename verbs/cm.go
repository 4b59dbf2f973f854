package verbs

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/tcpx"
)

// ConnConfig is the start-up and transport configuration of a connection
// (what rdma_cm's conn_param and the iw_cm's MPA knobs say in Linux).
type ConnConfig struct {
	// PrivateData goes to the peer in our MPA Request (Dial) — at most
	// DeviceAttr.MaxPrivData octets — and the peer's comes back in
	// QP.PeerPrivateData. A Listener ignores it: Accept and Reject take
	// theirs per request.
	PrivateData []byte
	// MPA is the start-up policy: revision (2 by default), CRC policy
	// (on by default), markers per direction, peer-to-peer mode and RTR
	// types, strict or relaxed IRD/ORD. Its IRD and ORD, when zero, come
	// from the QP.
	MPA mpa.Config
	// TCP are the socket options (buffers, keep-alive, user timeout), the
	// congestion control (CongestionControl) and Multipath TCP
	// (MultipathTCP, which refuses a user timeout).
	TCP tcpx.Config
	// TLS, if set, runs the connection inside TLS 1.3 (crypto/tls): the
	// handshake on the TCP connection first, then the MPA start-up and
	// every FPDU in TLS records. Dial takes a client configuration (its
	// ServerName defaults to addr's host, as tls.Dial's), Listen a server
	// one; to require client certificates, set ClientAuth and ClientCAs,
	// and read the verified identity in ConnRequest.TLS before Accept.
	// MinVersion is raised to TLS 1.3, and NextProtos, if empty, is the
	// ALPN protocol "iwarp". Inside TLS, the CRC policy's zero value
	// (mpa.CRCOn) means mpa.CRCOff: TLS authenticates every octet, and
	// the CRC would only cost time; mpa.CRCRequired keeps both. A TLS
	// listener answers a cleartext MPA Request with an MPA Reject whose
	// private data reads "iwarp: TLS required".
	TLS *tls.Config
	// DialContext, if set, makes Dial's TCP connection instead of
	// tcpx.Dial (to pick a network namespace or reach a peer through a
	// tunnel), as net/http.Transport's; TCP's options are then applied to
	// what it returns, but for TCP.LocalAddr, which is then its own to
	// bind. A source address alone is TCP.LocalAddr.
	DialContext func(ctx context.Context, network, addr string) (*net.TCPConn, error)
	// ReplyTimeout bounds the initiator's wait for the MPA Reply (siw:
	// 10 s); RequestTimeout the responder's wait for the Request (siw: 5 s),
	// and, in peer-to-peer mode, for the RTR message.
	ReplyTimeout, RequestTimeout time.Duration
	// MaxFPDU caps the FPDU size in octets; 0 sizes FPDUs to the TCP
	// segment (EMSS), which hardware peers require.
	MaxFPDU int
	// ReadBuffer is the receive buffer of the QP's MPA reader (default
	// mpa.DefaultReadBuffer).
	ReadBuffer int
	// SegmentPerFPDU puts each FPDU in a TCP segment of its own: it is
	// handed to TCP with its own write, once TCP has sent everything before
	// it (so that Linux does not append it to a segment still waiting for
	// the window). An FPDU is at most one segment (MaxFPDU, EMSS), so each
	// segment then starts with an FPDU and holds just that one, as RFC 5044
	// section 8 recommends but does not require. With markers, an FPDU that
	// would end exactly where a marker is due is a word shorter, so that
	// the marker falls inside the next FPDU rather than between two
	// segments (mpa.Writer.EndsAtMarker). It costs throughput; it is
	// for packet analysers that assume it (Wireshark's marker decoding
	// does). The wait for TCP is bounded: a peer that closes its window
	// for longer (segmentWaitMax) gets the next FPDU appended anyway.
	SegmentPerFPDU bool
	// FirstFPDUHold bounds how long a QP that must not send first holds
	// its work requests back (Read Responses and Terminates are never
	// held): a responder outside peer-to-peer mode until the initiator's
	// first FPDU has arrived and checked out (RFC 5044 section 7.1.2: "MPA
	// Responder mode implementations MUST receive and validate at least one
	// FPDU before sending any FPDUs"), and an initiator that sent a Read
	// RTR (the P2PAuto default) until its answer, which tells that the
	// responder's QP reads the stream. The event ends the hold at once;
	// this is the fallback for applications whose protocol has the
	// responder speak first (rdma_cm's cmatose, perftest), and for a peer
	// that stalled an RTR (below). Default 100 ms; negative: no fallback,
	// the RFC's rule strictly. A peer-to-peer responder holds until the
	// RTR, bounded by RequestTimeout.
	//
	// Why: Linux siw (6.1) as initiator fails the connection (-EPROTO,
	// "peer sent extra data") when an FPDU is already queued behind the
	// Reply as it reads it; as responder it hands the socket to its QP only
	// after sending its Reply, and an FPDU that arrives in between sits
	// unread until more data comes. The hold keeps our first FPDU out of
	// both windows whenever the other side's events allow.
	FirstFPDUHold time.Duration
	// FirstFPDUDelay holds the initiator's first FPDU back for this long
	// after the MPA Reply, whatever the responder does. RFC 5044 lets the
	// initiator send at once, and that is the default; with P2PAuto (the
	// Read RTR above) it is rarely needed. For a siw responder without
	// peer-to-peer mode, a few milliseconds (more under emulation) avoid
	// the race FirstFPDUHold describes.
	FirstFPDUDelay time.Duration
	// Backlog bounds, on a Listener, the connection requests read but not
	// yet taken by GetRequest (default 1024); one more is refused with an
	// MPA Reject, as Linux's iw_cm does past its backlog. BacklogTimeout
	// bounds how long one waits there (default 10 s, the initiator's own
	// wait for a Reply in siw); then it is closed. A queued request whose
	// initiator closes or resets gives its place back at once.
	Backlog        int
	BacklogTimeout time.Duration
	// RFC7306 enables the RFC 7306 extensions (atomics, Immediate Data) on
	// the connection. MPA has no bit to negotiate them, so both sides must
	// set it; a QP without it never sends them and answers them with a
	// Terminate (unexpected opcode).
	RFC7306 bool
}

func (c *ConnConfig) defaults() {
	if c.ReplyTimeout <= 0 {
		c.ReplyTimeout = 10 * time.Second
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 5 * time.Second
	}
	if c.ReadBuffer <= 0 {
		c.ReadBuffer = mpa.DefaultReadBuffer
	}
	if c.Backlog <= 0 {
		c.Backlog = 1024
	}
	if c.BacklogTimeout <= 0 {
		c.BacklogTimeout = 10 * time.Second
	}
	if c.FirstFPDUHold == 0 {
		c.FirstFPDUHold = 100 * time.Millisecond
	}
}

// mpaConfig fills the QP's IRD/ORD into the start-up policy.
func (c *ConnConfig) mpaConfig(qp *QP) mpa.Config {
	m := c.MPA
	if c.TLS != nil && m.CRC == mpa.CRCOn {
		m.CRC = mpa.CRCOff
	}
	if m.IRD == 0 {
		m.IRD = uint16(min(qp.cfg.IRD, mpa.MaxIRDORD))
	}
	if m.ORD == 0 {
		m.ORD = uint16(min(qp.cfg.ORD, mpa.MaxIRDORD))
	}
	return m
}

// Dial connects qp to a listener at addr: TCP, then the MPA Request with
// cfg.PrivateData, then the Reply; the responder's private data is then
// QP.PeerPrivateData. ctx bounds the whole start-up (with
// cfg.ReplyTimeout); its error is wrapped in Dial's. A Reject comes back as
// an error that Is mpa.ErrRejected and, as an *mpa.RejectError, carries the
// responder's private data and IRD/ORD. A Dial that fails leaves the QP
// IDLE, to dial again or Close; one on a closed QP returns ErrClosed, and
// one on a QP another Dial or Accept is connecting ErrQPState.
func (qp *QP) Dial(ctx context.Context, network, addr string, cfg ConnConfig) error {
	cfg.defaults()
	if len(cfg.PrivateData) > qp.dev.attr.MaxPrivData {
		return fmt.Errorf("%w: %d octets of private data (max %d)", ErrInvalidArg, len(cfg.PrivateData), qp.dev.attr.MaxPrivData)
	}
	var tcfg *tls.Config
	if cfg.TLS != nil {
		var err error
		if tcfg, err = tlsConfig(cfg.TLS, false, addr); err != nil {
			return err
		}
	}
	if err := qp.claim("Dial"); err != nil {
		return err
	}
	defer qp.unclaim()
	mcfg := cfg.mpaConfig(qp)
	req, err := mpa.BuildRequest(mcfg, cfg.PrivateData)
	if err != nil {
		return err
	}
	var conn *net.TCPConn
	if cfg.DialContext != nil {
		if conn, err = cfg.DialContext(ctx, network, addr); err == nil {
			if err = tcpx.Apply(conn, cfg.TCP); err != nil {
				conn.Close()
			}
		}
	} else {
		conn, err = tcpx.Dial(ctx, network, addr, cfg.TCP)
	}
	if err != nil {
		return err
	}
	deadline := time.Now().Add(cfg.ReplyTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()

	var stream net.Conn = conn
	if tcfg != nil {
		ts, err := clientTLS(conn, tcfg)
		if err != nil {
			conn.Close()
			return fmt.Errorf("verbs: TLS handshake with %s: %w", addr, ctxErr(ctx, err))
		}
		stream = ts
	}
	b, err := req.Append(nil)
	if err == nil {
		_, err = stream.Write(b)
	}
	var rep mpa.Frame
	if err == nil {
		rep, err = mpa.ReadFrame(stream, true)
	}
	if err != nil {
		conn.Close()
		if ae := tlsAlert(err); tcfg != nil && ae != nil {
			// The server refused us after its handshake (a TLS 1.3
			// client learns of a bad certificate only then): say so, not
			// that the stream was lost.
			return fmt.Errorf("verbs: TLS with %s: %w", addr, ae)
		}
		return fmt.Errorf("verbs: MPA start-up with %s: %w", addr, ctxErr(ctx, err))
	}
	params, err := mpa.ConfirmReply(mcfg, req, rep)
	if err != nil {
		// An invalid, insufficient or mismatched Reply gets a Terminate with
		// its LLP code before the close, as siw does.
		var me *mpa.Error
		if errors.As(err, &me) {
			startupTerminate(stream, rep.CRC || req.CRC, rep.Markers, err)
		}
		conn.Close()
		return err
	}
	peerPD, _ := rep.ULPPrivateData()
	qp.peerPD = append([]byte(nil), peerPD...)
	conn.SetDeadline(time.Time{})
	if cfg.FirstFPDUDelay > 0 {
		t := time.NewTimer(cfg.FirstFPDUDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			conn.Close()
			return ctxErr(ctx, ctx.Err())
		}
	}
	if err := qp.start(stream, params, cfg, true); err != nil {
		conn.Close()
		return err
	}
	return nil
}

// ctxErr adds ctx's error to err when ctx has ended: the deadline Dial took
// from it, or its cancellation, is what cut the start-up short. The conn
// deadline may fire a moment before ctx's own timer, hence the clock check.
func ctxErr(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if d, ok := ctx.Deadline(); cerr == nil && ok && !time.Now().Before(d) {
		cerr = context.DeadlineExceeded
	}
	if cerr == nil {
		return err
	}
	return fmt.Errorf("%w: %w", cerr, err)
}

// Listener accepts iWARP connections: it reads each MPA Request (bounded by
// RequestTimeout) and queues valid ones for GetRequest (bounded by Backlog
// and BacklogTimeout). One bad client never stops it, and a flood of silent
// ones does not lock others out: past maxHandshakes start-ups in progress,
// each new connection evicts a silent one (listen_startups.go).
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

// ConnRequest is a connection request the application accepts or rejects.
type ConnRequest struct {
	l       *Listener
	conn    *net.TCPConn // the socket
	stream  net.Conn     // what the MPA start-up runs on: conn, or TLS on it
	req     mpa.Frame
	once    sync.Once
	done    atomic.Bool   // once has run: answered
	taken   bool          // by GetRequest; guarded by l.mu
	ending  bool          // Accept or Reject ends the watch; guarded by l.mu
	watched chan struct{} // closed when the Listener's watch of it ends
	ctx     context.Context
	cancel  context.CancelCauseFunc

	// PrivateData is the initiator's private data (without the rev-2
	// IRD/ORD word).
	PrivateData []byte
	// IRD and ORD the initiator offered (rev 2), and whether it asked for
	// peer-to-peer mode.
	IRD, ORD int
	P2P      bool
	// TLS is the TLS connection's state, its verified client certificate
	// chains among it (PeerCertificates, VerifiedChains) when the
	// Listener's tls.Config asks for one; nil on a cleartext Listener.
	// As net/http.Request's TLS.
	TLS *tls.ConnectionState
}

// RemoteAddr returns the initiator's address.
func (r *ConnRequest) RemoteAddr() net.Addr { return r.conn.RemoteAddr() }

// Request returns the MPA Request frame as received.
func (r *ConnRequest) Request() mpa.Frame { return r.req }

var errAnswered = errors.New("verbs: connection request already answered")

// Accept binds qp to the connection and sends the MPA Reply with
// privateData (at most DeviceAttr.MaxPrivData octets). In peer-to-peer
// mode it returns once the initiator's RTR message has arrived, bounded by
// the Listener's RequestTimeout and by ctx (whose error it then wraps).
//
// Arguments it refuses (a closed QP or device: ErrClosed; a QP not IDLE,
// or one another Dial or Accept is connecting: ErrQPState; too much
// private data) leave the request unanswered, to Accept with another QP or
// Reject, as rdma_accept's EINVAL does.
func (r *ConnRequest) Accept(ctx context.Context, qp *QP, privateData []byte) error {
	if r.done.Load() {
		return errAnswered
	}
	if len(privateData) > qp.dev.attr.MaxPrivData {
		return fmt.Errorf("%w: %d octets of private data (max %d)", ErrInvalidArg, len(privateData), qp.dev.attr.MaxPrivData)
	}
	// The QP is ours from here until start, so that nothing another
	// goroutine does with it can fail the start after our Reply is out.
	if err := qp.claim("Accept"); err != nil {
		return err
	}
	defer qp.unclaim()
	err := errAnswered
	r.once.Do(func() { r.done.Store(true); r.endWatch(); err = r.accept(ctx, qp, privateData) })
	return err
}

func (r *ConnRequest) accept(ctx context.Context, qp *QP, privateData []byte) error {
	cfg := r.l.cfg
	conn := r.stream
	mcfg := cfg.mpaConfig(qp)
	rep, params, err := mpa.Respond(mcfg, r.req, privateData)
	// The same check as the handshake's, for octets that came while the
	// application made up its mind: still before our Reply.
	if n := earlyData(conn); err == nil && n > 0 {
		conn.Close()
		return &mpa.Error{Code: mpa.CodeInvalidReqRep, Msg: fmt.Sprintf("initiator sent %d octets before the MPA Reply", n)}
	}
	if b, e := rep.Append(nil); e == nil && (err == nil || rep.Reject) {
		conn.SetWriteDeadline(time.Now().Add(cfg.RequestTimeout))
		if _, werr := conn.Write(b); werr != nil && err == nil {
			err = werr
		}
		conn.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		conn.Close()
		return err
	}
	conn.SetDeadline(time.Time{}) // the start-up's deadline must not outlive it
	qp.peerPD = r.PrivateData
	if err := qp.start(conn, params, cfg, false); err != nil {
		conn.Close()
		return err
	}
	if params.P2P {
		return qp.awaitRTR(ctx, cfg.RequestTimeout)
	}
	return nil
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

// Reject refuses the request with privateData (a Reply with R set, which
// also carries our IRD and ORD), and closes the connection. Too much
// private data (more than DeviceAttr.MaxPrivData) is refused and leaves
// the request unanswered.
func (r *ConnRequest) Reject(privateData []byte) error {
	if r.done.Load() {
		return errAnswered
	}
	if max := r.l.dev.attr.MaxPrivData; len(privateData) > max {
		return fmt.Errorf("%w: %d octets of private data (max %d)", ErrInvalidArg, len(privateData), max)
	}
	err := errAnswered
	r.once.Do(func() {
		r.done.Store(true)
		r.endWatch()
		defer r.conn.Close()
		var b []byte
		b, err = mpa.Reject(r.l.rejectConfig(), r.req, privateData).Append(nil)
		if err == nil {
			r.conn.SetWriteDeadline(time.Now().Add(r.l.cfg.RequestTimeout))
			_, err = r.stream.Write(b)
		}
	})
	return err
}

// earlyData returns the octets queued on conn beyond the MPA Request (0 if
// the platform cannot tell); inside TLS, whether there are any.
func earlyData(conn net.Conn) int {
	if ts, ok := conn.(*tlsStream); ok {
		return tlsEarlyData(ts)
	}
	n, err := tcpx.Buffered(conn.(*net.TCPConn))
	if err != nil {
		return 0
	}
	return n
}

// startupTerminate sends the Terminate for a start-up error (layer LLP) as
// the first and only FPDU, with markers if the responder asked for them (RFC
// 5044 section 7.1.2 rule 7: then the first octets are the marker).
func startupTerminate(conn net.Conn, crc, markers bool, err error) {
	w := mpa.NewWriter(conn, crc, markers)
	hdr, term := terminateFPDU(err)
	conn.SetWriteDeadline(time.Now().Add(time.Second))
	w.Append(hdr, term)
	w.Flush()
}
