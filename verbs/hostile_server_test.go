package verbs

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// The hostile SERVER suite. scripted_test.go attacks the stack as the
// responder of a connection; a Go program that dials a server across the
// Internet must survive a malicious server just as well. Here the stack's QP
// dials (qp.Dial) and a raw peer (rawpeer_test.go) is the MPA responder: it
// answers the Request with a Reply of its own making, then writes hand-made
// FPDUs at the QP that dialled it. Each case checks, as scripted_test.go
// does,
//
//   - the exact Terminate the stack sends back (layer, error type, code and
//     the headers RFC 5040 Figure 10 asks for), then its half-close; or, for
//     a Terminate the server sends, that the stack answers it with nothing
//     but the end of its stream (RFC 5040 section 5.4: a received Terminate is never echoed)
//     and records it in qp.Err() as a *TerminateError with Remote set;
//   - the QP's state (ERROR) and qp.Err();
//   - that outstanding work requests (an RDMA Read the server never
//     answered and a fenced Send held behind it, atomics, receives)
//     complete with WRFlushErr, and later ones flush at once;
//   - that no octet of the stack's memory changed where it must not: every
//     region lies between guard octets (regGuarded), and a region the attack
//     aims at must be entirely untouched unless the RFCs allow placement;
//   - that no goroutine is left behind (checkRoutines).
//
// TestHostileDial (startup_dial_test.go) already covers most bad MPA
// Replies; TestHostileServerReply adds the ones it lacks, and
// TestHostileServerIRDORD the IRD/ORD lies, checked in the data phase. The
// rest are data-phase attacks on an initiator QP.
//
// Every case that fails shows an engine bug: the expectations are the RFCs',
// with the rule cited at the case, not the engine's current behaviour.
//
// This file is the harness; the scenarios are in hostile_server_*_test.go
// by class: startup, responses, data, terminate.

// hostileDialCfg is the ConnConfig of every qp.Dial in this file, so that a
// change of defaults (peer-to-peer mode and its RTR, say) is made in one
// place. ext turns on the RFC 7306 extensions, which MPA cannot negotiate:
// the raw server speaks them whenever a case asks. The raw server answers
// a Read RTR (takeRTR) or keeps it on purpose, so only that answer may
// release the held WRs: FirstFPDUHold's default fallback (100 ms) could
// fire first on a loaded machine and put its nudge in front of what a case
// reads next.
func hostileDialCfg(ext bool) ConnConfig {
	return ConnConfig{RFC7306: ext, FirstFPDUHold: time.Minute}
}

// hostileRespCfg is the start-up policy the raw server answers every Request
// with (through mpa.Respond) before a case bends the Reply.
func hostileRespCfg() mpa.Config {
	return mpa.Config{IRD: 8, ORD: 8}
}

// serveOpts configure the raw server's start-up.
type serveOpts struct {
	cfg     ConnConfig                          // the stack's Dial configuration: hostileDialCfg
	resp    mpa.Config                          // the server's policy: hostileRespCfg
	pd      []byte                              // ULP private data in the Reply
	reply   func(rep *mpa.Frame, p *mpa.Params) // bends the Reply (and what the server takes as agreed)
	after   func(rep []byte) []byte             // octets sent right behind the Reply, in the same write
	keepRTR bool                                // leave a Read RTR unanswered (hostileServer.rtr)
}

// hostileServer is a raw peer that answered qp.Dial.
type hostileServer struct {
	*rawPeer
	pd      []byte            // the private data Dial returned
	readMSN uint32            // the MSN of the stack's next Read or Atomic Request (QN 1)
	rtr     rdmap.ReadRequest // with keepRTR: the stack's Read RTR, unanswered
}

