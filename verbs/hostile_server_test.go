package verbs

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
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
//     but the end of its stream (RFC 5040 section 5.4; STYLE.md practice 7)
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
// TestHostileDial (startup_hostile_test.go) already covers most bad MPA
// Replies; TestHostileServerReply adds the ones it lacks, and
// TestHostileServerIRDORD the IRD/ORD lies, checked in the data phase. The
// rest are data-phase attacks on an initiator QP.
//
// Every case that fails shows an engine bug: the expectations are the RFCs',
// with the rule cited at the case, not the engine's current behaviour.

// hostileDialCfg is the ConnConfig of every qp.Dial in this file, so that a
// change of defaults (peer-to-peer mode and its RTR, say) is made in one
// place. ext turns on the RFC 7306 extensions, which MPA cannot negotiate:
// the raw server speaks them whenever a case asks.
func hostileDialCfg(ext bool) ConnConfig {
	return ConnConfig{RFC7306: ext}
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

// MPA Replies that TestHostileDial does not cover (RFC 5044 section 7.1,
// RFC 6581).
func TestHostileServerReply(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	t.Run("Reply followed by garbage in the same write", func(t *testing.T) {
		// RFC 5044 section 7.1.2: after the Reply the stream is FPDUs. The
		// garbage reads as an FPDU of 65535 octets whose DDP control octet
		// 0xff is tagged with DV 3: DDP tagged buffer error 0x04, invalid
		// DDP version (RFC 5041 section 7.2), with the 14 octets after the
		// length as its DDP header. Nothing of it is placed.
		garbage := bytes.Repeat([]byte{0xff}, 32)
		s := startHS(t, hsOpts{recvs: 1, serve: func(o *serveOpts) {
			o.after = func([]byte) []byte { return garbage }
		}})
		want := ddpTerm(ddp.ETypeTagged, ddp.CodeTaggedVersion, garbage[2:])
		want.SegLen = 0xffff
		s.p.wantTerminateAfter(t, isRTR, want)
		s.finishLocal(t, want)
	})
	t.Run("Reply sent twice", func(t *testing.T) {
		// The second Reply is read as an FPDU: ULPDU length "MP" (0x4d50),
		// DDP control 'A' (0x41: untagged, L, DV 1), RDMAP control ' '
		// (0x20: RV 0). RFC 5040 section 7.2 "The RDMA Version MUST be
		// valid" -> remote operation error 0x05 with M, D and the 18
		// octets of "DDP header" (RFC 5040 Figure 10).
		var second []byte
		s := startHS(t, hsOpts{recvs: 1, serve: func(o *serveOpts) {
			o.after = func(rep []byte) []byte { second = rep; return rep }
		}})
		want := rdmapTerm(rdmap.ETypeRemoteOperation, rdmap.CodeInvalidVersion, second[2:])
		want.SegLen = 0x4d50
		s.p.wantTerminateAfter(t, isRTR, want)
		s.finishLocal(t, want)
	})
	t.Run("PD_Length 65535", func(t *testing.T) {
		// RFC 5044 section 7.1.1 PD_Length: more than 512 octets -> close
		// the connection; no private data is read, and no Terminate (as
		// TestHostileDial's PD_Length 513).
		st := &stackSide{dev: openDev(DeviceAttr{})}
		st.pd = st.dev.AllocPD()
		q := st.newQP(t, 8, 8)
		conn, _, res := rawResponder(t, q.qp, hostileDialCfg(false), peerTimeout, 0)
		rawWrite(t, conn, mpaFrame(repKey, flagC|flagH, 2, 0xffff, irdord(8, 8)))
		wantPlainClose(t, waitClose(conn, peerTimeout), true)
		r := dialOutcome(t, res)
		require.ErrorIs(t, r.err, mpa.ErrInvalidFrame)
		require.Nil(t, r.pd)
		require.Equal(t, StateIdle, q.qp.State())
	})
	t.Run("512 octets of private data", func(t *testing.T) {
		// "The Private Data field MUST be between 0 and 512 octets": the
		// most a Reply may carry, 508 after the IRD/ORD word, all for the
		// ULP.
		pd := bytes.Repeat([]byte{0x5a}, mpa.MaxPrivateData-mpa.IRDORDLen)
		s := startHS(t, hsOpts{serve: func(o *serveOpts) { o.pd = pd }})
		require.Equal(t, pd, s.p.pd, "the Reply's private data")
		s.wantOrderlyEnd(t)
	})
	t.Run("Rev 2 Reply to a Rev 1 Request", func(t *testing.T) {
		// RFC 5044 section 7.1.1 Rev and RFC 6581 section 6: the responder
		// answers with the Request's revision or a lower one; a higher one
		// cannot be interoperated with. Like the other well-formed Replies
		// that cannot answer our Request (TestHostileDial's Rev 0 Reply),
		// LLP 0x04 "invalid MPA Request or Reply" in a Terminate, then the
		// close; the QP stays IDLE.
		st := &stackSide{dev: openDev(DeviceAttr{})}
		st.pd = st.dev.AllocPD()
		q := st.newQP(t, 8, 8)
		cfg := hostileDialCfg(false)
		cfg.MPA.Rev = 1
		conn, req, res := rawResponder(t, q.qp, cfg, peerTimeout, 0)
		require.Equal(t, uint8(1), req.Rev)
		rawWrite(t, conn, mpaFrame(repKey, flagC|flagH, 2, 4, irdord(8, 8)))
		p := newRawPeer(conn, mpa.Params{CRC: true})
		u, err := p.next()
		require.NoError(t, err, "want a Terminate")
		requireOctets(t, terminateULPDU(llpTerm(mpa.CodeInvalidReqRep)), u, "the Terminate")
		p.wantClosed(t)
		r := dialOutcome(t, res)
		require.ErrorIs(t, r.err, mpa.ErrInvalidFrame)
		var me *mpa.Error
		require.ErrorAs(t, r.err, &me)
		require.Equal(t, mpa.CodeInvalidReqRep, me.Code)
		require.Equal(t, StateIdle, q.qp.State())
	})
	t.Run("Rev 1 Reply to our Rev 2 Request, H and a word in it", func(t *testing.T) {
		// A Rev 1 Reply is a fallback: nothing is negotiated (RFC 6581
		// section 6 keeps Rev 1 as RFC 5044 has it). In a Rev 1 frame H is
		// one of the reserved bits, "not checked on reception" (RFC 5044
		// section 7.1.1), so the six octets of private data are the ULP's,
		// even if they look like an IRD/ORD word asking for peer-to-peer
		// mode; IRD and ORD stay as configured.
		st := &stackSide{dev: openDev(DeviceAttr{})}
		st.pd = st.dev.AllocPD()
		q := st.newQP(t, 8, 8)
		conn, _, res := rawResponder(t, q.qp, hostileDialCfg(false), peerTimeout, 0)
		pd := append(irdord(wordA|2, wordD|2), 'h', 'i')
		rawWrite(t, conn, mpaFrame(repKey, flagC|flagH, 1, len(pd), pd))
		r := dialOutcome(t, res)
		require.NoError(t, r.err, "Dial")
		require.Equal(t, pd, r.pd, "a Rev 1 Reply's private data is all the ULP's")
		params := q.qp.Params()
		require.Equal(t, uint8(1), params.Rev)
		require.True(t, params.CRC)
		require.Equal(t, uint16(8), params.IRD)
		require.GreaterOrEqual(t, params.ORD, uint16(8))
		p := newRawPeer(conn, mpa.Params{CRC: true})
		_, err := q.qp.PostSend(SendWR{ID: 1, Opcode: OpSend, Flags: Signaled | Inline, InlineData: []byte("rev 1")})
		require.NoError(t, err)
		u := p.wantULPDU(t, "the Send")
		for isRTR(u) {
			u = p.wantULPDU(t, "the Send")
		}
		require.Equal(t, "rev 1", string(u[ddp.UntaggedHdrLen:]))
		require.Equal(t, wcString(1, WCSend, Success), wcOf(waitWC(t, q.scq)))
		p.closeWrite(t)
		p.wantClosed(t)
		p.close()
		waitDone(t, q.qp, peerTimeout)
		require.ErrorIs(t, q.qp.Err(), ErrDisconnected)
	})
	t.Run("Reply with M: the stack sends markers", func(t *testing.T) {
		// RFC 5044 section 7.1.1 M: "When this bit is '1' in the MPA Reply
		// ... Markers MUST be added" by the initiator, from its first octet
		// in full operation (section 7.1.2 rule 7): every FPDU, the
		// Terminate too, goes through the raw peer's marker-checking
		// reader. The Write aims at a never-issued STag: DDP tagged 0x00.
		s := startHS(t, hsOpts{serve: func(o *serveOpts) { o.resp.MarkersRx = true }})
		require.True(t, s.p.params.MarkersRx)
		require.True(t, s.q.qp.Params().MarkersTx)
		_, err := s.q.qp.PostSend(SendWR{ID: 7, Opcode: OpSend, Flags: Signaled | Inline, InlineData: []byte("marked")})
		require.NoError(t, err)
		u := s.p.wantULPDU(t, "the Send, with markers")
		require.Equal(t, "marked", string(u[ddp.UntaggedHdrLen:]))
		s.expectSend(7, WCSend, Success)
		w := writeULPDU(s.dst.mr.RKey()^0x800000, s.dst.mr.Addr(), payload16)
		s.p.send(t, w)
		s.wantTerminate(t, ddpTerm(ddp.ETypeTagged, ddp.CodeInvalidSTag, w))
	})
	t.Run("Reply without C: CRCs stay on", func(t *testing.T) {
		// RFC 5044 section 7.1.1 C: "When this bit is '1' in either the MPA
		// Request Frame or MPA Reply Frame, CRCs MUST be generated and
		// checked by both endpoints": our Request asked, so a Reply without
		// C changes nothing, and a Send with a bad CRC is LLP 0x02 "MPA CRC
		// error" (section 8), not delivered.
		s := startHS(t, hsOpts{recvs: 1, serve: func(o *serveOpts) {
			o.reply = func(rep *mpa.Frame, _ *mpa.Params) { rep.CRC = false }
		}})
		require.True(t, s.q.qp.Params().CRC)
		b := s.p.encode(t, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, payload16))
		b[len(b)-1] ^= 0xff
		s.p.write(t, b)
		s.mayPlace[s.rbuf] = true
		s.wantTerminate(t, llpTerm(mpa.CodeCRC), WRFlushErr)
	})
}

