package verbs

import (
	"bytes"
	"testing"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// A hostile server's Sends, RDMA Writes and MSNs that break the rules of
// placement. The harness is hostile_server_test.go.

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