// serveDial lets qp dial a raw server that answers as o says, and returns it
// once Dial has succeeded. In peer-to-peer mode it takes the stack's RTR
// first (and answers a Read RTR), so that the case starts with nothing
// outstanding; unless octets follow the Reply, which the stack may meet
// before or after it sent its RTR.
func serveDial(t *testing.T, qp *QP, o serveOpts) *hostileServer {
	t.Helper()
	conn, req, res := rawResponder(t, qp, o.cfg, peerTimeout, 0)
	rep, p, err := mpa.Respond(o.resp, req, o.pd)
	require.NoError(t, err, "the raw server's Reply")
	if o.reply != nil {
		o.reply(&rep, &p)
	}
	b, err := rep.Append(nil)
	require.NoError(t, err)
	if o.after != nil {
		b = append(b, o.after(bytes.Clone(b))...)
	}
	rawWrite(t, conn, b)
	r := dialOutcome(t, res)
	require.NoError(t, r.err, "Dial")
	s := &hostileServer{rawPeer: newRawPeer(conn, p), pd: r.pd, readMSN: 1}
	if o.after != nil {
		return s // the stack may be past RTS already
	}
	require.Equal(t, StateRTS, qp.State())
	switch {
	case p.P2P && o.keepRTR && p.RTR == mpa.RTRRead:
		_, s.rtr = s.wantRead(t)
		require.Zero(t, s.rtr.Size(), "the Read RTR is empty")
	case p.P2P:
		s.takeRTR(t)
	}
	return s
}

// takeRTR reads the stack's RTR message (RFC 6581 section 9.2), a zero-length
// message of the agreed kind, and answers a Read RTR with its zero-length
// Read Response.
func (s *hostileServer) takeRTR(t *testing.T) {
	t.Helper()
	u := s.wantULPDU(t, "the RTR message")
	switch s.params.RTR {
	case mpa.RTRWrite:
		require.Equal(t, writeULPDU(rtrSTag, 0, nil), u, "the Write RTR")
	case mpa.RTRSend:
		require.Equal(t, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, nil), u, "the Send RTR")
	case mpa.RTRRead:
		require.Len(t, u, ddp.UntaggedHdrLen+rdmap.ReadRequestLen, "the Read RTR")
		rr := rdmap.ReadRequest(u[ddp.UntaggedHdrLen:])
		require.Equal(t, readReqULPDU(1, rr.SinkSTag(), rr.SinkTO(), 0, rr.SrcSTag(), rr.SrcTO()), u, "the Read RTR")
		s.send(t, writeULPDUOp(rdmap.OpReadResponse, rr.SinkSTag(), rr.SinkTO()))
		s.readMSN++
	default:
		t.Fatalf("peer-to-peer with RTR %v", s.params.RTR)
	}
}

// isRTR reports whether u is a zero-length RTR message of any kind.
func isRTR(u []byte) bool {
	if len(u) == ddp.UntaggedHdrLen+rdmap.ReadRequestLen && u[0]&ddp.FlagTagged == 0 &&
		rdmap.CtrlOpcode(u[1]) == rdmap.OpReadRequest && ddp.Untagged(u).MSN() == 1 &&
		rdmap.ReadRequest(u[ddp.UntaggedHdrLen:]).Size() == 0 {
		return true
	}
	return bytes.Equal(u, writeULPDU(rtrSTag, 0, nil)) ||
		bytes.Equal(u, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, nil))
}

// wantRead reads the stack's next RDMA Read Request and returns it whole
// (DDP header and all) and its Read Request header.
func (s *hostileServer) wantRead(t *testing.T) ([]byte, rdmap.ReadRequest) {
	t.Helper()
	rr := rdmap.ReadRequest(bytes.Clone(s.wantReadRequest(t, s.readMSN)))
	u := readReqULPDU(s.readMSN, rr.SinkSTag(), rr.SinkTO(), rr.Size(), rr.SrcSTag(), rr.SrcTO())
	s.readMSN++
	return u, rdmap.ReadRequest(u[ddp.UntaggedHdrLen:])
}

// wantAtomic reads the stack's next Atomic Request (RFC 7306 section 5.2.1:
// untagged, QN 1, sharing the MSNs of Read Requests).
func (s *hostileServer) wantAtomic(t *testing.T) rdmap.AtomicRequest {
	t.Helper()
	u := s.wantULPDU(t, "an Atomic Request")
	require.Len(t, u, ddp.UntaggedHdrLen+rdmap.AtomicRequestLen, "Atomic Request: %x", u)
	h := ddp.Untagged(u)
	require.Equal(t, byte(0x41), u[0], "DDP control: untagged, L, DV 1")
	require.Equal(t, rdmap.Ctrl(rdmap.OpAtomicRequest), h.ULPCtrl())
	require.Equal(t, rdmap.QNReadRequest, h.QN())
	require.Equal(t, s.readMSN, h.MSN())
	s.readMSN++
	return rdmap.AtomicRequest(u[ddp.UntaggedHdrLen:])
}