// IRD/ORD lies in the Reply (RFC 6581 section 9.1), and what the server
// does with them afterwards.
func TestHostileServerIRDORD(t *testing.T) {
	checkRoutines(t)
	t.Run("Reply grants more IRD than our ORD", func(t *testing.T) {
		// "the initiator ... ORD at most to the responder IRD": a generous
		// responder IRD never raises our ORD above what we asked (2). Three
		// Reads posted: two Read Requests go out, the third waits for a
		// response (RFC 5040 section 6.5: no more than ORD outstanding).
		s := startHS(t, hsOpts{ord: 2, serve: func(o *serveOpts) { o.reply = lieIRDORD(t, mpa.MaxIRDORD, 8) }})
		require.Equal(t, uint16(2), s.q.qp.Params().ORD)
		sink := s.region(t, "Read sinks", s.st.pd, 24, LocalWrite)
		for i := 0; i < 3; i++ {
			_, err := s.q.qp.PostSend(SendWR{ID: uint64(10 + i), Opcode: OpRDMARead, Flags: Signaled,
				SGL: []SGE{sink.mr.SGE(8*i, 8)}, RemoteAddr: 0x1000 + uint64(8*i), RKey: 0x1234})
			require.NoError(t, err)
		}
		_, r1 := s.p.wantRead(t)
		_, r2 := s.p.wantRead(t)
		s.p.wantNothing(t, 300*time.Millisecond, "a third Read Request beyond ORD 2")
		s.p.send(t, rrULPDU(r1.SinkSTag(), r1.SinkTO(), true, []byte("read one")))
		require.Equal(t, wcString(10, WCRDMARead, Success), wcOf(waitWC(t, s.q.scq)))
		_, r3 := s.p.wantRead(t)
		s.p.send(t, rrULPDU(r2.SinkSTag(), r2.SinkTO(), true, []byte("read two")),
			rrULPDU(r3.SinkSTag(), r3.SinkTO(), true, []byte("read 3!!")))
		require.Equal(t, wcString(11, WCRDMARead, Success), wcOf(waitWC(t, s.q.scq)))
		require.Equal(t, wcString(12, WCRDMARead, Success), wcOf(waitWC(t, s.q.scq)))
		require.Equal(t, "read oneread tworead 3!!", string(sink.region()))
		s.mayPlace[sink] = true
		s.wantOrderlyEnd(t)
		sink.requireGuards(t, "Read sinks")
	})
	t.Run("Reply ORD 0, then a Read Request", func(t *testing.T) {
		// The responder's ORD 0 makes our IRD 0 ("responder ORD <= initiator
		// IRD", and we never agree to more than it can use): no buffer on
		// queue 1 for any Read Request, RFC 5041 section 7.1 check 2 ->
		// DDP untagged 0x02 "Invalid MSN - no buffer available", with the
		// 18-octet DDP header (as TestScriptedReadBeyondIRD).
		s := startHS(t, hsOpts{recvs: 1, read: true, serve: func(o *serveOpts) { o.reply = lieIRDORD(t, 8, 0) }})
		require.Zero(t, s.q.qp.Params().IRD)
		u := readReqULPDU(1, 0xabcd0001, 0x5000, 64, s.dst.mr.RKey(), s.dst.mr.Addr())
		s.p.send(t, u)
		s.wantTerminate(t, ddpTerm(ddp.ETypeUntagged, ddp.CodeMSNNoBuffer, u))
	})
	t.Run("Reply ORD 1, then two Read Requests", func(t *testing.T) {
		// Our IRD is 1. Two 16 MiB Read Requests in one write: the stack
		// cannot have answered the first (the server does not read) when
		// the second arrives, which is beyond the IRD -> 0x02 as above. The
		// Terminate follows whatever Read Response segments were under way.
		s := startHS(t, hsOpts{recvs: 1, read: true, serve: func(o *serveOpts) { o.reply = lieIRDORD(t, 8, 1) }})
		require.Equal(t, uint16(1), s.q.qp.Params().IRD)
		src := s.region(t, "16 MiB source", s.st.pd, 16<<20, RemoteRead)
		var us [][]byte
		for msn := uint32(1); msn <= 2; msn++ {
			us = append(us, readReqULPDU(msn, 0xabcd0000+msn, 0, 16<<20, src.mr.RKey(), src.mr.Addr()))
		}
		s.p.send(t, us...)
		isResponse := func(u []byte) bool {
			return u[0]&ddp.FlagTagged != 0 && rdmap.CtrlOpcode(u[1]) == rdmap.OpReadResponse
		}
		want := ddpTerm(ddp.ETypeUntagged, ddp.CodeMSNNoBuffer, us[1])
		s.p.wantTerminateAfter(t, isResponse, want)
		s.finishLocal(t, want)
	})
	t.Run("Reply IRD 0: no Reads nor atomics", func(t *testing.T) {
		// The responder's IRD 0 makes our ORD 0: an RDMA Read or atomic
		// would overrun it (RFC 6581 section 9.1; RFC 7306 section 5.2:
		// atomics share the ORD), so PostSend refuses them; the QP stays
		// up and a Send still goes. The Reply declines peer-to-peer mode:
		// a Read RTR would need an IRD of 1 at the responder.
		s := startHS(t, hsOpts{ext: true, serve: func(o *serveOpts) {
			o.reply = func(rep *mpa.Frame, p *mpa.Params) {
				lieIRDORD(t, 0, 8)(rep, p)
				declineP2P(t, rep, p)
			}
		}})
		require.False(t, s.q.qp.Params().P2P)
		require.Zero(t, s.q.qp.Params().ORD)
		sink := s.region(t, "Read sink", s.st.pd, 8, LocalWrite)
		_, err := s.q.qp.PostSend(SendWR{ID: 1, Opcode: OpRDMARead, Flags: Signaled, SGL: []SGE{sink.mr.SGE(0, 8)},
			RemoteAddr: 0x1000, RKey: 0x1234})
		require.ErrorIs(t, err, ErrInvalidArg, "an RDMA Read with ORD 0")
		_, err = s.q.qp.PostSend(SendWR{ID: 2, Opcode: OpAtomicFetchAdd, Flags: Signaled, SGL: []SGE{sink.mr.SGE(0, 8)},
			RemoteAddr: 0x2000, RKey: 0x1234, CompareAdd: 1})
		require.ErrorIs(t, err, ErrInvalidArg, "an atomic with ORD 0")
		_, err = s.q.qp.PostSend(SendWR{ID: 3, Opcode: OpSend, Flags: Signaled | Inline, InlineData: []byte("still up")})
		require.NoError(t, err)
		u := s.p.wantULPDU(t, "the Send")
		require.Equal(t, "still up", string(u[ddp.UntaggedHdrLen:]))
		require.Equal(t, wcString(3, WCSend, Success), wcOf(waitWC(t, s.q.scq)))
		s.wantOrderlyEnd(t)
		sink.requireUntouched(t, "Read sink")
	})
}

