package perf

// The out-of-band part of an RDMA test: agreeing on the parameters,
// connecting the QPs, telling each side where the other's buffers are, and
// synchronising around each measurement. Everything here sits behind the
// Exchange interface so that perftest's own exchange (ctx_xchg_data over a
// TCP socket, or over rdma_cm with -R) can replace it without touching the
// measurement loops.
//
// The native exchange runs over the iWARP connection itself, as perftest
// does with -R:
//
//   - The client dials a control QP. Its MPA Request's private data is
//     "iwarp-perf/1 hello " followed by JSON: a random session number and
//     the symmetric parameters (test, size, -a, -n, -D, -q, -r, -b). The
//     server compares them with its own; if they differ it rejects the
//     connection with private data "iwarp-perf/1 reject: <what differs>",
//     which the client prints. Otherwise it replies "iwarp-perf/1 ok".
//   - The client dials one QP per -q; each Request carries
//     "iwarp-perf/1 qp <session> <index>" and the server accepts it into
//     its QP of that index. A server busy with another client's test
//     rejects any other Request with "iwarp-perf/1 reject: busy: ..."
//     (serve.go).
//   - The rest are Sends on the control QP, each one message: a kind octet
//     ('B' buffers, 'S' sync, 'R' report) and JSON. Both sides send first,
//     then receive, so each is a barrier. 'B' lists, per QP, the address,
//     RKey and length of the memory the peer may write or read.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/verbs"
)

// BufInfo is the memory one side exposes on one QP, and how it names the
// QP (for perftest's address lines).
type BufInfo struct {
	Addr uint64 `json:"addr"`
	RKey uint32 `json:"rkey"`
	Len  uint32 `json:"len"`
	QPN  uint32 `json:"qpn"`
	Outs int    `json:"outs,omitempty"`
}

// Exchange is the conversation between the two sides of an RDMA test,
// after the parameters are agreed (by whatever opened it: DialExchange and
// AcceptExchange here). In perftest's terms (perftest_communication.c, -R
// mode; codec in internal/perftest): Connect is the rdma_cm connection of
// the test QPs, SwapBufs the exchange of pingpong_dest records (QPN, RKey,
// VAddr, outstanding reads), Sync ctx_hand_shake, and Report
// xchg_bw_reports.
type Exchange interface {
	// Connect connects the test's QPs to the peer's, the client dialing and
	// the server accepting. Receives a test needs must be posted before.
	Connect(ctx context.Context, qps []*verbs.QP) error
	// SwapBufs sends the memory our QPs expose and returns the peer's:
	// remote[i] is the peer's memory for qps[i].
	SwapBufs(ctx context.Context, local []BufInfo) (remote []BufInfo, err error)
	// Sync returns once the peer has called Sync too.
	Sync(ctx context.Context) error
	// Report sends our results and returns the peer's: the barrier at the
	// end of each measurement.
	Report(ctx context.Context, mine Report) (Report, error)
	// Close ends the conversation in an orderly way.
	Close() error
}

const (
	protoPrefix  = "iwarp-perf/1 "
	helloPrefix  = protoPrefix + "hello "
	qpPrefix     = protoPrefix + "qp "
	okReply      = protoPrefix + "ok"
	rejectPrefix = protoPrefix + "reject: "

	msgBufs   = 'B'
	msgSync   = 'S'
	msgReport = 'R'
)

type hello struct {
	Session uint64    `json:"session"`
	Params  symmetric `json:"params"`
}

// msgConn carries the exchange's messages: a kind octet and a payload.
type msgConn interface {
	send(ctx context.Context, kind byte, payload []byte) error
	recv(ctx context.Context) (kind byte, payload []byte, err error)
}

// swap sends our message of the given kind and returns the peer's.
func swap(ctx context.Context, c msgConn, kind byte, v any, peer any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := c.send(ctx, kind, b); err != nil {
		return fmt.Errorf("sending to peer: %w", err)
	}
	k, pl, err := c.recv(ctx)
	if err != nil {
		return fmt.Errorf("waiting for peer: %w", err)
	}
	if k != kind {
		return fmt.Errorf("protocol error: peer sent message %q, expected %q", k, kind)
	}
	if peer == nil {
		return nil
	}
	if err := json.Unmarshal(pl, peer); err != nil {
		return fmt.Errorf("protocol error: bad %q message: %w", kind, err)
	}
	return nil
}