// rrULPDU is a Read Response segment.
func rrULPDU(stag uint32, to uint64, last bool, payload []byte) []byte {
	return append(ddp.AppendTagged(nil, last, rdmap.Ctrl(rdmap.OpReadResponse), stag, to), payload...)
}

// atomicRespULPDU is an Atomic Response (RFC 7306 section 5.2.2): untagged,
// QN 3, with the Request Identifier and the original value.
func atomicRespULPDU(msn, reqID uint32, orig uint64) []byte {
	return sendULPDU(rdmap.OpAtomicResponse, 0, rdmap.QNAtomicResponse, msn, 0, true,
		rdmap.AppendAtomicResponse(nil, reqID, orig))
}

// lieIRDORD rewrites the IRD and ORD of an enhanced Reply, keeping its
// flags (A and the chosen RTR) and the ULP private data after the word.
func lieIRDORD(t *testing.T, ird, ord uint16) func(rep *mpa.Frame, p *mpa.Params) {
	return func(rep *mpa.Frame, p *mpa.Params) {
		v, err := rep.IRDORD()
		require.NoError(t, err, "the Reply has an IRD/ORD word")
		v.IRD, v.ORD = ird, ord
		rep.PrivateData = append(v.Append(nil), rep.PrivateData[mpa.IRDORDLen:]...)
	}
}

// declineP2P makes an enhanced Reply client-server: no A, no RTR. An
// initiator that offered peer-to-peer mode on its own (mpa.P2PAuto) goes
// on without it; one that required it would refuse.
func declineP2P(t *testing.T, rep *mpa.Frame, p *mpa.Params) {
	v, err := rep.IRDORD()
	require.NoError(t, err, "the Reply has an IRD/ORD word")
	v.P2P, v.RTR = false, mpa.RTRNone
	rep.PrivateData = append(v.Append(nil), rep.PrivateData[mpa.IRDORDLen:]...)
	p.P2P, p.RTR = false, mpa.RTRNone
}

// describeULPDU names what the stack sent, for failure messages.
func describeULPDU(u []byte) string {
	if len(u) >= ddp.UntaggedHdrLen && u[0]&ddp.FlagTagged == 0 && rdmap.CtrlOpcode(u[1]) == rdmap.OpTerminate {
		if tm, err := rdmap.ParseTerminate(u[ddp.UntaggedHdrLen:]); err == nil {
			return "a Terminate (" + tm.Cause().String() + ")"
		}
		return "a malformed Terminate"
	}
	return "an FPDU"
}

// hsOpts configure one scenario.
type hsOpts struct {
	ext      bool // RFC 7306 on both ends
	recvs    int  // receives posted before Dial (IDs 1..recvs, 64 octets each)
	read     bool // an RDMA Read (32 octets) and a fenced Send outstanding
	ird, ord int  // the stack QP's limits (0: device maximum)
	serve    func(o *serveOpts)
}

// hsScenario is a stack QP that dialled a raw server, with memory to aim at
// and work outstanding.
type hsScenario struct {
	st    *stackSide // the stack's device and PD (no listener)
	q     *stackQP
	p     *hostileServer
	dst   *guarded // LocalWrite|RemoteWrite|RemoteRead, a legitimate target
	sink  *guarded // the outstanding Read's sink (LocalWrite only)
	rbuf  *guarded // the receive buffers
	recvs int

	readU   []byte            // the stack's outstanding Read Request, whole
	readReq rdmap.ReadRequest // and its Read Request header

	wantSend []string // send completions at the end, in order
	regions  []*guarded
	names    []string
	mayPlace map[*guarded]bool // written by a legal or half-legal FPDU: guards only
}

const recvLen = 64

