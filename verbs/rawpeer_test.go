package verbs

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// A scripted iWARP peer for error-path tests, in the manner of x/net/quic's
// conn_test.go (writeFrames / wantFrame): a plain TCP connection that does
// the MPA start-up by hand, then writes hand-made FPDUs (framed by
// mpa.Writer, so CRCs and markers are right unless a test spoils them on
// purpose) and reads what the stack sends back with mpa.Reader, which also
// checks the stack's CRCs and markers. Every read and write has a deadline,
// so a stack that never answers fails the test instead of hanging it.

// peerTimeout bounds every single step of a raw peer.
const peerTimeout = 5 * time.Second

// rawPeer is one scripted connection to the stack under test.
type rawPeer struct {
	conn   *net.TCPConn
	params mpa.Params // what the start-up agreed, seen from the peer

	out bytes.Buffer // w's sink: stream octets on their way to conn
	w   *mpa.Writer
	r   *mpa.Reader
}

// dialPeer connects to a verbs Listener at addr as the MPA initiator, with
// the start-up policy c. The stack must be accepting (see stack.acceptPeer).
func dialPeer(t testing.TB, addr string, c mpa.Config) *rawPeer {
	t.Helper()
	return dialPeerWith(t, net.Dialer{Timeout: peerTimeout}, addr, c)
}

// dialPeerWith is dialPeer through d (socket options before the connect).
func dialPeerWith(t testing.TB, d net.Dialer, addr string, c mpa.Config) *rawPeer {
	t.Helper()
	nc, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	conn := nc.(*net.TCPConn)
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(peerTimeout))
	if c.P2P == mpa.P2PAuto && c.RTRs == mpa.RTRNone {
		c.P2P = mpa.P2POff // a raw initiator sends no RTR unless a test asks
	}
	req, err := mpa.BuildRequest(c, nil)
	require.NoError(t, err)
	b, err := req.Append(nil)
	require.NoError(t, err)
	_, err = conn.Write(b)
	require.NoError(t, err)
	rep, err := mpa.ReadFrame(conn, true)
	require.NoError(t, err, "reading the stack's MPA Reply")
	p, err := mpa.ConfirmReply(c, req, rep)
	require.NoError(t, err)
	return newRawPeer(conn, p)
}

// answerDial makes a raw peer the MPA responder of qp.Dial: it listens on
// loopback, lets qp dial it with cfg, reads the Request and answers with the
// policy c.
func answerDial(t testing.TB, qp *QP, cfg ConnConfig, c mpa.Config) *rawPeer {
	t.Helper()
	if cfg.FirstFPDUHold == 0 {
		// The Read RTR is answered below, so only that answer may release
		// the held WRs: the default fallback (100 ms) could fire first on a
		// loaded machine and put its nudge in front of what the test reads
		// next.
		cfg.FirstFPDUHold = time.Minute
	}
	rp := answerDialNoRTR(t, qp, cfg, c)
	if rp.params.P2P && rp.params.RTR == mpa.RTRRead {
		// The stack's Read RTR (its default, P2PAuto), answered with the
		// empty Read Response it waits for before it sends anything else.
		rr := rp.wantReadRequest(t, 1)
		require.Zero(t, rr.Size(), "the Read RTR is empty")
		rp.send(t, ddp.AppendTagged(nil, true, rdmap.Ctrl(rdmap.OpReadResponse), rr.SinkSTag(), rr.SinkTO()))
	}
	return rp
}

// answerDialNoRTR is answerDial without the answer to a Read RTR.
func answerDialNoRTR(t testing.TB, qp *QP, cfg ConnConfig, c mpa.Config) *rawPeer {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		err := qp.Dial(ctx, "tcp", ln.Addr().String(), cfg)
		errc <- err
	}()
	ln.SetDeadline(time.Now().Add(peerTimeout))
	conn, err := ln.AcceptTCP()
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(peerTimeout))
	req, err := mpa.ReadFrame(conn, false)
	require.NoError(t, err, "reading the stack's MPA Request")
	rep, p, err := mpa.Respond(c, req, nil)
	require.NoError(t, err)
	b, err := rep.Append(nil)
	require.NoError(t, err)
	_, err = conn.Write(b)
	require.NoError(t, err)
	require.NoError(t, <-errc, "qp.Dial")
	return newRawPeer(conn, p)
}