// nativeExchange is the exchange of two iwarp-perf processes over a
// control QP.
type nativeExchange struct {
	client  bool
	session uint64
	ctl     *ctlQP
	timeout time.Duration // of each step of the set-up (--exchange-timeout)
	// client side
	dev  *verbs.Device
	addr string
	cfg  verbs.ConnConfig
	// server side
	ln RequestSource
}

// DialExchange opens the native exchange to the server at addr: a control
// QP whose MPA Request carries our symmetric parameters.
func DialExchange(ctx context.Context, dev *verbs.Device, addr string, cfg verbs.ConnConfig, p *Params) (Exchange, error) {
	ctl, err := newCtlQP(dev)
	if err != nil {
		return nil, err
	}
	h := hello{Session: randSession(), Params: p.symmetric()}
	b, _ := json.Marshal(h)
	dctx, cancel := step(ctx, p.exchangeTimeout(), "connecting")
	err = ctl.qp.Dial(dctx, "tcp", addr, withPD(cfg, append([]byte(helloPrefix), b...)))
	cancel()
	err = causeOf(dctx, err)
	pd := ctl.qp.PeerPrivateData()
	if err != nil {
		ctl.close()
		var rej *mpa.RejectError
		if errors.As(err, &rej) && bytes.HasPrefix(rej.PrivateData, []byte(rejectPrefix)) {
			return nil, fmt.Errorf("server refused the test: %s", rej.PrivateData[len(rejectPrefix):])
		}
		return nil, fmt.Errorf("connecting to %s: %w", addr, err)
	}
	if string(pd) != okReply {
		if len(pd) == 0 {
			// No private data at all: perftest's rdma_cm server (ib_*_* -R)
			// accepts whatever the Request carries. Go on with its exchange.
			return startPerftest(ctx, ctl, true, dev, addr, cfg, nil, p, true)
		}
		ctl.close()
		return nil, fmt.Errorf("%s is not an iwarp-perf server (reply %q)", addr, pd)
	}
	return &nativeExchange{client: true, session: h.Session, ctl: ctl, timeout: p.exchangeTimeout(), dev: dev, addr: addr,
		cfg: cfg}, nil
}

// AcceptExchange takes the next connection request from src and opens the
// exchange with it: a client's control QP, whose parameters it checks
// against ours. A client that differs, or that sends no valid hello, is
// rejected with the reason and AcceptExchange returns a *ClientError. A
// request without iwarp-perf's private data (perftest's ib_*_* -R) gets
// perftest's exchange instead. Errors that are not a *ClientError come
// from src or from this side.
func AcceptExchange(ctx context.Context, src RequestSource, dev *verbs.Device, p *Params) (Exchange, error) {
	req, err := src.GetRequest(ctx)
	if err != nil {
		return nil, err
	}
	refuse := func(why string, err error) (Exchange, error) {
		req.Reject([]byte(rejectPrefix + clip(why, 400)))
		return nil, &ClientError{Addr: req.RemoteAddr(), Err: err}
	}
	if !bytes.HasPrefix(req.PrivateData, []byte(protoPrefix)) {
		if p.Test.verb() == verbAtomic {
			return refuse("the atomic tests need iwarp-perf's exchange",
				errors.New("a request without iwarp-perf's hello (perftest's exchange), which the atomic tests do not support"))
		}
		from := req.RemoteAddr()
		serving(src, func(r *verbs.ConnRequest) bool { return perftestClaims(from, r) })
		x, err := acceptPerftest(ctx, req, src, dev, p)
		if err != nil {
			return nil, &ClientError{Addr: req.RemoteAddr(), Err: err}
		}
		return x, nil
	}
	if !bytes.HasPrefix(req.PrivateData, []byte(helloPrefix)) {
		return refuse("expected a hello first", errors.New("a request without a hello (a QP of no test in progress)"))
	}
	var h hello
	if err := json.Unmarshal(req.PrivateData[len(helloPrefix):], &h); err != nil {
		return refuse("malformed hello", fmt.Errorf("malformed hello: %w", err))
	}
	if d := p.symmetric().mismatch(h.Params); d != "" {
		return refuse(d, fmt.Errorf("different parameters: %s", d))
	}
	ctl, err := newCtlQP(dev)
	if err != nil {
		req.Reject(nil)
		return nil, &localError{err}
	}
	x := &nativeExchange{session: h.Session, ctl: ctl, timeout: p.exchangeTimeout(), ln: src}
	serving(src, x.claims) // the client may dial its QPs as soon as it has our Reply
	if err := req.Accept(ctx, ctl.qp, []byte(okReply)); err != nil {
		req.Reject(nil) // what Accept refused before answering (a no-op after)
		ctl.close()
		return nil, &ClientError{Addr: req.RemoteAddr(), Err: fmt.Errorf("control QP: accepting: %w", err)}
	}
	return x, nil
}