func startHS(t *testing.T, o hsOpts) *hsScenario {
	t.Helper()
	dev := openDev(DeviceAttr{})
	s := &hsScenario{st: &stackSide{dev: dev, pd: dev.AllocPD()}, recvs: o.recvs, mayPlace: map[*guarded]bool{}}
	s.q = s.st.newQP(t, o.ird, o.ord)
	s.dst = s.region(t, "target region", s.st.pd, 4096, LocalWrite|RemoteWrite|RemoteRead)
	if o.recvs > 0 {
		s.rbuf = s.region(t, "receive buffers", s.st.pd, o.recvs*recvLen, LocalWrite)
		for i := 0; i < o.recvs; i++ {
			_, err := s.q.qp.PostRecv(RecvWR{ID: uint64(i + 1), SGL: []SGE{s.rbuf.mr.SGE(i*recvLen, recvLen)}})
			require.NoError(t, err)
		}
	}
	so := serveOpts{cfg: hostileDialCfg(o.ext), resp: hostileRespCfg()}
	if o.serve != nil {
		o.serve(&so)
	}
	s.p = serveDial(t, s.q.qp, so)
	if o.read {
		s.sink = s.region(t, "Read sink", s.st.pd, 32, LocalWrite)
		_, err := s.q.qp.PostSend(
			SendWR{ID: readWRID, Opcode: OpRDMARead, Flags: Signaled, SGL: []SGE{s.sink.mr.SGE(0, 32)},
				RemoteAddr: 0x1000, RKey: 0x1234},
			SendWR{ID: fencedWRID, Opcode: OpSend, Flags: Signaled | Fence | Inline, InlineData: []byte("fenced")})
		require.NoError(t, err)
		s.readU, s.readReq = s.p.wantRead(t)
		require.Equal(t, s.sink.mr.RKey(), s.readReq.SinkSTag())
		require.Equal(t, s.sink.mr.Addr(), s.readReq.SinkTO())
		require.Equal(t, uint32(32), s.readReq.Size())
		s.expectSend(readWRID, WCRDMARead, WRFlushErr)
		s.expectSend(fencedWRID, WCSend, WRFlushErr)
	}
	return s
}

func (s *hsScenario) region(t *testing.T, name string, pd *PD, n int, acc Access) *guarded {
	t.Helper()
	g := regGuarded(t, pd, n, acc)
	s.regions = append(s.regions, g)
	s.names = append(s.names, name)
	return g
}

func (s *hsScenario) expectSend(id uint64, op WCOpcode, st WCStatus) {
	s.wantSend = append(s.wantSend, wcString(id, op, st))
}

// postAtomic posts a signaled Fetch-and-Add whose original value lands in
// res, and returns the Atomic Request the server got.
func (s *hsScenario) postAtomic(t *testing.T, id uint64, res *guarded) rdmap.AtomicRequest {
	t.Helper()
	_, err := s.q.qp.PostSend(SendWR{ID: id, Opcode: OpAtomicFetchAdd, Flags: Signaled, SGL: []SGE{res.mr.SGE(0, 8)},
		RemoteAddr: 0x2000, RKey: 0x5678, CompareAdd: 1})
	require.NoError(t, err)
	return rdmap.AtomicRequest(bytes.Clone(s.p.wantAtomic(t)))
}

// wantTerminate reads the Terminate for want and checks all that follows.
// recv are the statuses of the posted receives, in order; the ones not given
// must be WRFlushErr.
func (s *hsScenario) wantTerminate(t *testing.T, want rdmap.Terminate, recv ...WCStatus) {
	t.Helper()
	s.p.wantTerminate(t, want)
	s.finishLocal(t, want, recv...)
}

// finishLocal checks the rest after the stack sent the Terminate for want.
func (s *hsScenario) finishLocal(t *testing.T, want rdmap.Terminate, recv ...WCStatus) {
	t.Helper()
	s.p.wantClosed(t) // the stack half-closes after its Terminate
	s.p.close()
	qp := s.q.qp
	waitDone(t, qp, peerTimeout)
	te := termErr(t, qp)
	require.False(t, te.Remote, "qp.Err() = %v: a Terminate we sent", te)
	require.Equal(t, want, te.Terminate, "qp.Err().Terminate")
	require.Error(t, te.Err, "the local error behind the Terminate")
	require.Equal(t, want.Cause(), rdmap.CauseOf(te.Err), "cause of %v", te.Err)
	s.checkAfter(t, recv)
}