// Read Responses that do not answer our oldest outstanding Read as asked.
// RFC 5040 section 4.4: a Read Response goes to the Data Sink STag and TO
// of its Read Request, "the RDMA Read Message Size" octets of it, and Read
// Responses come back in the order of the Requests (section 5.5). RFC 5041
// section 7.1's checks on a tagged segment come before any placement, so a
// region the bad segment aims at stays untouched.
func TestHostileServerReadResponse(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	type tc struct {
		name string
		opts hsOpts
		// attack sends the bad segments and returns the Terminate the
		// stack must send for them.
		attack func(t *testing.T, s *hsScenario) rdmap.Terminate
	}
	std := hsOpts{recvs: 2, read: true}
	cases := []tc{
		// No Read outstanding: RFC 5040 section 4.8 0x06 "Unexpected
		// OpCode", remote operation error, M and D (as
		// TestScriptedReadResponseErrors "unsolicited").
		{"to a Read never sent", hsOpts{recvs: 2}, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			u := rrULPDU(s.dst.mr.RKey(), s.dst.mr.Addr(), true, payload16)
			s.p.send(t, u)
			return rdmapTerm(rdmap.ETypeRemoteOperation, rdmap.CodeUnexpectedOpcode, u)
		}},
		{"zero-length, to a Read never sent", hsOpts{recvs: 2}, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			u := rrULPDU(rtrSTag, 0, true, nil)
			s.p.send(t, u)
			return rdmapTerm(rdmap.ETypeRemoteOperation, rdmap.CodeUnexpectedOpcode, u)
		}},
		{"a second response to a Read already answered", std, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			good := bytes.Repeat([]byte{3}, 32)
			s.p.send(t, rrULPDU(s.readReq.SinkSTag(), s.readReq.SinkTO(), true, good))
			u := s.p.wantULPDU(t, "the fenced Send, released by the Read")
			require.Equal(t, "fenced", string(u[ddp.UntaggedHdrLen:]))
			require.Equal(t, wcString(readWRID, WCRDMARead, Success), wcOf(waitWC(t, s.q.scq)))
			require.Equal(t, wcString(fencedWRID, WCSend, Success), wcOf(waitWC(t, s.q.scq)))
			require.Equal(t, good, s.sink.region())
			s.wantSend = nil // taken
			s.mayPlace[s.sink] = true
			dup := rrULPDU(s.readReq.SinkSTag(), s.readReq.SinkTO(), true, bytes.Repeat([]byte{4}, 32))
			s.p.send(t, dup)
			return rdmapTerm(rdmap.ETypeRemoteOperation, rdmap.CodeUnexpectedOpcode, dup)
		}},
		// More octets than asked: RFC 5041 section 7.1 check 4, "the TO
		// and the DDP Segment payload length ... within the buffer" -> DDP
		// tagged 0x01 base or bounds, before any placement.
		{"33 octets for a Read of 32", std, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			u := rrULPDU(s.readReq.SinkSTag(), s.readReq.SinkTO(), true, bytes.Repeat([]byte{1}, 33))
			s.p.send(t, u)
			return ddpTerm(ddp.ETypeTagged, ddp.CodeBaseBounds, u)
		}},
		// Past the sink's end in a second segment: the first 24 octets
		// are placed, the next 16 would end 8 octets past the sink.
		{"second segment past the sink's end", std, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			s.p.send(t, rrULPDU(s.readReq.SinkSTag(), s.readReq.SinkTO(), false, bytes.Repeat([]byte{1}, 24)))
			u := rrULPDU(s.readReq.SinkSTag(), s.readReq.SinkTO()+24, true, bytes.Repeat([]byte{2}, 16))
			s.p.send(t, u)
			s.mayPlace[s.sink] = true
			return ddpTerm(ddp.ETypeTagged, ddp.CodeBaseBounds, u)
		}},
		// A second segment that overlaps the first: the response must
		// continue where it left off (siw_rresp_check_ntoh: base or
		// bounds).
		{"second segment over the first", std, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			s.p.send(t, rrULPDU(s.readReq.SinkSTag(), s.readReq.SinkTO(), false, bytes.Repeat([]byte{1}, 16)))
			u := rrULPDU(s.readReq.SinkSTag(), s.readReq.SinkTO(), true, bytes.Repeat([]byte{2}, 16))
			s.p.send(t, u)
			s.mayPlace[s.sink] = true
			return ddpTerm(ddp.ETypeTagged, ddp.CodeBaseBounds, u)
		}},
		// Fewer octets than asked, then L: the Read Response message is
		// shorter than the Read's size (RFC 5040 section 4.4). RFC 5041 has
		// no code of its own for it; base or bounds, the sink's extent not
		// met, rather than a Read that completes with 16 of its 32 octets
		// missing.
		{"16 octets for a Read of 32, then L", std, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			u := rrULPDU(s.readReq.SinkSTag(), s.readReq.SinkTO(), true, bytes.Repeat([]byte{1}, 16))
			s.p.send(t, u)
			s.mayPlace[s.sink] = true
			return ddpTerm(ddp.ETypeTagged, ddp.CodeBaseBounds, u)
		}},
		// Wrong sink STag: RFC 5041 section 7.1 check 1 -> DDP tagged 0x00
		// invalid STag (siw_rresp_check_ntoh the same), even for a region
		// of ours that takes remote writes: a Read Response is placed only
		// in its Read's sink.
		{"to another region of ours", std, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			u := rrULPDU(s.dst.mr.RKey(), s.dst.mr.Addr(), true, bytes.Repeat([]byte{1}, 32))
			s.p.send(t, u)
			return ddpTerm(ddp.ETypeTagged, ddp.CodeInvalidSTag, u)
		}},
		{"to the sink's index with another key", std, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			u := rrULPDU(s.readReq.SinkSTag()^0x5a, s.readReq.SinkTO(), true, bytes.Repeat([]byte{1}, 32))
			s.p.send(t, u)
			return ddpTerm(ddp.ETypeTagged, ddp.CodeInvalidSTag, u)
		}},
		// Right STag, wrong TO: checks 3 and 4 -> 0x01.
		{"8 octets into the sink", std, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			u := rrULPDU(s.readReq.SinkSTag(), s.readReq.SinkTO()+8, true, bytes.Repeat([]byte{1}, 24))
			s.p.send(t, u)
			return ddpTerm(ddp.ETypeTagged, ddp.CodeBaseBounds, u)
		}},
		{"8 octets below the sink", std, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			u := rrULPDU(s.readReq.SinkSTag(), s.readReq.SinkTO()-8, true, bytes.Repeat([]byte{1}, 32))
			s.p.send(t, u)
			return ddpTerm(ddp.ETypeTagged, ddp.CodeBaseBounds, u)
		}},
		// Two Reads outstanding, the server answers the second first:
		// Read Responses come in the order of the Requests (RFC 5040
		// section 5.5), so it is aimed at the wrong sink: 0x00. Neither
		// sink is touched.
		{"to the second Read before the first", hsOpts{recvs: 2}, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			a := s.region(t, "first sink", s.st.pd, 32, LocalWrite)
			b := s.region(t, "second sink", s.st.pd, 16, LocalWrite)
			_, err := s.q.qp.PostSend(
				SendWR{ID: 111, Opcode: OpRDMARead, Flags: Signaled, SGL: []SGE{a.mr.SGE(0, 32)}, RemoteAddr: 0x1000, RKey: 0x1234},
				SendWR{ID: 112, Opcode: OpRDMARead, Flags: Signaled, SGL: []SGE{b.mr.SGE(0, 16)}, RemoteAddr: 0x2000, RKey: 0x1234})
			require.NoError(t, err)
			s.p.wantRead(t)
			_, rb := s.p.wantRead(t)
			s.expectSend(111, WCRDMARead, WRFlushErr)
			s.expectSend(112, WCRDMARead, WRFlushErr)
			u := rrULPDU(rb.SinkSTag(), rb.SinkTO(), true, bytes.Repeat([]byte{1}, 16))
			s.p.send(t, u)
			return ddpTerm(ddp.ETypeTagged, ddp.CodeInvalidSTag, u)
		}},
		// A zero-length Read (size 0 in its Request) answered with data:
		// 0x01, nothing placed.
		{"16 octets for a zero-length Read", hsOpts{recvs: 2}, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			sink := s.region(t, "zero-length Read's sink", s.st.pd, 16, LocalWrite)
			_, err := s.q.qp.PostSend(SendWR{ID: 113, Opcode: OpRDMARead, Flags: Signaled, SGL: []SGE{sink.mr.SGE(0, 0)},
				RemoteAddr: 0x1000, RKey: 0x1234})
			require.NoError(t, err)
			_, rr := s.p.wantRead(t)
			require.Zero(t, rr.Size())
			s.expectSend(113, WCRDMARead, WRFlushErr)
			u := rrULPDU(rr.SinkSTag(), rr.SinkTO(), true, payload16)
			s.p.send(t, u)
			return ddpTerm(ddp.ETypeTagged, ddp.CodeBaseBounds, u)
		}},
		// Only an Atomic Request outstanding (RFC 7306): its answer is an
		// Atomic Response on QN 3, so a Read Response answers no Read:
		// 0x06 as for a Read never sent. The atomic must not complete,
		// its result buffer stays untouched. A zero-length Read Response
		// to STag 0, TO 0 is the sharpest form: it must not pass for the
		// atomic's answer.
		{"while only an atomic is outstanding", hsOpts{recvs: 2, ext: true}, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			res := s.region(t, "atomic result", s.st.pd, 8, LocalWrite)
			s.postAtomic(t, 120, res)
			s.expectSend(120, WCAtomicFetchAdd, WRFlushErr)
			u := rrULPDU(0, 0, true, bytes.Repeat([]byte{1}, 8))
			s.p.send(t, u)
			return rdmapTerm(rdmap.ETypeRemoteOperation, rdmap.CodeUnexpectedOpcode, u)
		}},
		{"zero-length, while only an atomic is outstanding", hsOpts{recvs: 2, ext: true}, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			res := s.region(t, "atomic result", s.st.pd, 8, LocalWrite)
			s.postAtomic(t, 121, res)
			s.expectSend(121, WCAtomicFetchAdd, WRFlushErr)
			u := rrULPDU(0, 0, true, nil)
			s.p.send(t, u)
			return rdmapTerm(rdmap.ETypeRemoteOperation, rdmap.CodeUnexpectedOpcode, u)
		}},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			s := startHS(t, k.opts)
			want := k.attack(t, s)
			s.wantTerminate(t, want)
		})
	}
}