func newRawPeer(conn *net.TCPConn, p mpa.Params) *rawPeer {
	conn.SetDeadline(time.Time{})
	rp := &rawPeer{conn: conn, params: p}
	rp.w = mpa.NewWriter(&rp.out, p.CRC, p.MarkersTx)
	rp.r = mpa.NewReader(conn, p.CRC, p.MarkersRx, 0, nil)
	return rp
}

// encode frames each ULPDU as one FPDU, with the CRC and markers the
// start-up agreed, and returns the stream octets without sending them. The
// peer's stream position advances as if they had been sent: a test may
// change octets (a bad CRC or marker) or send only a prefix.
func (p *rawPeer) encode(t testing.TB, ulpdus ...[]byte) []byte {
	t.Helper()
	for _, u := range ulpdus {
		require.NoError(t, p.w.Append(nil, u))
	}
	require.NoError(t, p.w.Flush())
	b := bytes.Clone(p.out.Bytes())
	p.out.Reset()
	return b
}

// write sends raw stream octets.
func (p *rawPeer) write(t testing.TB, b []byte) {
	t.Helper()
	p.conn.SetWriteDeadline(time.Now().Add(peerTimeout))
	_, err := p.conn.Write(b)
	require.NoError(t, err)
}

// send sends each ULPDU as one well-formed FPDU, all in one write.
func (p *rawPeer) send(t testing.TB, ulpdus ...[]byte) {
	t.Helper()
	p.write(t, p.encode(t, ulpdus...))
}

// closeWrite half-closes the peer's direction (FIN).
func (p *rawPeer) closeWrite(t testing.TB) {
	t.Helper()
	require.NoError(t, p.conn.CloseWrite())
}

func (p *rawPeer) close() { p.conn.Close() }

// next reads the next FPDU from the stack, checks its CRC (and markers) and
// returns a copy of its ULPDU. At a clean end of stream it returns io.EOF.
func (p *rawPeer) next() ([]byte, error) {
	p.conn.SetReadDeadline(time.Now().Add(peerTimeout))
	n, err := p.r.Next()
	if err != nil {
		return nil, err
	}
	u := make([]byte, n)
	if err := p.r.ReadFull(u); err != nil {
		return nil, err
	}
	if err := p.r.Finish(); err != nil {
		return nil, fmt.Errorf("FPDU from the stack: %w", err)
	}
	return u, nil
}

// wantULPDU reads the next FPDU and returns its ULPDU.
func (p *rawPeer) wantULPDU(t testing.TB, why string) []byte {
	t.Helper()
	u, err := p.next()
	require.NoError(t, err, "want %s", why)
	return u
}

// wantReadRequest reads an RDMA Read Request with the given MSN and returns
// its Read Request header (RFC 5040 section 4.4).
func (p *rawPeer) wantReadRequest(t testing.TB, msn uint32) rdmap.ReadRequest {
	t.Helper()
	u := p.wantULPDU(t, "an RDMA Read Request")
	require.Len(t, u, ddp.UntaggedHdrLen+rdmap.ReadRequestLen, "Read Request: %x", u)
	h := ddp.Untagged(u)
	require.Equal(t, byte(0x41), u[0], "DDP control: untagged, L, DV 1")
	require.Equal(t, rdmap.Ctrl(rdmap.OpReadRequest), h.ULPCtrl())
	require.Equal(t, rdmap.QNReadRequest, h.QN())
	require.Equal(t, msn, h.MSN())
	require.Zero(t, h.MO())
	return rdmap.ReadRequest(u[ddp.UntaggedHdrLen:])
}

