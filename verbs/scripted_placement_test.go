package verbs

import (
	"bytes"
	"testing"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// Placement errors of RDMA Writes and Sends, with the scripted raw peer of
// scripted_test.go.

// RDMA Write placement errors: RFC 5041 section 7.1 (checks on a non-zero-
// length tagged segment, before any placement) and section 7.2 (tagged
// buffer error codes); the Terminate carries M, D, the DDP segment length
// and the 14-octet tagged header (RFC 5040 section 4.8, Figure 10).
func TestScriptedWriteErrors(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	type tc struct {
		name string
		// aim returns STag and TO for a 16-octet Write, and may register
		// regions of its own.
		aim  func(t *testing.T, s *scenario) (uint32, uint64)
		code uint8
	}
	cases := []tc{
		// RFC 5041 section 7.1 check 1 "The STag is valid for this stream"
		// -> 0x00 Invalid STag. A wrong key with a live index, an index
		// never issued, STag 0 and a deregistered region.
		{"invalid STag/wrong key", func(t *testing.T, s *scenario) (uint32, uint64) {
			return s.dst.mr.RKey() ^ 0x5a, s.dst.mr.Addr()
		}, ddp.CodeInvalidSTag},
		{"invalid STag/unknown index", func(t *testing.T, s *scenario) (uint32, uint64) {
			return s.dst.mr.RKey() ^ 0x00800000, s.dst.mr.Addr()
		}, ddp.CodeInvalidSTag},
		{"invalid STag/zero", func(t *testing.T, s *scenario) (uint32, uint64) {
			return 0, s.dst.mr.Addr()
		}, ddp.CodeInvalidSTag},
		{"invalid STag/deregistered", func(t *testing.T, s *scenario) (uint32, uint64) {
			g := s.region(t, "deregistered region", s.st.pd, 256, LocalWrite|RemoteWrite)
			require.NoError(t, g.mr.Dereg())
			return g.mr.RKey(), g.mr.Addr()
		}, ddp.CodeInvalidSTag},
		// RFC 5041 section 7.2 0x02 "STag not associated with DDP Stream":
		// the protection-domain association of section 8.2.
		{"STag of another PD", func(t *testing.T, s *scenario) (uint32, uint64) {
			g := s.region(t, "other PD's region", s.st.dev.AllocPD(), 256, LocalWrite|RemoteWrite|RemoteRead)
			return g.mr.RKey(), g.mr.Addr()
		}, ddp.CodeSTagNotAssoc},
		// Check 2 "The STag has an associated buffer that allows Placement":
		// RFC 5041 has no code for missing rights; 0x00 as Linux siw
		// (siw_tagged_error: E_ACCESS_PERM -> DDP_ECODE_T_INVALID_STAG).
		{"no remote-write right", func(t *testing.T, s *scenario) (uint32, uint64) {
			g := s.region(t, "read-only region", s.st.pd, 256, LocalWrite|RemoteRead)
			return g.mr.RKey(), g.mr.Addr()
		}, ddp.CodeInvalidSTag},
		// Checks 3 and 4: TO and TO+length within the buffer -> 0x01.
		{"past the end", func(t *testing.T, s *scenario) (uint32, uint64) {
			return s.dst.mr.RKey(), s.dst.mr.Addr() + 4096 - 8
		}, ddp.CodeBaseBounds},
		{"TO at the end", func(t *testing.T, s *scenario) (uint32, uint64) {
			return s.dst.mr.RKey(), s.dst.mr.Addr() + 4096
		}, ddp.CodeBaseBounds},
		{"TO below base", func(t *testing.T, s *scenario) (uint32, uint64) {
			return s.dst.mr.RKey(), s.dst.mr.Addr() - 8
		}, ddp.CodeBaseBounds},
		// Check 5: "the DDP Segment payload length and the TO does not
		// wrap" -> 0x03 TO wrap, also when the last octet is at 2^64-1.
		{"TO wrap", func(t *testing.T, s *scenario) (uint32, uint64) {
			return s.dst.mr.RKey(), 1<<64 - 8
		}, ddp.CodeTOWrap},
		{"TO wrap to zero", func(t *testing.T, s *scenario) (uint32, uint64) {
			return s.dst.mr.RKey(), 1<<64 - 16
		}, ddp.CodeTOWrap},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			s := startScenario(t, scenarioOpts{recvs: 2})
			stag, to := k.aim(t, s)
			u := writeULPDU(stag, to, payload16)
			s.p.send(t, u)
			s.wantTerminate(t, ddpTerm(ddp.ETypeTagged, k.code, u))
		})
	}
}

