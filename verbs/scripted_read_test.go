package verbs

import (
	"bytes"
	"testing"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// RDMA Read Requests and Read Responses the scripted raw peer of
// scripted_test.go gets wrong.

// RDMA Read Request checks at the Data Source: RFC 5040 section 7.2 item 4
// (a non-zero-length request: source STag valid, associated with the stream,
// TO and TO+size within its buffer, no wrap) with the remote protection
// error codes of section 4.8, plus 0x02 "access rights violation" for a
// region without remote read. Figure 10: remote protection errors carry M, D
// and, for a Read Request, R with the 28-octet Read Request header.
func TestScriptedReadRequestErrors(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	type tc struct {
		name string
		aim  func(t *testing.T, s *scenario) (uint32, uint64, uint32)
		code uint8
	}
	cases := []tc{
		{"invalid source STag", func(t *testing.T, s *scenario) (uint32, uint64, uint32) {
			return s.dst.mr.RKey() ^ 0x5a, s.dst.mr.Addr(), 64
		}, rdmap.CodeInvalidSTag},
		{"no remote-read right", func(t *testing.T, s *scenario) (uint32, uint64, uint32) {
			g := s.region(t, "write-only region", s.st.pd, 256, LocalWrite|RemoteWrite)
			return g.mr.RKey(), g.mr.Addr(), 64
		}, rdmap.CodeAccessRights},
		{"source of another PD", func(t *testing.T, s *scenario) (uint32, uint64, uint32) {
			g := s.region(t, "other PD's region", s.st.dev.AllocPD(), 256, LocalWrite|RemoteWrite|RemoteRead)
			return g.mr.RKey(), g.mr.Addr(), 64
		}, rdmap.CodeSTagNotAssoc},
		{"past the end", func(t *testing.T, s *scenario) (uint32, uint64, uint32) {
			return s.dst.mr.RKey(), s.dst.mr.Addr() + 4000, 97
		}, rdmap.CodeBaseBounds},
		{"TO below base", func(t *testing.T, s *scenario) (uint32, uint64, uint32) {
			return s.dst.mr.RKey(), s.dst.mr.Addr() - 1, 64
		}, rdmap.CodeBaseBounds},
		{"TO wrap", func(t *testing.T, s *scenario) (uint32, uint64, uint32) {
			return s.dst.mr.RKey(), 1<<64 - 32, 64
		}, rdmap.CodeTOWrap},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			s := startScenario(t, scenarioOpts{recvs: 2})
			stag, to, size := k.aim(t, s)
			u := readReqULPDU(1, 0xabcd0001, 0x5000, size, stag, to)
			s.p.send(t, u)
			s.wantTerminate(t, rdmapTerm(rdmap.ETypeRemoteProtection, k.code, u))
		})
	}
}

// RFC 5040 section 7.2 checks the source only "for a non-zero length RDMA
// Read Request": a zero-length one with a bogus source STag is answered with
// a zero-length Read Response to the sink, not terminated.
func TestScriptedZeroLengthReadNotChecked(t *testing.T) {
	checkRoutines(t)
	s := startScenario(t, scenarioOpts{noRead: true})
	s.p.send(t, readReqULPDU(1, 0xabcd0001, 0x5000, 0, 0xdeadbeef, 1<<64-1))
	u := s.p.wantULPDU(t, "a zero-length Read Response")
	require.Equal(t, writeULPDUOp(rdmap.OpReadResponse, 0xabcd0001, 0x5000), u)
	require.Equal(t, StateRTS, s.q.qp.State())
	s.p.closeWrite(t)
	s.p.wantClosed(t)
	waitDone(t, s.q.qp, peerTimeout)
	require.ErrorIs(t, s.q.qp.Err(), ErrDisconnected)
}