// claims reports whether req is a QP of this exchange's test.
func (x *nativeExchange) claims(req *verbs.ConnRequest) bool {
	return bytes.HasPrefix(req.PrivateData, []byte(qpPrefix+strconv.FormatUint(x.session, 10)+" "))
}

func (x *nativeExchange) peer() net.Addr { return x.ctl.peer() }

func (x *nativeExchange) Connect(ctx context.Context, qps []*verbs.QP) error {
	if x.client {
		for i, qp := range qps {
			pd := fmt.Sprintf("%s%d %d", qpPrefix, x.session, i)
			sctx, cancel := step(ctx, x.timeout, "MPA Reply")
			err := qp.Dial(sctx, "tcp", x.addr, withPD(x.cfg, []byte(pd)))
			cancel()
			if err != nil {
				return fmt.Errorf("connecting QP %d: %w", i, causeOf(sctx, err))
			}
		}
		return nil
	}
	{
		for left := len(qps); left > 0; {
			sctx, cancel := step(ctx, x.timeout, fmt.Sprintf("QP %d of %d", len(qps)-left, len(qps)))
			req, err := x.ln.GetRequest(sctx)
			cancel()
			if err != nil {
				return fmt.Errorf("waiting for the client's QPs: %w", causeOf(sctx, err))
			}
			idx := -1
			if s, ok := strings.CutPrefix(string(req.PrivateData), qpPrefix); ok {
				f := strings.Fields(s)
				if len(f) == 2 && f[0] == strconv.FormatUint(x.session, 10) {
					if i, err := strconv.Atoi(f[1]); err == nil && i >= 0 && i < len(qps) && qps[i].State() == verbs.StateIdle {
						idx = i
					}
				}
			}
			if idx < 0 {
				refuseOther(req)
				continue
			}
			if err := req.Accept(ctx, qps[idx], nil); err != nil {
				req.Reject(nil)
				return fmt.Errorf("accepting QP %d: %w", idx, err)
			}
			left--
		}
	}
	return nil
}

func (x *nativeExchange) SwapBufs(ctx context.Context, local []BufInfo) ([]BufInfo, error) {
	var remote []BufInfo
	sctx, cancel := step(ctx, x.timeout, "buffer exchange")
	defer cancel()
	if err := swap(sctx, x.ctl, msgBufs, local, &remote); err != nil {
		return nil, causeOf(sctx, err)
	}
	if len(remote) != len(local) {
		return nil, fmt.Errorf("protocol error: peer describes %d QPs, we have %d", len(remote), len(local))
	}
	return remote, nil
}

func (x *nativeExchange) Sync(ctx context.Context) error {
	return swap(ctx, x.ctl, msgSync, struct{}{}, nil)
}

func (x *nativeExchange) Report(ctx context.Context, mine Report) (Report, error) {
	var peer Report
	err := swap(ctx, x.ctl, msgReport, mine, &peer)
	return peer, err
}

func (x *nativeExchange) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	x.ctl.qp.Disconnect(ctx)
	x.ctl.close()
	return nil
}

// ctlQP is a QP that carries whole messages with Sends: four receive slots
// and one send slot, each ctlSlot octets.
type ctlQP struct {
	cq     *verbs.CQ
	qp     *verbs.QP
	mr     *verbs.MR
	buf    []byte // mr's memory, kept here: Dereg lets go of it
	wcs    [8]verbs.WC
	inbox  [][]byte
	sends  int   // send completions seen
	posted int   // sends posted
	err    error // the first failed completion; messages before it still count
}

const (
	ctlSlot  = 128 << 10 // the buffer records of 1024 QPs (MaxQPs) fit one message
	ctlRecvs = 4
)

func newCtlQP(dev *verbs.Device) (*ctlQP, error) {
	c := &ctlQP{}
	var err error
	if c.cq, err = dev.CreateCQ(64); err != nil {
		return nil, err
	}
	pd := dev.AllocPD()
	c.qp, err = pd.CreateQP(verbs.QPConfig{SendCQ: c.cq, RecvCQ: c.cq, SigAll: true,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: ctlRecvs}, IRD: 1, ORD: 1})
	if err != nil {
		return nil, err
	}
	c.buf = make([]byte, (ctlRecvs+1)*ctlSlot)
	if c.mr, err = pd.RegMR(c.buf, verbs.LocalWrite); err != nil {
		c.qp.Close()
		return nil, err
	}
	for i := range ctlRecvs {
		if _, err := c.qp.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{c.mr.SGE(i*ctlSlot, ctlSlot)}}); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

