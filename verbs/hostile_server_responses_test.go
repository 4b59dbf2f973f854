package verbs

import (
	"bytes"
	"testing"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// A hostile server's Read and Atomic Responses that answer nothing we
// asked. The harness is hostile_server_test.go.

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