// Terminates from the server (RFC 5040 section 4.8 and 5.4): every layer
// and error type it may report, with and without the headers of Figure 10,
// in the RFC encoding and in Linux siw's. The stack must deliver each to its
// application (qp.Err(), Remote) and answer with nothing but the close: a
// Terminate is never answered with a Terminate. The server then half-closes,
// as siw does.
func TestHostileServerPeerTerminate(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	// Segments of ours the server may say it terminated.
	ourWrite := writeULPDU(0x12345678, 0x1000, payload16)
	ourSend := sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, payload16)
	ourSendInv := sendULPDU(rdmap.OpSendInvalidate, 0x4242, rdmap.QNSend, 1, 0, true, payload16)
	fixed := func(tm rdmap.Terminate) func(*hsScenario) rdmap.Terminate {
		return func(*hsScenario) rdmap.Terminate { return tm }
	}
	onRead := func(et, code uint8) func(*hsScenario) rdmap.Terminate {
		return func(s *hsScenario) rdmap.Terminate { return rdmapTerm(et, code, s.readU) }
	}
	seg := func(f func(et, code uint8, u []byte) rdmap.Terminate, et, code uint8, u []byte) func(*hsScenario) rdmap.Terminate {
		return fixed(f(et, code, u))
	}
	ddpSeg := func(et ddp.EType, code uint8, u []byte) func(*hsScenario) rdmap.Terminate {
		return fixed(ddpTerm(et, code, u))
	}
	short := func(l rdmap.Layer, et, code uint8) func(*hsScenario) rdmap.Terminate {
		return fixed(rdmap.Terminate{Layer: l, EType: et, Code: code})
	}
	// What the stack records for a Terminate it cannot decode: still the
	// server's last word (rxTerminate), an RDMAP local catastrophic error,
	// code unspecified.
	undecodable := rdmap.Terminate{Layer: rdmap.LayerRDMAP, EType: rdmap.ETypeLocalCatastrophic, Code: rdmap.CodeUnspecified}
	type tc struct {
		name string
		sent func(s *hsScenario) rdmap.Terminate // sent in the RFC encoding, decoded the same
		pad  bool                                // the body padded to 200 octets
		raw  []byte                              // instead of sent: this body...
		want rdmap.Terminate                     // ...decoded as this
	}
	cases := []tc{
		// RDMAP (layer 0).
		{name: "RDMAP local catastrophic", sent: short(rdmap.LayerRDMAP, rdmap.ETypeLocalCatastrophic, 0)},
		{name: "RDMAP remote protection invalid STag of our Read, with R", sent: onRead(rdmap.ETypeRemoteProtection, rdmap.CodeInvalidSTag)},
		{name: "RDMAP remote protection base or bounds of our Read, with R", sent: onRead(rdmap.ETypeRemoteProtection, rdmap.CodeBaseBounds)},
		{name: "RDMAP remote protection access rights of our Read, with R", sent: onRead(rdmap.ETypeRemoteProtection, rdmap.CodeAccessRights)},
		{name: "RDMAP remote protection STag not associated, with R", sent: onRead(rdmap.ETypeRemoteProtection, rdmap.CodeSTagNotAssoc)},
		{name: "RDMAP remote protection TO wrap, with R", sent: onRead(rdmap.ETypeRemoteProtection, rdmap.CodeTOWrap)},
		{name: "RDMAP remote protection on our Write", sent: seg(rdmapTerm, rdmap.ETypeRemoteProtection, rdmap.CodeInvalidSTag, ourWrite)},
		{name: "RDMAP remote protection, no headers", sent: short(rdmap.LayerRDMAP, rdmap.ETypeRemoteProtection, rdmap.CodeBaseBounds)},
		{name: "RDMAP remote operation invalid version", sent: seg(rdmapTerm, rdmap.ETypeRemoteOperation, rdmap.CodeInvalidVersion, ourSend)},
		{name: "RDMAP remote operation unexpected opcode", sent: seg(rdmapTerm, rdmap.ETypeRemoteOperation, rdmap.CodeUnexpectedOpcode, ourWrite)},
		{name: "RDMAP remote operation catastrophic, stream", sent: short(rdmap.LayerRDMAP, rdmap.ETypeRemoteOperation, rdmap.CodeCatastrophicStream)},
		{name: "RDMAP remote operation catastrophic, global", sent: short(rdmap.LayerRDMAP, rdmap.ETypeRemoteOperation, rdmap.CodeCatastrophicGlobal)},
		{name: "RDMAP remote operation STag cannot be invalidated", sent: seg(rdmapTerm, rdmap.ETypeRemoteOperation, rdmap.CodeCannotInvalidate, ourSendInv)},
		{name: "RDMAP remote operation unspecified", sent: short(rdmap.LayerRDMAP, rdmap.ETypeRemoteOperation, rdmap.CodeUnspecified)},
		// DDP (layer 1).
		{name: "DDP local catastrophic", sent: short(rdmap.LayerDDP, uint8(ddp.ETypeCatastrophic), 0)},
		{name: "DDP tagged base or bounds", sent: ddpSeg(ddp.ETypeTagged, ddp.CodeBaseBounds, ourWrite)},
		{name: "DDP tagged STag not associated", sent: ddpSeg(ddp.ETypeTagged, ddp.CodeSTagNotAssoc, ourWrite)},
		{name: "DDP tagged TO wrap", sent: ddpSeg(ddp.ETypeTagged, ddp.CodeTOWrap, ourWrite)},
		{name: "DDP tagged invalid version, no headers", sent: short(rdmap.LayerDDP, uint8(ddp.ETypeTagged), ddp.CodeTaggedVersion)},
		{name: "DDP untagged invalid QN", sent: ddpSeg(ddp.ETypeUntagged, ddp.CodeInvalidQN, ourSend)},
		{name: "DDP untagged no buffer", sent: ddpSeg(ddp.ETypeUntagged, ddp.CodeMSNNoBuffer, ourSend)},
		{name: "DDP untagged no buffer for our Read Request", sent: func(s *hsScenario) rdmap.Terminate {
			return ddpTerm(ddp.ETypeUntagged, ddp.CodeMSNNoBuffer, s.readU)
		}},
		{name: "DDP untagged MSN range", sent: ddpSeg(ddp.ETypeUntagged, ddp.CodeMSNRange, ourSend)},
		{name: "DDP untagged invalid MO", sent: ddpSeg(ddp.ETypeUntagged, ddp.CodeInvalidMO, ourSend)},
		{name: "DDP untagged message too long", sent: ddpSeg(ddp.ETypeUntagged, ddp.CodeMsgTooLong, ourSend)},
		{name: "DDP untagged invalid version, no headers", sent: short(rdmap.LayerDDP, uint8(ddp.ETypeUntagged), ddp.CodeUntaggedVersion)},
		// LLP (layer 2, MPA): RFC 5044 section 8 and RFC 6581 section 10.
		{name: "LLP stream lost", sent: fixed(llpTerm(mpa.CodeStreamLost))},
		{name: "LLP CRC", sent: fixed(llpTerm(mpa.CodeCRC))},
		{name: "LLP marker", sent: fixed(llpTerm(mpa.CodeMarker))},
		{name: "LLP invalid Request or Reply", sent: fixed(llpTerm(mpa.CodeInvalidReqRep))},
		{name: "LLP local catastrophic", sent: fixed(llpTerm(mpa.CodeLocalCatastrophic))},
		{name: "LLP insufficient IRD", sent: fixed(llpTerm(mpa.CodeInsufficientIRD))},
		{name: "LLP no matching RTR", sent: fixed(llpTerm(mpa.CodeNoMatchingRTR))},
		// Long: the Terminate header, then octets up to a 200-octet body.
		// RFC 5040 section 4.8 defines what the header holds, not that
		// nothing follows; the server is done with us either way.
		{name: "200 octets: RDMAP remote protection of our Read, with R", pad: true, sent: onRead(rdmap.ETypeRemoteProtection, rdmap.CodeInvalidSTag)},
		{name: "200 octets: DDP untagged no buffer", pad: true, sent: ddpSeg(ddp.ETypeUntagged, ddp.CodeMSNNoBuffer, ourSend)},
		{name: "200 octets: LLP CRC", pad: true, sent: fixed(llpTerm(mpa.CodeCRC))},
		// Causes the RFCs do not define are delivered as they are.
		{name: "undefined layer 3", raw: []byte{0x30, 0x01, 0x00, 0x00},
			want: rdmap.Terminate{Layer: 3, EType: 0, Code: 1}},
		{name: "undefined RDMAP remote operation code 0x42", raw: []byte{0x02, 0x42, 0x00, 0x00},
			want: rdmap.Terminate{Layer: rdmap.LayerRDMAP, EType: rdmap.ETypeRemoteOperation, Code: 0x42}},
		// Linux siw's byte-swapped control word (siw-notes.md).
		{name: "siw form: LLP CRC", raw: []byte{0x02, 0x02, 0x00, 0x00},
			want: rdmap.Terminate{Layer: rdmap.LayerLLP, EType: rdmap.ETypeMPA, Code: uint8(mpa.CodeCRC), SiwForm: true}},
		{name: "siw form: DDP untagged no buffer, with the header",
			raw: append([]byte{0x21, 0x02, 0x03, 0x00, 0x00, byte(len(ourSend))}, ourSend[:ddp.UntaggedHdrLen]...),
			want: rdmap.Terminate{Layer: rdmap.LayerDDP, EType: uint8(ddp.ETypeUntagged), Code: ddp.CodeMSNNoBuffer,
				M: true, D: true, SegLen: uint16(len(ourSend)), DDPHdr: ourSend[:ddp.UntaggedHdrLen], SiwForm: true}},
		// Bodies that do not decode: still a Terminate.
		{name: "empty body", raw: []byte{}, want: undecodable},
		{name: "D, but the body ends inside the DDP header", raw: []byte{0x12, 0x01, 0x40, 0x00, 0x00, 0x12, 0x41, 0x00}, want: undecodable},
		{name: "R without D", raw: []byte{0x01, 0x00, 0x20, 0x00}, want: undecodable},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			s := startHS(t, hsOpts{recvs: 2, read: true})
			body, want := k.raw, k.want
			if k.sent != nil {
				want = k.sent(s)
				body = terminateULPDU(want)[ddp.UntaggedHdrLen:]
			}
			if k.pad {
				body = append(body, bytes.Repeat([]byte{0xee}, 200-len(body))...)
			}
			s.p.send(t, sendULPDU(rdmap.OpTerminate, 0, rdmap.QNTerminate, 1, 0, true, body))
			s.p.closeWrite(t)
			s.wantRemoteTerminate(t, want, false)
		})
	}

	t.Run("followed by a Send in the same write", func(t *testing.T) {
		// Nothing follows a Terminate on the stream (RFC 5040 section 5.4):
		// the Send is neither placed nor delivered, its receive flushes.
		s := startHS(t, hsOpts{recvs: 2, read: true})
		want := llpTerm(mpa.CodeCRC)
		s.p.send(t, sendULPDU(rdmap.OpTerminate, 0, rdmap.QNTerminate, 1, 0, true, terminateULPDU(want)[ddp.UntaggedHdrLen:]),
			sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, []byte("after the end")))
		s.p.closeWrite(t)
		s.wantRemoteTerminate(t, want, true)
	})
	t.Run("in the middle of a Read Response", func(t *testing.T) {
		// Half the Read placed, then the Terminate: the Read flushes; what
		// was placed stays inside the sink.
		s := startHS(t, hsOpts{recvs: 2, read: true})
		s.p.send(t, rrULPDU(s.readReq.SinkSTag(), s.readReq.SinkTO(), false, bytes.Repeat([]byte{1}, 16)))
		want := rdmapTerm(rdmap.ETypeRemoteProtection, rdmap.CodeBaseBounds, s.readU)
		s.p.send(t, sendULPDU(rdmap.OpTerminate, 0, rdmap.QNTerminate, 1, 0, true, terminateULPDU(want)[ddp.UntaggedHdrLen:]))
		s.p.closeWrite(t)
		s.mayPlace[s.sink] = true
		s.wantRemoteTerminate(t, want, false)
	})
	t.Run("with a bad CRC", func(t *testing.T) {
		// An FPDU whose CRC fails is no valid DDP segment, whatever its
		// opcode says (RFC 5044 section 8: the CRC error is fatal): it is
		// not the server's Terminate to deliver, but our LLP 0x02.
		s := startHS(t, hsOpts{recvs: 2, read: true})
		b := s.p.encode(t, sendULPDU(rdmap.OpTerminate, 0, rdmap.QNTerminate, 1, 0, true,
			terminateULPDU(llpTerm(mpa.CodeMarker))[ddp.UntaggedHdrLen:]))
		b[len(b)-1] ^= 0xff
		s.p.write(t, b)
		s.wantTerminate(t, llpTerm(mpa.CodeCRC))
	})
	for _, qn := range []uint32{rdmap.QNSend, rdmap.QNReadRequest, rdmap.QNAtomicResponse, 7} {
		t.Run(fmt.Sprintf("on QN %d", qn), func(t *testing.T) {
			// RDMAP sends the Terminate on queue 2 (RFC 5040 section 5.4,
			// Appendix A.6). On another queue DDP's checks fail before
			// RDMAP sees the opcode: RFC 5041 section 7.1 check 1, 0x01
			// "invalid QN", as for a Read Request on the Send queue
			// (TestScriptedSendErrors). What failed DDP's checks is not a
			// Terminate to deliver, so this is ours; the receives are not
			// touched.
			s := startHS(t, hsOpts{recvs: 2, read: true})
			u := sendULPDU(rdmap.OpTerminate, 0, qn, 1, 0, true, terminateULPDU(llpTerm(mpa.CodeCRC))[ddp.UntaggedHdrLen:])
			s.p.send(t, u)
			s.wantTerminate(t, ddpTerm(ddp.ETypeUntagged, ddp.CodeInvalidQN, u))
		})
	}
	t.Run("server keeps the connection open", func(t *testing.T) {
		// The stack closes on its own after a Terminate, at once.
		s := startHS(t, hsOpts{recvs: 2, read: true})
		start := time.Now()
		want := llpTerm(mpa.CodeStreamLost)
		s.p.send(t, sendULPDU(rdmap.OpTerminate, 0, rdmap.QNTerminate, 1, 0, true, terminateULPDU(want)[ddp.UntaggedHdrLen:]))
		s.wantRemoteTerminate(t, want, false)
		took := time.Since(start)
		t.Logf("the stack closed %v after the server's Terminate", took.Round(time.Millisecond))
		require.Less(t, took, termLinger+time.Second)
	})
	t.Run("answering our Terminate", func(t *testing.T) {
		// The server breaks a rule, gets our Terminate and answers with one
		// of its own: we send nothing more (our direction is closed), and
		// qp.Err() keeps the first cause, ours.
		s := startHS(t, hsOpts{recvs: 2, read: true})
		u := writeULPDU(s.dst.mr.RKey()^0x5a, s.dst.mr.Addr(), payload16)
		s.p.send(t, u)
		want := ddpTerm(ddp.ETypeTagged, ddp.CodeInvalidSTag, u)
		s.p.wantTerminate(t, want)
		s.p.send(t, sendULPDU(rdmap.OpTerminate, 0, rdmap.QNTerminate, 1, 0, true, terminateULPDU(want)[ddp.UntaggedHdrLen:]))
		s.p.closeWrite(t)
		s.finishLocal(t, want)
	})
}

