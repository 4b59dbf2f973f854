package verbs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/tcpx"
)

// ConnConfig is the start-up and transport configuration of a connection
// (what rdma_cm's conn_param and the iw_cm's MPA knobs say in Linux).
type ConnConfig struct {
	// MPA is the start-up policy: revision (2 by default), CRC policy
	// (on by default), markers per direction, peer-to-peer mode and RTR
	// types, strict or relaxed IRD/ORD. Its IRD and ORD, when zero, come
	// from the QP.
	MPA mpa.Config
	// TCP are the socket options (buffers, keep-alive, user timeout).
	TCP tcpx.Config
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
	if c.FirstFPDUHold == 0 {
		c.FirstFPDUHold = 100 * time.Millisecond
	}
}

// mpaConfig fills the QP's IRD/ORD into the start-up policy.
func (c *ConnConfig) mpaConfig(qp *QP) mpa.Config {
	m := c.MPA
	if m.IRD == 0 {
		m.IRD = uint16(min(qp.cfg.IRD, mpa.MaxIRDORD))
	}
	if m.ORD == 0 {
		m.ORD = uint16(min(qp.cfg.ORD, mpa.MaxIRDORD))
	}
	return m
}

// Dial connects qp to a listener at addr: TCP, then the MPA Request with
// private data pd, then the Reply. It returns the responder's private data.
// A Reject comes back as an error that Is mpa.ErrRejected and, as an
// *mpa.RejectError, carries the responder's private data.
func (qp *QP) Dial(ctx context.Context, network, addr string, pd []byte, cfg ConnConfig) ([]byte, error) {
	cfg.defaults()
	qp.startMu.Lock()
	closed := qp.closed
	qp.startMu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: Dial on a closed QP", ErrClosed)
	}
	if qp.State() != StateIdle {
		return nil, fmt.Errorf("%w: Dial on a QP in %s", ErrQPState, qp.State())
	}
	if len(pd) > qp.dev.attr.MaxPrivData {
		return nil, fmt.Errorf("%w: %d octets of private data (max %d)", ErrInvalidArg, len(pd), qp.dev.attr.MaxPrivData)
	}
	mcfg := cfg.mpaConfig(qp)
	req, err := mpa.BuildRequest(mcfg, pd)
	if err != nil {
		return nil, err
	}
	conn, err := tcpx.Dial(ctx, network, addr, cfg.TCP)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(cfg.ReplyTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()

	b, err := req.Append(nil)
	if err == nil {
		_, err = conn.Write(b)
	}
	var rep mpa.Frame
	if err == nil {
		rep, err = mpa.ReadFrame(conn, true)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("verbs: MPA start-up with %s: %w", addr, ctxErr(ctx, err))
	}
	params, err := mpa.ConfirmReply(mcfg, req, rep)
	if err != nil {
		// An invalid, insufficient or mismatched Reply gets a Terminate with
		// its LLP code before the close, as siw does.
		var me *mpa.Error
		if errors.As(err, &me) {
			startupTerminate(conn, rep.CRC || req.CRC, rep.Markers, err)
		}
		conn.Close()
		return nil, err
	}
	peerPD, _ := rep.ULPPrivateData()
	peerPD = append([]byte(nil), peerPD...)
	conn.SetDeadline(time.Time{})
	if cfg.FirstFPDUDelay > 0 {
		t := time.NewTimer(cfg.FirstFPDUDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			conn.Close()
			return nil, ctx.Err()
		}
	}
	if err := qp.start(conn, params, cfg, true); err != nil {
		conn.Close()
		return nil, err
	}
	return peerPD, nil
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
// RequestTimeout, so a silent client costs one goroutine for that long) and
// hands valid ones to GetRequest. One bad client never stops it.
type Listener struct {
	dev  *Device
	ln   *tcpx.Listener
	cfg  ConnConfig
	reqs chan *ConnRequest
	stop chan struct{}
	sem  chan struct{} // bounds handshakes in progress
	wg   sync.WaitGroup
	once sync.Once

	mu      sync.Mutex
	pending map[net.Conn]struct{} // connections in start-up, closed on Close
}

// maxHandshakes bounds the start-ups a Listener runs at once; more clients
// wait in the kernel's accept queue.
const maxHandshakes = 256

// Listen starts a Listener on addr ("tcp", "tcp4" or "tcp6").
func (d *Device) Listen(network, addr string, cfg ConnConfig) (*Listener, error) {
	cfg.defaults()
	ln, err := tcpx.Listen(context.Background(), network, addr, cfg.TCP)
	if err != nil {
		return nil, err
	}
	l := &Listener{dev: d, ln: ln, cfg: cfg, reqs: make(chan *ConnRequest, 64), stop: make(chan struct{}),
		sem: make(chan struct{}, maxHandshakes), pending: make(map[net.Conn]struct{})}
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
		l.mu.Lock()
		for c := range l.pending {
			c.Close()
		}
		l.mu.Unlock()
	})
	l.wg.Wait()
	for {
		select {
		case r := <-l.reqs:
			r.conn.Close()
		default:
			return nil
		}
	}
}

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	for {
		select {
		case l.sem <- struct{}{}:
		case <-l.stop:
			return
		}
		conn, err := l.ln.Accept()
		if err != nil {
			<-l.sem
			select {
			case <-l.stop:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and friends: do not spin
			continue
		}
		l.mu.Lock()
		l.pending[conn] = struct{}{}
		l.mu.Unlock()
		l.wg.Add(1)
		go l.handshake(conn)
	}
}

