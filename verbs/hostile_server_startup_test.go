package verbs

import (
	"bytes"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// A hostile server's start-up: MPA Replies TestHostileDial does not cover,
// IRD/ORD lies, and its answers to our RTR. The harness is
// hostile_server_test.go.

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