// Atomic Responses (RFC 7306 section 5.2.2) that answer nothing we asked.
// Both ends enable RFC 7306 (ConnConfig.RFC7306; the raw server speaks it).
// The responses return in the order of the requests and each echoes its
// request's Request Identifier; one that matches no outstanding request is
// RFC 5040 section 4.8 0x06 "Unexpected OpCode", remote operation, with M
// and D. Every outstanding atomic flushes and its result buffer stays
// untouched.
func TestHostileServerAtomic(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	type tc struct {
		name   string
		read   bool
		attack func(t *testing.T, s *hsScenario) rdmap.Terminate
	}
	oneAtomic := func(t *testing.T, s *hsScenario) rdmap.AtomicRequest {
		res := s.region(t, "atomic result", s.st.pd, 8, LocalWrite)
		r := s.postAtomic(t, 130, res)
		s.expectSend(130, WCAtomicFetchAdd, WRFlushErr)
		return r
	}
	cases := []tc{
		{"none outstanding", false, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			u := atomicRespULPDU(1, 0, 42)
			s.p.send(t, u)
			return rdmapTerm(rdmap.ETypeRemoteOperation, rdmap.CodeUnexpectedOpcode, u)
		}},
		{"unknown Request Identifier", false, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			r := oneAtomic(t, s)
			u := atomicRespULPDU(1, r.ReqID()^0x00dead00, 42)
			s.p.send(t, u)
			return rdmapTerm(rdmap.ETypeRemoteOperation, rdmap.CodeUnexpectedOpcode, u)
		}},
		{"out of order", false, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			res := s.region(t, "atomic results", s.st.pd, 16, LocalWrite)
			for i := 0; i < 2; i++ {
				_, err := s.q.qp.PostSend(SendWR{ID: uint64(131 + i), Opcode: OpAtomicFetchAdd, Flags: Signaled,
					SGL: []SGE{res.mr.SGE(8*i, 8)}, RemoteAddr: 0x2000, RKey: 0x5678, CompareAdd: 1})
				require.NoError(t, err)
			}
			r1 := rdmap.AtomicRequest(bytes.Clone(s.p.wantAtomic(t)))
			r2 := rdmap.AtomicRequest(bytes.Clone(s.p.wantAtomic(t)))
			require.NotEqual(t, r1.ReqID(), r2.ReqID())
			s.expectSend(131, WCAtomicFetchAdd, WRFlushErr)
			s.expectSend(132, WCAtomicFetchAdd, WRFlushErr)
			u := atomicRespULPDU(1, r2.ReqID(), 42)
			s.p.send(t, u)
			return rdmapTerm(rdmap.ETypeRemoteOperation, rdmap.CodeUnexpectedOpcode, u)
		}},
		{"while only a Read is outstanding", true, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			u := atomicRespULPDU(1, 0, 42)
			s.p.send(t, u)
			return rdmapTerm(rdmap.ETypeRemoteOperation, rdmap.CodeUnexpectedOpcode, u)
		}},
		{"a second response to an atomic already answered", false, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			res := s.region(t, "atomic result", s.st.pd, 8, LocalWrite)
			r := s.postAtomic(t, 133, res)
			s.p.send(t, atomicRespULPDU(1, r.ReqID(), 0x1122334455667788))
			require.Equal(t, wcString(133, WCAtomicFetchAdd, Success), wcOf(waitWC(t, s.q.scq)))
			var want [8]byte
			putOriginal(want[:], 0x1122334455667788)
			require.Equal(t, want[:], res.region(), "the original value, in host order")
			s.mayPlace[res] = true
			u := atomicRespULPDU(2, r.ReqID(), 0x0102030405060708)
			s.p.send(t, u)
			return rdmapTerm(rdmap.ETypeRemoteOperation, rdmap.CodeUnexpectedOpcode, u)
		}},
		// On a queue other than 3: RFC 5041 section 7.1 check 1, 0x01.
		{"on QN 0", false, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			r := oneAtomic(t, s)
			u := sendULPDU(rdmap.OpAtomicResponse, 0, rdmap.QNSend, 1, 0, true, rdmap.AppendAtomicResponse(nil, r.ReqID(), 42))
			s.p.send(t, u)
			return ddpTerm(ddp.ETypeUntagged, ddp.CodeInvalidQN, u)
		}},
		{"on QN 1", false, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			r := oneAtomic(t, s)
			u := sendULPDU(rdmap.OpAtomicResponse, 0, rdmap.QNReadRequest, 1, 0, true, rdmap.AppendAtomicResponse(nil, r.ReqID(), 42))
			s.p.send(t, u)
			return ddpTerm(ddp.ETypeUntagged, ddp.CodeInvalidQN, u)
		}},
		// Longer than the 12-octet response: RFC 5041 section 7.1 check 4
		// -> 0x05 "DDP Message too long for available buffer".
		{"16 octets", false, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			r := oneAtomic(t, s)
			u := append(atomicRespULPDU(1, r.ReqID(), 42), 0, 0, 0, 0)
			s.p.send(t, u)
			return ddpTerm(ddp.ETypeUntagged, ddp.CodeMsgTooLong, u)
		}},
		// Shorter than the response header: fits any buffer, so it is no
		// DDP error (section 7.1 has no check for it); it is an RDMAP
		// header too short for its opcode, which RFC 5040 has no code for:
		// remote operation error, unspecified (0xFF), as rdmap reports
		// every malformed header and verbs a wrong-sized Immediate Data.
		{"8 octets", false, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			r := oneAtomic(t, s)
			u := atomicRespULPDU(1, r.ReqID(), 42)[:ddp.UntaggedHdrLen+8]
			s.p.send(t, u)
			return rdmapTerm(rdmap.ETypeRemoteOperation, rdmap.CodeUnspecified, u)
		}},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			s := startHS(t, hsOpts{ext: true, recvs: 2, read: k.read})
			want := k.attack(t, s)
			s.wantTerminate(t, want)
		})
	}
}