// A Read Request beyond the negotiated IRD. The IRD is the number of
// buffers RDMAP keeps on untagged queue 1 (RFC 5040 section 5.2 and RFC 6581
// section 9's IRD); a request that finds none is RFC 5041 section 7.1 check
// 2, 0x02 "Invalid MSN - no buffer available", with the 18-octet DDP header
// and no R (it is a DDP error). siw reports RDMAP remote operation 0x07
// (catastrophic, localized to the stream) instead: see the report.
func TestScriptedReadBeyondIRD(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	t.Run("IRD 0", func(t *testing.T) {
		// The peer's ORD 0 makes the stack's IRD 0 (RFC 6581 section 9):
		// any Read Request is beyond it, deterministically.
		s := startScenario(t, scenarioOpts{recvs: 1, peer: &mpa.Config{IRD: 8, ORD: 0}})
		require.Zero(t, s.q.qp.Params().IRD)
		u := readReqULPDU(1, 0xabcd0001, 0x5000, 64, s.dst.mr.RKey(), s.dst.mr.Addr())
		s.p.send(t, u)
		s.wantTerminate(t, ddpTerm(ddp.ETypeUntagged, ddp.CodeMSNNoBuffer, u))
	})
	t.Run("IRD+1", func(t *testing.T) {
		// IRD 2 and three requests in one write. Each asks for 8 MiB, so
		// the stack is still answering the first when the third arrives
		// microseconds later; the Terminate follows whatever Read Response
		// segments it had under way.
		s := startScenario(t, scenarioOpts{recvs: 1, ird: 2})
		require.Equal(t, uint16(2), s.q.qp.Params().IRD)
		src := s.region(t, "8 MiB source", s.st.pd, 8<<20, RemoteRead)
		var us [][]byte
		for msn := uint32(1); msn <= 3; msn++ {
			us = append(us, readReqULPDU(msn, 0xabcd0000+msn, 0, 8<<20, src.mr.RKey(), src.mr.Addr()))
		}
		s.p.send(t, us...)
		isResponse := func(u []byte) bool {
			return u[0]&ddp.FlagTagged != 0 && rdmap.CtrlOpcode(u[1]) == rdmap.OpReadResponse
		}
		s.p.wantTerminateAfter(t, isResponse, ddpTerm(ddp.ETypeUntagged, ddp.CodeMSNNoBuffer, us[2]))
		s.finishLocal(t, ddpTerm(ddp.ETypeUntagged, ddp.CodeMSNNoBuffer, us[2]))
	})
}

// Read Responses that do not answer our oldest outstanding Read.
func TestScriptedReadResponseErrors(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	t.Run("unsolicited", func(t *testing.T) {
		// No Read outstanding: the opcode is unexpected (RFC 5040 section
		// 4.8 code 0x06, remote operation error). siw reports a DDP local
		// catastrophic error ("ORQ empty") with no headers.
		s := startScenario(t, scenarioOpts{recvs: 2, noRead: true})
		u := append(writeULPDUOp(rdmap.OpReadResponse, s.dst.mr.RKey(), s.dst.mr.Addr()), payload16...)
		s.p.send(t, u)
		s.wantTerminate(t, rdmapTerm(rdmap.ETypeRemoteOperation, rdmap.CodeUnexpectedOpcode, u))
	})
	t.Run("wrong sink STag", func(t *testing.T) {
		// The response must go to the sink STag of the request (RFC 5040
		// section 4.4); anything else is DDP invalid STag, as siw
		// (siw_rresp_check_ntoh), even if the STag is a valid region.
		s := startScenario(t, scenarioOpts{recvs: 2})
		u := append(writeULPDUOp(rdmap.OpReadResponse, s.dst.mr.RKey(), s.dst.mr.Addr()), payload16...)
		s.p.send(t, u)
		s.wantTerminate(t, ddpTerm(ddp.ETypeTagged, ddp.CodeInvalidSTag, u))
	})
	t.Run("wrong sink TO", func(t *testing.T) {
		// Right STag, TO not where the response must continue: base or
		// bounds (siw's choice too).
		s := startScenario(t, scenarioOpts{recvs: 2})
		u := append(writeULPDUOp(rdmap.OpReadResponse, s.readReq.SinkSTag(), s.readReq.SinkTO()+8), payload16...)
		s.p.send(t, u)
		s.wantTerminate(t, ddpTerm(ddp.ETypeTagged, ddp.CodeBaseBounds, u))
	})
	t.Run("longer than the Read", func(t *testing.T) {
		s := startScenario(t, scenarioOpts{recvs: 2})
		u := append(writeULPDUOp(rdmap.OpReadResponse, s.readReq.SinkSTag(), s.readReq.SinkTO()), bytes.Repeat([]byte{1}, 33)...)
		s.p.send(t, u)
		s.wantTerminate(t, ddpTerm(ddp.ETypeTagged, ddp.CodeBaseBounds, u))
	})
}