// terminateULPDU is the Terminate message the stack must send for want,
// encoded here independently of rdmap.Terminate.Append.
//
// Untagged DDP header (RFC 5041 section 4.3; RFC 5040 section 4.8 and
// Appendix A): DDP control 0x41 (T=0 untagged, L=1, DV=1 — not 0xC1, which
// would be tagged), RDMAP control 0x47 (RV=1, opcode 7), RsvdULP[8:39] zero,
// QN 2, MSN 1 (the first and only message on the Terminate queue, RFC 5041
// section 4.3), MO 0. Then the Terminate header (RFC 5040 section 4.8,
// Figure 7): Layer in the high nibble of the first octet, EType in the low
// one, the error code, M (0x80), D (0x40) and R (0x20) in the third octet,
// reserved zero; with D the DDP Segment Length and the terminated DDP header,
// with R the 28-octet Read Request header.
func terminateULPDU(want rdmap.Terminate) []byte {
	b := []byte{
		0x41, 0x47,
		0, 0, 0, 0, // RsvdULP[8:39]
		0, 0, 0, 2, // QN
		0, 0, 0, 1, // MSN
		0, 0, 0, 0, // MO
	}
	var hc byte
	if want.M {
		hc |= 0x80
	}
	if want.D {
		hc |= 0x40
	}
	if want.R {
		hc |= 0x20
	}
	b = append(b, byte(want.Layer)<<4|want.EType&0x0f, want.Code, hc, 0)
	if want.D {
		b = binary.BigEndian.AppendUint16(b, want.SegLen)
		b = append(b, want.DDPHdr...)
	}
	if want.R {
		b = append(b, want.RDMAPHdr...)
	}
	return b
}

// wantTerminate reads the next FPDU and requires it to be exactly the
// Terminate message for want.
func (p *rawPeer) wantTerminate(t testing.TB, want rdmap.Terminate) {
	t.Helper()
	p.wantTerminateAfter(t, nil, want)
}

// wantTerminateAfter is wantTerminate, skipping FPDUs for which skip is true
// (Read Response segments the stack had under way, say).
func (p *rawPeer) wantTerminateAfter(t testing.TB, skip func(u []byte) bool, want rdmap.Terminate) {
	t.Helper()
	var u []byte
	for {
		u = p.wantULPDU(t, "a Terminate ("+want.Cause().String()+")")
		if skip == nil || !skip(u) {
			break
		}
	}
	w := terminateULPDU(want)
	if !bytes.Equal(w, u) {
		got := "(not a Terminate)"
		if len(u) >= ddp.UntaggedHdrLen && u[1]&0x0f == byte(rdmap.OpTerminate) {
			if tm, err := rdmap.ParseTerminate(u[ddp.UntaggedHdrLen:]); err == nil {
				got = tm.Cause().String()
			} else {
				got = err.Error()
			}
		}
		t.Fatalf("Terminate ULPDU differs\nwant %s:\n%s\ngot %s:\n%s", want.Cause(), hex.Dump(w), got, hex.Dump(u))
	}
}

// wantNothing requires the stack to send nothing for d.
func (p *rawPeer) wantNothing(t testing.TB, d time.Duration, why string) {
	t.Helper()
	p.conn.SetReadDeadline(time.Now().Add(d))
	n, err := p.r.Next()
	if err == nil {
		u := make([]byte, n)
		p.r.ReadFull(u)
		t.Fatalf("%s; got an FPDU:\n%s", why, hex.Dump(u))
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("%s; got %v", why, err)
	}
}

// wantClosed requires the stack to end its direction of the stream without
// sending another FPDU: nothing follows a Terminate on the stream (RFC 5040
// section 5.4, Terminate Message), so after sending one the stack
// half-closes, and after receiving one it closes.
func (p *rawPeer) wantClosed(t testing.TB) {
	t.Helper()
	u, err := p.next()
	if err == nil {
		t.Fatalf("want end of stream, got an FPDU:\n%s", hex.Dump(u))
	}
	require.ErrorIs(t, err, io.EOF, "want end of stream (FIN), not a reset or a timeout")
}

// Hand-made ULPDUs.

// writeULPDU is an RDMA Write segment (L set) of payload to stag at to.
func writeULPDU(stag uint32, to uint64, payload []byte) []byte {
	return append(ddp.AppendTagged(nil, true, rdmap.Ctrl(rdmap.OpWrite), stag, to), payload...)
}

// sendULPDU is an untagged segment with opcode op (a Send variant, usually).
func sendULPDU(op rdmap.Opcode, inv, qn, msn, mo uint32, last bool, payload []byte) []byte {
	return append(ddp.AppendUntagged(nil, last, rdmap.Ctrl(op), inv, qn, msn, mo), payload...)
}

// readReqULPDU is an RDMA Read Request with MSN msn.
func readReqULPDU(msn, sinkSTag uint32, sinkTO uint64, size, srcSTag uint32, srcTO uint64) []byte {
	b := ddp.AppendUntagged(nil, true, rdmap.Ctrl(rdmap.OpReadRequest), 0, rdmap.QNReadRequest, msn, 0)
	return rdmap.AppendReadRequest(b, sinkSTag, sinkTO, size, srcSTag, srcTO)
}

