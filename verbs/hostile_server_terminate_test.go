package verbs

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// Terminates from a hostile server. The harness is hostile_server_test.go.

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
		// Linux siw's byte-swapped control word, as observed on the wire.
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