func (c *ctlQP) close() {
	c.qp.Close()
	c.mr.Dereg()
}

// peer is the address of the QP's peer.
func (c *ctlQP) peer() net.Addr {
	return c.qp.RemoteAddr()
}

// poll takes completions off the CQ, blocking until at least one arrives.
// After a failed completion (the peer closing after the last message
// flushes our receives) it only returns the error.
func (c *ctlQP) poll(ctx context.Context) error {
	if c.err != nil {
		return c.err
	}
	for {
		n := c.cq.Poll(c.wcs[:])
		for _, wc := range c.wcs[:n] {
			if wc.Status != verbs.Success {
				c.err = qpFailure(c.qp, fmt.Errorf("control QP: %v", wc))
				return c.err
			}
			switch wc.Opcode {
			case verbs.WCRecv:
				if len(c.inbox) >= ctlRecvs {
					// The exchanges are in lock-step: a peer is at most one
					// message ahead. One that floods must not grow the inbox.
					c.err = fmt.Errorf("protocol error: the peer sent more than %d messages ahead", ctlRecvs)
					return c.err
				}
				off := int(wc.ID) * ctlSlot
				c.inbox = append(c.inbox, bytes.Clone(c.buf[off:off+int(wc.ByteLen)]))
				if _, err := c.qp.PostRecv(verbs.RecvWR{ID: wc.ID, SGL: []verbs.SGE{c.mr.SGE(off, ctlSlot)}}); err != nil {
					return err
				}
			case verbs.WCSend:
				c.sends++
			}
		}
		if n > 0 {
			return nil
		}
		if err := c.cq.Wait(ctx); err != nil {
			if ctx.Err() == nil {
				err = qpFailure(c.qp, err)
			}
			return err
		}
	}
}

// send posts one message. It waits for the previous message's completion
// (the send slot is reused), not for this one's: the last message of a
// conversation completes while Close disconnects, and a peer that closes as
// soon as it has read it must not turn it into an error.
func (c *ctlQP) send(ctx context.Context, kind byte, payload []byte) error {
	if 1+len(payload) > ctlSlot {
		return fmt.Errorf("control message of %d octets", 1+len(payload))
	}
	for c.sends < c.posted {
		if err := c.poll(ctx); err != nil {
			return err
		}
	}
	off := ctlRecvs * ctlSlot
	buf := c.buf[off:]
	buf[0] = kind
	copy(buf[1:], payload)
	if _, err := c.qp.PostSend(verbs.SendWR{Opcode: verbs.OpSend, SGL: []verbs.SGE{c.mr.SGE(off, 1+len(payload))}}); err != nil {
		return qpFailure(c.qp, err)
	}
	c.posted++
	return nil
}

func (c *ctlQP) recv(ctx context.Context) (byte, []byte, error) {
	for len(c.inbox) == 0 {
		if err := c.poll(ctx); err != nil && len(c.inbox) == 0 {
			return 0, nil, err
		}
	}
	m := c.inbox[0]
	c.inbox = c.inbox[1:]
	if len(m) == 0 {
		return 0, nil, errors.New("protocol error: empty control message")
	}
	return m[0], m[1:], nil
}

// qpFailure returns the reason qp failed, if it has: the Terminate it sent
// or received, or the connection's fate; else err.
// peerClosedError is err on a QP the peer closed: it is also
// verbs.ErrDisconnected.
type peerClosedError struct{ err error }

func (e *peerClosedError) Error() string   { return e.err.Error() + ": the peer closed the connection" }
func (e *peerClosedError) Unwrap() []error { return []error{e.err, verbs.ErrDisconnected} }

func qpFailure(qp *verbs.QP, err error) error {
	select {
	case <-qp.Done():
	case <-time.After(time.Second):
		return err
	}
	if qerr := qp.Err(); qerr != nil {
		if errors.Is(qerr, verbs.ErrDisconnected) {
			return &peerClosedError{err}
		}
		return fmt.Errorf("%w: %w", err, qerr)
	}
	return err
}

func randSession() uint64 {
	var b [8]byte
	randRead(b[:])
	return binary.LittleEndian.Uint64(b[:]) >> 1
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