// Expected Terminates.

// ddpTerm is a DDP tagged or untagged buffer error on segment u: M and D,
// the DDP Segment Length (the whole segment, as RFC 5041 section 7.1 reports
// it: "the length of the DDP segment") and its DDP header (RFC 5040 section
// 4.8, Figure 10).
func ddpTerm(et ddp.EType, code uint8, u []byte) rdmap.Terminate {
	return rdmap.Terminate{Layer: rdmap.LayerDDP, EType: uint8(et), Code: code,
		M: true, D: true, SegLen: uint16(len(u)), DDPHdr: u[:ddp.HdrLen(u[0]&ddp.FlagTagged != 0)]}
}

// rdmapTerm is an RDMAP error on segment u; for a remote protection error on
// a Read Request, R and the Read Request header too (RFC 5040 Figure 10).
func rdmapTerm(et, code uint8, u []byte) rdmap.Terminate {
	tagged := u[0]&ddp.FlagTagged != 0
	t := rdmap.Terminate{Layer: rdmap.LayerRDMAP, EType: et, Code: code,
		M: true, D: true, SegLen: uint16(len(u)), DDPHdr: u[:ddp.HdrLen(tagged)]}
	if et == rdmap.ETypeRemoteProtection && !tagged && rdmap.CtrlOpcode(u[1]) == rdmap.OpReadRequest {
		t.R, t.RDMAPHdr = true, u[ddp.UntaggedHdrLen:ddp.UntaggedHdrLen+rdmap.ReadRequestLen]
	}
	return t
}

// llpTerm is an MPA error: no headers (RFC 5040 Figure 10, RFC 5044 section 8).
func llpTerm(code mpa.LLPCode) rdmap.Terminate {
	return rdmap.Terminate{Layer: rdmap.LayerLLP, EType: rdmap.ETypeMPA, Code: uint8(code)}
}

// The stack under test: a device with a listener that hands each connection
// to a fresh QP.

type stackSide struct {
	dev *Device
	pd  *PD
	ln  *Listener
}

func newStackSide(t *testing.T, cfg ConnConfig) *stackSide {
	t.Helper()
	s := &stackSide{dev: openDev(DeviceAttr{})}
	s.pd = s.dev.AllocPD()
	var err error
	s.ln, err = s.dev.Listen(context.Background(), "tcp", "127.0.0.1:0", cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.ln.Close() })
	return s
}

// stackQP is a QP of the stack with its CQs.
type stackQP struct {
	qp       *QP
	scq, rcq *CQ
}

func (s *stackSide) newQP(t *testing.T, ird, ord int) *stackQP {
	t.Helper()
	q := &stackQP{}
	var err error
	q.scq, err = s.dev.CreateCQ(256)
	require.NoError(t, err)
	q.rcq, err = s.dev.CreateCQ(256)
	require.NoError(t, err)
	q.qp, err = s.pd.CreateQP(QPConfig{SendCQ: q.scq, RecvCQ: q.rcq, IRD: ird, ORD: ord,
		Cap: QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 64}})
	require.NoError(t, err)
	t.Cleanup(func() { q.qp.Close() })
	return q
}

// acceptPeer accepts the next connection on the listener with q while a raw
// peer with start-up policy c dials in.
func (s *stackSide) acceptPeer(t *testing.T, q *stackQP, c mpa.Config) *rawPeer {
	t.Helper()
	errc := s.acceptAsync(q)
	p := dialPeer(t, s.ln.Addr().String(), c)
	require.NoError(t, <-errc, "Accept")
	return p
}

func (s *stackSide) acceptAsync(q *stackQP) <-chan error {
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
		defer cancel()
		req, err := s.ln.GetRequest(ctx)
		if err == nil {
			err = req.Accept(ctx, q.qp, nil)
		}
		errc <- err
	}()
	return errc
}