// RFC 5041 section 5.2: "The STag and TO fields MUST NOT be checked for a
// zero-length Tagged DDP Message": a zero-length Write to nowhere is no
// error.
func TestScriptedZeroLengthWriteNotChecked(t *testing.T) {
	checkRoutines(t)
	s := startScenario(t, scenarioOpts{recvs: 1, noRead: true})
	s.p.send(t, writeULPDU(0xdeadbeef, 1<<64-1, nil),
		sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, []byte("after")))
	wc := waitWC(t, s.q.rcq)
	require.Equal(t, Success, wc.Status, "%v", wc)
	require.Equal(t, "after", string(s.rbuf.region()[:wc.ByteLen]))
	s.mayPlace[s.rbuf] = true
	require.Equal(t, StateRTS, s.q.qp.State())
	s.p.closeWrite(t)
	s.p.wantClosed(t)
	waitDone(t, s.q.qp, peerTimeout)
	require.ErrorIs(t, s.q.qp.Err(), ErrDisconnected)
}

// Send placement errors: RFC 5041 section 7.1 (checks on a non-zero-length
// untagged segment) and section 7.2 (untagged buffer error codes); M, D, the
// segment length and the 18-octet untagged header.
func TestScriptedSendErrors(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	type tc struct {
		name  string
		recvs int
		u     []byte
		code  uint8
		recv  []WCStatus
	}
	short := bytes.Repeat([]byte{'x'}, 65) // one octet more than a 64-octet receive buffer
	cases := []tc{
		// Check 2 "The QN and MSN have an associated buffer": iWARP has no
		// receiver-not-ready; 0x02 "Invalid MSN - no buffer available" (siw
		// the same).
		{"no posted receive", 0, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, payload16), ddp.CodeMSNNoBuffer, nil},
		// Check 4 "the sum of the MO and the payload length falls in the
		// buffer" -> 0x05 "DDP Message too long for available buffer". The
		// receive it consumed completes with a local length error. (siw
		// reports 0x02 here, see the report.)
		{"too long for the buffer", 2, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, short), ddp.CodeMsgTooLong,
			[]WCStatus{LocLenErr}},
		// Check 1 "The QN is valid for this stream" -> 0x01. RDMAP has
		// queues 0..2 (RFC 5040 Appendix B); a Send belongs on QN 0.
		{"QN 5", 2, sendULPDU(rdmap.OpSend, 0, 5, 1, 0, true, payload16), ddp.CodeInvalidQN, nil},
		{"QN 3 without RFC 7306", 2, sendULPDU(rdmap.OpSend, 0, 3, 1, 0, true, payload16), ddp.CodeInvalidQN, nil},
		{"Send on the Read Request queue", 2, sendULPDU(rdmap.OpSend, 0, rdmap.QNReadRequest, 1, 0, true, payload16), ddp.CodeInvalidQN, nil},
		{"Read Request on the Send queue", 2, rdmap.AppendReadRequest(
			ddp.AppendUntagged(nil, true, rdmap.Ctrl(rdmap.OpReadRequest), 0, rdmap.QNSend, 1, 0), 0x100, 0, 8, 0x200, 0),
			ddp.CodeInvalidQN, nil},
		// Check 5 "The MSN falls in the range of legal MSNs": MSN 0 is behind
		// the first message (MSN 1, RFC 5041 section 4.3) and 0x12345678 is
		// beyond any window -> 0x03 "MSN range is not valid".
		{"MSN behind", 2, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 0, 0, true, payload16), ddp.CodeMSNRange, nil},
		{"MSN far ahead", 2, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 0x12345678, 0, true, payload16), ddp.CodeMSNRange, nil},
		{"Read Request MSN behind", 2, readReqULPDU(0, 0x100, 0, 8, 0x200, 0), ddp.CodeMSNRange, nil},
		// Check 3 "The MO falls in the range of legal offsets" -> 0x04.
		{"MO beyond the buffer", 2, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0x10000, true, payload16), ddp.CodeInvalidMO, nil},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			s := startScenario(t, scenarioOpts{recvs: k.recvs})
			s.p.send(t, k.u)
			s.wantTerminate(t, ddpTerm(ddp.ETypeUntagged, k.code, k.u), k.recv...)
		})
	}
}

// Send with Invalidate naming an STag that cannot be invalidated: RFC 5040
// section 4.8 code 0x09 "STag cannot be Invalidated", remote operation
// error (siw uses remote protection when the STag is of another PD, remote
// operation otherwise). A region from RegMR is not invalidatable here (only
// fast-registration STags are; siw invalidates any STag of the PD). The
// Send itself was placed; its receive completes with "remote invalid
// request error".
func TestScriptedSendInvalidateErrors(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	cases := []struct {
		name string
		stag func(s *scenario) uint32
	}{
		{"regular region", func(s *scenario) uint32 { return s.dst.mr.RKey() }},
		{"unknown STag", func(s *scenario) uint32 { return s.dst.mr.RKey() ^ 0x5a }},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			s := startScenario(t, scenarioOpts{recvs: 2})
			u := sendULPDU(rdmap.OpSendInvalidate, k.stag(s), rdmap.QNSend, 1, 0, true, payload16)
			s.p.send(t, u)
			s.mayPlace[s.rbuf] = true
			s.wantTerminate(t, rdmapTerm(rdmap.ETypeRemoteOperation, rdmap.CodeCannotInvalidate, u), RemInvReqErr)
			require.True(t, s.dst.mr.Valid(), "the region must stay valid")
		})
	}
}