// Sends the stack has no receive for, or no room for (RFC 5041 section 7.1
// untagged checks, section 7.2 codes; M, D and the 18-octet header).
func TestHostileServerSend(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	type tc struct {
		name   string
		recvs  int
		attack func(t *testing.T, s *hsScenario) rdmap.Terminate
		recv   []WCStatus
	}
	cases := []tc{
		// Check 2 "The QN and MSN have an associated buffer": iWARP has no
		// receiver-not-ready; 0x02 "Invalid MSN - no buffer available".
		{"no receive posted", 0, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			u := sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, payload16)
			s.p.send(t, u)
			return ddpTerm(ddp.ETypeUntagged, ddp.CodeMSNNoBuffer, u)
		}, nil},
		{"one Send more than receives posted", 1, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			u := sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 2, 0, true, payload16)
			s.p.send(t, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, []byte("first")), u)
			s.mayPlace[s.rbuf] = true
			return ddpTerm(ddp.ETypeUntagged, ddp.CodeMSNNoBuffer, u)
		}, []WCStatus{Success}},
		// Check 4 -> 0x05; the receive it took completes with a local
		// length error.
		{"too long for the receive", 2, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			u := sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, bytes.Repeat([]byte{'x'}, recvLen+1))
			s.p.send(t, u)
			return ddpTerm(ddp.ETypeUntagged, ddp.CodeMsgTooLong, u)
		}, []WCStatus{LocLenErr}},
		// A Send with Invalidate naming the sink STag of our outstanding
		// Read, which the server saw in our Read Request: a region from
		// RegMR cannot be invalidated remotely, RFC 5040 section 4.8 0x09
		// (as TestScriptedSendInvalidateErrors). The sink stays valid.
		{"Send with Invalidate of our Read's sink", 2, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			u := sendULPDU(rdmap.OpSendInvalidate, s.readReq.SinkSTag(), rdmap.QNSend, 1, 0, true, payload16)
			s.p.send(t, u)
			s.mayPlace[s.rbuf] = true
			return rdmapTerm(rdmap.ETypeRemoteOperation, rdmap.CodeCannotInvalidate, u)
		}, []WCStatus{RemInvReqErr}},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			s := startHS(t, hsOpts{recvs: k.recvs, read: true})
			want := k.attack(t, s)
			s.wantTerminate(t, want, k.recv...)
			require.True(t, s.sink.mr.Valid(), "the Read's sink is still registered")
		})
	}
}

