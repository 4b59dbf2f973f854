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
)

// ConnRequest is a connection request the application accepts or rejects.
// Of concurrent or repeated Accept and Reject calls, one answers it.
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
// the Listener's RequestTimeout and by ctx (whose error it then wraps); a
// missing RTR then gets a Terminate, and Accept returns once the connection
// has closed, up to termLinger (2 s) later.
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