// wantServes checks that the listener still accepts and serves a good
// connection: a verbs client dials, sends, and the message arrives.
func (s *stackSide) wantServes(t *testing.T) {
	t.Helper()
	srv := s.newQP(t, 0, 0)
	rb := make([]byte, 16)
	rmr, err := s.pd.RegMR(rb, LocalWrite)
	require.NoError(t, err)
	_, err = srv.qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{rmr.SGE(0, 16)}})
	require.NoError(t, err)

	cdev := openDev(DeviceAttr{})
	cpd := cdev.AllocPD()
	cq, err := cdev.CreateCQ(16)
	require.NoError(t, err)
	cqp, err := cpd.CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxInline: 64}})
	require.NoError(t, err)
	defer cqp.Close()
	errc := s.acceptAsync(srv)
	ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
	defer cancel()
	err = cqp.Dial(ctx, "tcp", s.ln.Addr().String(), ConnConfig{})
	require.NoError(t, err, "a good client after the bad one")
	require.NoError(t, <-errc)
	_, err = cqp.PostSend(SendWR{ID: 2, Opcode: OpSend, Flags: Signaled | Inline, InlineData: []byte("still serving")})
	require.NoError(t, err)
	wc := waitWC(t, cq)
	require.Equal(t, Success, wc.Status, "client send: %v", wc)
	wc = waitWC(t, srv.rcq)
	require.Equal(t, Success, wc.Status, "server receive: %v", wc)
	require.Equal(t, "still serving", string(rb[:wc.ByteLen]))
	require.NoError(t, cqp.Disconnect(ctx))
	waitDone(t, srv.qp, peerTimeout)
}

// waitWC waits for one completion on cq.
func waitWC(t testing.TB, cq *CQ) WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
	defer cancel()
	var wc [1]WC
	for cq.Poll(wc[:]) == 0 {
		require.NoError(t, cq.Wait(ctx), "waiting for a completion")
	}
	return wc[0]
}

// drainWC returns every completion queued on cq (the QP is done: nothing
// more comes).
func drainWC(cq *CQ) []WC {
	var all []WC
	var wc [16]WC
	for {
		n := cq.Poll(wc[:])
		if n == 0 {
			return all
		}
		all = append(all, wc[:n]...)
	}
}

// guarded is a registered region with guard octets on both sides: it is a
// sub-slice of a larger buffer filled with a pattern, so that any octet
// placed outside the region (or inside it, when nothing may be placed) shows.
type guarded struct {
	all  []byte
	off  int
	n    int
	orig []byte
	mr   *MR
}

const guardLen = 64

func regGuarded(t testing.TB, pd *PD, n int, acc Access) *guarded {
	t.Helper()
	g := &guarded{all: make([]byte, guardLen+n+guardLen), off: guardLen, n: n}
	for i := range g.all {
		g.all[i] = byte(0xa5 ^ i*7)
	}
	g.orig = bytes.Clone(g.all)
	var err error
	g.mr, err = pd.RegMR(g.all[g.off:g.off+n], acc)
	require.NoError(t, err)
	return g
}

// region returns the registered octets.
func (g *guarded) region() []byte { return g.all[g.off : g.off+g.n] }

// requireGuards checks the octets around the region.
func (g *guarded) requireGuards(t testing.TB, name string) {
	t.Helper()
	for i := range g.all {
		if (i < g.off || i >= g.off+g.n) && g.all[i] != g.orig[i] {
			t.Fatalf("%s: octet %d outside the registered region changed (%d before the region)", name, i, g.off-i)
		}
	}
}

// requireUntouched checks the region and its guards.
func (g *guarded) requireUntouched(t testing.TB, name string) {
	t.Helper()
	g.requireGuards(t, name)
	if i := firstDiff(g.all, g.orig); i >= 0 {
		t.Fatalf("%s: octet %d of the region changed, though nothing may be placed", name, i-g.off)
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// waitDone waits for qp to reach ERROR with everything flushed.
func waitDone(t testing.TB, qp *QP, within time.Duration) {
	t.Helper()
	select {
	case <-qp.Done():
	case <-time.After(within):
		t.Fatalf("QP still %s after %v", qp.State(), within)
	}
	require.Equal(t, StateError, qp.State())
}

// termErr returns qp.Err() as a *TerminateError.
func termErr(t testing.TB, qp *QP) *TerminateError {
	t.Helper()
	var te *TerminateError
	if !errors.As(qp.Err(), &te) {
		t.Fatalf("qp.Err() = %v (%T), want a *TerminateError", qp.Err(), qp.Err())
	}
	return te
}