// RDMA Writes to STags the stack never gave the server for writing (RFC
// 5041 section 7.1 checks 1 and 2, section 7.2 codes; siw's mapping of a
// missing right to 0x00). The region aimed at is untouched.
func TestHostileServerWrite(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	type tc struct {
		name string
		aim  func(t *testing.T, s *hsScenario) (uint32, uint64)
		code uint8
	}
	cases := []tc{
		// The sink STag of our Read went out in the Read Request; it lets
		// the server place the Read Response, nothing else (the region has
		// no remote-write right).
		{"our Read's sink", func(t *testing.T, s *hsScenario) (uint32, uint64) {
			return s.readReq.SinkSTag(), s.readReq.SinkTO()
		}, ddp.CodeInvalidSTag},
		{"a receive buffer", func(t *testing.T, s *hsScenario) (uint32, uint64) {
			return s.rbuf.mr.RKey(), s.rbuf.mr.Addr()
		}, ddp.CodeInvalidSTag},
		{"a region we let the server read", func(t *testing.T, s *hsScenario) (uint32, uint64) {
			g := s.region(t, "read-only region", s.st.pd, 256, RemoteRead)
			return g.mr.RKey(), g.mr.Addr()
		}, ddp.CodeInvalidSTag},
		{"STag 0", func(t *testing.T, s *hsScenario) (uint32, uint64) {
			return 0, s.dst.mr.Addr()
		}, ddp.CodeInvalidSTag},
		// Our RTR's STag (1) is never a region: a Write with data to it is
		// no RTR.
		{"the RTR STag", func(t *testing.T, s *hsScenario) (uint32, uint64) {
			return rtrSTag, 0
		}, ddp.CodeInvalidSTag},
		{"a region deregistered", func(t *testing.T, s *hsScenario) (uint32, uint64) {
			g := s.region(t, "deregistered region", s.st.pd, 256, LocalWrite|RemoteWrite)
			require.NoError(t, g.mr.Dereg())
			return g.mr.RKey(), g.mr.Addr()
		}, ddp.CodeInvalidSTag},
		// Section 7.2 0x02 "STag not associated with DDP Stream".
		{"a region of another PD", func(t *testing.T, s *hsScenario) (uint32, uint64) {
			g := s.region(t, "other PD's region", s.st.dev.AllocPD(), 256, LocalWrite|RemoteWrite|RemoteRead)
			return g.mr.RKey(), g.mr.Addr()
		}, ddp.CodeSTagNotAssoc},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			s := startHS(t, hsOpts{recvs: 2, read: true})
			stag, to := k.aim(t, s)
			u := writeULPDU(stag, to, payload16)
			s.p.send(t, u)
			s.wantTerminate(t, ddpTerm(ddp.ETypeTagged, k.code, u))
		})
	}
}

