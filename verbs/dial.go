package verbs

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/tcpx"
)

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
		return dialStartupErr(ctx, addr, cfg.ReplyTimeout, err)
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
	// From here ctx no longer reaches the socket: a cancellation that came
	// after the Reply would otherwise set its deadline under the running
	// QP, which Dial had handed over as connected.
	if !stop() {
		conn.Close()
		return ctxErr(ctx, ctx.Err())
	}
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