// handshake reads one MPA Request and queues the ConnRequest.
func (l *Listener) handshake(conn *net.TCPConn) {
	defer l.wg.Done()
	defer func() { <-l.sem }()
	keep := false
	untrack := func() {
		l.mu.Lock()
		delete(l.pending, conn)
		l.mu.Unlock()
	}
	defer func() {
		untrack()
		if !keep {
			conn.Close()
		}
	}()
	conn.SetDeadline(time.Now().Add(l.cfg.RequestTimeout))
	req, err := mpa.ReadFrame(conn, false)
	if err != nil {
		return // wrong key, revision > 2, oversized, silent or slow: close, as siw
	}
	// RFC 5044 section 7.1.1 Rev: a revision we cannot interoperate with
	// closes the connection. Respond never accepts the pre-standard Rev 0,
	// so the application must not see it.
	if req.Rev == 0 {
		return
	}
	// Octets behind the Request: the initiator sent them before it could
	// have our Reply (section 7.1.2 rule 3), so they are private data beyond
	// PD_Length, which section 7.1.1 closes for. siw: "peer sent extra
	// data", -EPROTO.
	if earlyData(conn) > 0 {
		return
	}
	upd, err := req.ULPPrivateData()
	if err != nil {
		// Enhanced without its IRD/ORD word: siw rejects.
		if b, e := mpa.Reject(l.rejectConfig(), req, nil).Append(nil); e == nil {
			conn.Write(b)
		}
		return
	}
	r := &ConnRequest{l: l, conn: conn, req: req, PrivateData: append([]byte(nil), upd...)}
	if v, err := req.IRDORD(); err == nil && req.HasIRDORD() {
		r.IRD, r.ORD, r.P2P = int(v.IRD), int(v.ORD), v.P2P
	}
	// Once handed over, the connection is the application's: Close must not
	// reach it through pending any more.
	untrack()
	select {
	case l.reqs <- r:
		keep = true
	case <-l.stop:
	}
}

// GetRequest returns the next connection request, as rdma_get_request.
func (l *Listener) GetRequest(ctx context.Context) (*ConnRequest, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.stop:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ConnRequest is a connection request the application accepts or rejects.
type ConnRequest struct {
	l    *Listener
	conn *net.TCPConn
	req  mpa.Frame
	once sync.Once

	// PrivateData is the initiator's private data (without the rev-2
	// IRD/ORD word).
	PrivateData []byte
	// IRD and ORD the initiator offered (rev 2), and whether it asked for
	// peer-to-peer mode.
	IRD, ORD int
	P2P      bool
}

// RemoteAddr returns the initiator's address.
func (r *ConnRequest) RemoteAddr() net.Addr { return r.conn.RemoteAddr() }

// Request returns the MPA Request frame as received.
func (r *ConnRequest) Request() mpa.Frame { return r.req }

var errAnswered = errors.New("verbs: connection request already answered")

// Accept binds qp to the connection and sends the MPA Reply with private
// data pd. In peer-to-peer mode it returns once the initiator's RTR message
// has arrived.
func (r *ConnRequest) Accept(qp *QP, pd []byte) error {
	err := errAnswered
	r.once.Do(func() { err = r.accept(qp, pd) })
	return err
}

func (r *ConnRequest) accept(qp *QP, pd []byte) error {
	cfg := r.l.cfg
	conn := r.conn
	if qp.State() != StateIdle {
		conn.Close()
		return fmt.Errorf("%w: Accept with a QP in %s", ErrQPState, qp.State())
	}
	if len(pd) > qp.dev.attr.MaxPrivData {
		conn.Close()
		return fmt.Errorf("%w: %d octets of private data (max %d)", ErrInvalidArg, len(pd), qp.dev.attr.MaxPrivData)
	}
	mcfg := cfg.mpaConfig(qp)
	rep, params, err := mpa.Respond(mcfg, r.req, pd)
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
	if err := qp.start(conn, params, cfg, false); err != nil {
		conn.Close()
		return err
	}
	if params.P2P {
		return qp.awaitRTR(cfg.RequestTimeout)
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

// Reject refuses the request with private data pd (a Reply with R set), and
// closes the connection.
func (r *ConnRequest) Reject(pd []byte) error {
	err := errAnswered
	r.once.Do(func() {
		defer r.conn.Close()
		var b []byte
		b, err = mpa.Reject(r.l.rejectConfig(), r.req, pd).Append(nil)
		if err == nil {
			r.conn.SetWriteDeadline(time.Now().Add(r.l.cfg.RequestTimeout))
			_, err = r.conn.Write(b)
		}
	})
	return err
}

// earlyData returns the octets queued on conn beyond the MPA Request (0 if
// the platform cannot tell).
func earlyData(conn *net.TCPConn) int {
	n, err := tcpx.Buffered(conn)
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