// Untagged segments with a wrong MSN: RFC 5041 section 7.1 check 5 "The MSN
// falls in the range of legal MSNs" -> 0x03 "MSN range is not valid"; the
// first message on each queue is MSN 1 (section 4.3), and an MSN already
// used is behind the range.
func TestHostileServerMSN(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	type tc struct {
		name   string
		ext    bool
		attack func(t *testing.T, s *hsScenario) rdmap.Terminate
		recv   []WCStatus
	}
	cases := []tc{
		{"Send MSN 0", false, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			u := sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 0, 0, true, payload16)
			s.p.send(t, u)
			return ddpTerm(ddp.ETypeUntagged, ddp.CodeMSNRange, u)
		}, nil},
		{"Send MSN 1 again", false, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			u := sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, payload16)
			s.p.send(t, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, []byte("first")), u)
			s.mayPlace[s.rbuf] = true
			return ddpTerm(ddp.ETypeUntagged, ddp.CodeMSNRange, u)
		}, []WCStatus{Success}},
		{"Read Request MSN 0", false, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			u := readReqULPDU(0, 0xabcd0001, 0x5000, 16, s.dst.mr.RKey(), s.dst.mr.Addr())
			s.p.send(t, u)
			return ddpTerm(ddp.ETypeUntagged, ddp.CodeMSNRange, u)
		}, nil},
		{"Read Request MSN 1 again", false, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			s.p.send(t, readReqULPDU(1, 0xabcd0001, 0x5000, 0, 0, 0))
			require.Equal(t, writeULPDUOp(rdmap.OpReadResponse, 0xabcd0001, 0x5000), s.p.wantULPDU(t, "the zero-length Read Response"))
			u := readReqULPDU(1, 0xabcd0002, 0x6000, 16, s.dst.mr.RKey(), s.dst.mr.Addr())
			s.p.send(t, u)
			return ddpTerm(ddp.ETypeUntagged, ddp.CodeMSNRange, u)
		}, nil},
		{"Atomic Response MSN 0", true, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			res := s.region(t, "atomic result", s.st.pd, 8, LocalWrite)
			r := s.postAtomic(t, 140, res)
			s.expectSend(140, WCAtomicFetchAdd, WRFlushErr)
			u := atomicRespULPDU(0, r.ReqID(), 42)
			s.p.send(t, u)
			return ddpTerm(ddp.ETypeUntagged, ddp.CodeMSNRange, u)
		}, nil},
		{"Atomic Response MSN 1 again", true, func(t *testing.T, s *hsScenario) rdmap.Terminate {
			res := s.region(t, "atomic results", s.st.pd, 16, LocalWrite)
			for i := 0; i < 2; i++ {
				_, err := s.q.qp.PostSend(SendWR{ID: uint64(141 + i), Opcode: OpAtomicFetchAdd, Flags: Signaled,
					SGL: []SGE{res.mr.SGE(8*i, 8)}, RemoteAddr: 0x2000, RKey: 0x5678, CompareAdd: 1})
				require.NoError(t, err)
			}
			r1 := rdmap.AtomicRequest(bytes.Clone(s.p.wantAtomic(t)))
			r2 := rdmap.AtomicRequest(bytes.Clone(s.p.wantAtomic(t)))
			s.p.send(t, atomicRespULPDU(1, r1.ReqID(), 42))
			require.Equal(t, wcString(141, WCAtomicFetchAdd, Success), wcOf(waitWC(t, s.q.scq)))
			s.mayPlace[res] = true
			s.expectSend(142, WCAtomicFetchAdd, WRFlushErr)
			u := atomicRespULPDU(1, r2.ReqID(), 43)
			s.p.send(t, u)
			return ddpTerm(ddp.ETypeUntagged, ddp.CodeMSNRange, u)
		}, nil},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			// Atomic Responses answer the oldest outstanding request, so
			// the atomic cases keep no Read ahead of their atomics.
			s := startHS(t, hsOpts{ext: k.ext, recvs: 2, read: !k.ext})
			want := k.attack(t, s)
			s.wantTerminate(t, want, k.recv...)
		})
	}
}

// A peer-to-peer initiator's Read RTR (RFC 6581 section 9.2: a zero-length
// RDMA Read, the first FPDU) and the hostile server's answers to it. The
// Dial asks for peer-to-peer mode with the Read RTR alone, and holds its own
// WRs until the RTR's answer (ConnConfig.FirstFPDUHold, a minute here so
// that only events decide): a Send is posted and held.
func TestHostileServerRTR(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	start := func(t *testing.T) *hsScenario {
		t.Helper()
		s := startHS(t, hsOpts{recvs: 1, serve: func(o *serveOpts) {
			o.cfg.MPA.P2P, o.cfg.MPA.RTRs = mpa.P2POn, mpa.RTRRead
			o.cfg.FirstFPDUHold = time.Minute
			o.keepRTR = true
		}})
		require.True(t, s.p.params.P2P)
		require.Equal(t, mpa.RTRRead, s.p.params.RTR)
		require.Equal(t, uint32(rtrSTag), s.p.rtr.SinkSTag())
		_, err := s.q.qp.PostSend(SendWR{ID: 150, Opcode: OpSend, Flags: Signaled | Inline, InlineData: []byte("held")})
		require.NoError(t, err)
		return s
	}
	t.Run("answered with 16 octets", func(t *testing.T) {
		// The RTR asked for nothing: RFC 5041 section 7.1 check 4, DDP
		// tagged 0x01 base or bounds, as for any Read Response longer than
		// its Read. The held Send never leaves.
		s := start(t)
		u := rrULPDU(s.p.rtr.SinkSTag(), s.p.rtr.SinkTO(), true, payload16)
		s.p.send(t, u)
		s.expectSend(150, WCSend, WRFlushErr)
		s.wantTerminate(t, ddpTerm(ddp.ETypeTagged, ddp.CodeBaseBounds, u))
	})
	t.Run("answered twice", func(t *testing.T) {
		// The first answer completes the RTR and releases the Send; the
		// second answers no Read: RFC 5040 section 4.8 0x06.
		s := start(t)
		s.p.send(t, rrULPDU(s.p.rtr.SinkSTag(), s.p.rtr.SinkTO(), true, nil))
		u := s.p.wantULPDU(t, "the held Send")
		require.Equal(t, "held", string(u[ddp.UntaggedHdrLen:]))
		s.expectSend(150, WCSend, Success)
		dup := rrULPDU(s.p.rtr.SinkSTag(), s.p.rtr.SinkTO(), true, nil)
		s.p.send(t, dup)
		s.wantTerminate(t, rdmapTerm(rdmap.ETypeRemoteOperation, rdmap.CodeUnexpectedOpcode, dup))
	})
	t.Run("zero-length answer to another STag and TO", func(t *testing.T) {
		// RFC 5041 section 5.2: "The STag and TO fields MUST NOT be checked
		// for a zero-length Tagged DDP Message" (as
		// TestScriptedZeroLengthWriteNotChecked): an empty Read Response
		// answers the empty Read whatever it names. The RTR completes and
		// the held Send leaves.
		s := start(t)
		s.p.send(t, rrULPDU(0xdeadbeef, 1<<64-1, true, nil))
		u := s.p.wantULPDU(t, "the held Send, released by the RTR's answer")
		require.Equal(t, "held", string(u[ddp.UntaggedHdrLen:]), "%s", describeULPDU(u))
		require.Equal(t, wcString(150, WCSend, Success), wcOf(waitWC(t, s.q.scq)))
		s.wantOrderlyEnd(t)
	})
	t.Run("a Send before the answer is delivered", func(t *testing.T) {
		// The server has the RTR, so it may send (RFC 6581 section 9.2);
		// its Send does not answer the RTR, which stays outstanding and
		// keeps our Send held until the answer comes.
		s := start(t)
		s.p.send(t, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, []byte("early")))
		require.Equal(t, wcString(1, WCRecv, Success), wcOf(waitWC(t, s.q.rcq)))
		require.Equal(t, "early", string(s.rbuf.region()[:5]))
		s.p.wantNothing(t, 200*time.Millisecond, "the Send is held until the RTR's answer")
		require.Zero(t, s.q.qp.Stats().ReadsOutstanding, "the RTR is no Read of the user's")
		s.p.send(t, rrULPDU(s.p.rtr.SinkSTag(), s.p.rtr.SinkTO(), true, nil))
		u := s.p.wantULPDU(t, "the held Send")
		require.Equal(t, "held", string(u[ddp.UntaggedHdrLen:]))
		require.Equal(t, wcString(150, WCSend, Success), wcOf(waitWC(t, s.q.scq)))
		s.wantOrderlyEnd(t)
	})
	t.Run("a Terminate instead of the answer", func(t *testing.T) {
		// RFC 6581 section 8: an RTR the responder cannot take is LLP 0x07
		// in a Terminate. It is the server's: delivered, never answered;
		// the held Send flushes.
		s := start(t)
		want := llpTerm(mpa.CodeNoMatchingRTR)
		s.p.send(t, sendULPDU(rdmap.OpTerminate, 0, rdmap.QNTerminate, 1, 0, true, terminateULPDU(want)[ddp.UntaggedHdrLen:]))
		s.p.closeWrite(t)
		s.expectSend(150, WCSend, WRFlushErr)
		s.wantRemoteTerminate(t, want, false)
	})
}