// wantRemoteTerminate checks the outcome of a Terminate the server sent:
// the stack sends nothing back, only the end of its stream (with resetOK, a
// reset will do: the stack may close with the server's later octets unread),
// and qp.Err() is the server's Terminate as decoded.
func (s *hsScenario) wantRemoteTerminate(t *testing.T, want rdmap.Terminate, resetOK bool) {
	t.Helper()
	u, err := s.p.next()
	if err == nil {
		t.Fatalf("the stack answered the server's Terminate with %s:\n%s", describeULPDU(u), hex.Dump(u))
	}
	if !resetOK || !errors.Is(err, syscall.ECONNRESET) {
		require.ErrorIs(t, err, io.EOF, "want the end of the stack's stream and nothing before it")
	}
	s.p.close()
	qp := s.q.qp
	waitDone(t, qp, peerTimeout)
	te := termErr(t, qp)
	require.True(t, te.Remote, "qp.Err() = %v: the server's Terminate", te)
	require.Equal(t, want, te.Terminate, "the decoded Terminate")
	if st := readBlame(want); st != WRFlushErr {
		for i, w := range s.wantSend {
			if w == wcString(readWRID, WCRDMARead, WRFlushErr) {
				s.wantSend[i] = wcString(readWRID, WCRDMARead, st)
			}
		}
	}
	s.checkAfter(t, nil)
}

// readBlame is how our outstanding Read completes after a peer's Terminate
// t: as ibverbs reports the request that failed, with a remote status when
// t names our Read Request (R with its header, or an untagged DDP header on
// QN 1) — RemAccessErr for a remote protection error, RemInvReqErr for a
// DDP error, RemOpErr for the rest — and flushed otherwise.
func readBlame(t rdmap.Terminate) WCStatus {
	onQN1 := len(t.DDPHdr) >= ddp.UntaggedHdrLen && t.DDPHdr[0]&ddp.FlagTagged == 0 && binary.BigEndian.Uint32(t.DDPHdr[6:]) == rdmap.QNReadRequest
	switch {
	case !(t.R && len(t.RDMAPHdr) == rdmap.ReadRequestLen) && !onQN1:
		return WRFlushErr
	case t.Layer == rdmap.LayerRDMAP && t.EType == rdmap.ETypeRemoteProtection:
		return RemAccessErr
	case t.Layer == rdmap.LayerDDP:
		return RemInvReqErr
	}
	return RemOpErr
}

// checkAfter checks completions, memory and later posts.
func (s *hsScenario) checkAfter(t *testing.T, recv []WCStatus) {
	t.Helper()
	qp := s.q.qp
	var gotS []string
	for _, wc := range drainWC(s.q.scq) {
		gotS = append(gotS, wcOf(wc))
	}
	require.Equal(t, s.wantSend, gotS, "send completions")
	var wantR, gotR []string
	for i := 0; i < s.recvs; i++ {
		st := WRFlushErr
		if i < len(recv) {
			st = recv[i]
		}
		wantR = append(wantR, wcString(uint64(i+1), WCRecv, st))
	}
	for _, wc := range drainWC(s.q.rcq) {
		gotR = append(gotR, wcOf(wc))
	}
	require.Equal(t, wantR, gotR, "receive completions")
	for i, g := range s.regions {
		if s.mayPlace[g] {
			g.requireGuards(t, s.names[i])
		} else {
			g.requireUntouched(t, s.names[i])
		}
	}
	// In ERROR, new work requests flush at once.
	_, err := qp.PostSend(SendWR{ID: 200, Opcode: OpSend, Flags: Signaled | Inline, InlineData: []byte("late")})
	require.NoError(t, err)
	require.Equal(t, wcString(200, WCSend, WRFlushErr), wcOf(waitWC(t, s.q.scq)))
	_, err = qp.PostRecv(RecvWR{ID: 201})
	require.NoError(t, err)
	require.Equal(t, wcString(201, WCRecv, WRFlushErr), wcOf(waitWC(t, s.q.rcq)))
}

// wantOrderlyEnd closes the server's direction and requires the stack to
// close too, with qp.Err() ErrDisconnected: the case left the QP healthy.
func (s *hsScenario) wantOrderlyEnd(t *testing.T) {
	t.Helper()
	s.p.closeWrite(t)
	s.p.wantClosed(t)
	s.p.close()
	waitDone(t, s.q.qp, peerTimeout)
	require.ErrorIs(t, s.q.qp.Err(), ErrDisconnected)
}
