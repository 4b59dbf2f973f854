package verbs

import (
	"io"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// Hostile initiators of peer-to-peer mode at our Listener: the RTR after
// the Reply (RFC 6581). The harness is startup_hostile_test.go.

// Peer-to-peer responder (RFC 6581 section 9.2): after the Reply, the
// initiator's first FPDU must be the agreed RTR; anything else is LLP code
// 0x07 "No matching RTR option" (section 8), sent in a Terminate with no
// headers (RFC 5040 Figure 10), and Accept fails. So does an RTR that does
// not come within RequestTimeout.
func TestHostileRTR(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	listener := mpa.Config{P2P: mpa.P2POn, RTRs: mpa.RTRWrite | mpa.RTRRead}
	good := mpa.Config{P2P: mpa.P2POn, RTRs: mpa.RTRWrite, IRD: 4, ORD: 4}
	type tc struct {
		name   string
		offer  mpa.RTR
		first  []byte // the initiator's first ULPDU; nil: none
		badCRC bool
		term   rdmap.Terminate // what we send; zero: nothing but the close
		remote *rdmap.Terminate
		err    error // what Accept returns (errors.Is)
		bug    string
	}
	rtrTerm := llpTerm(mpa.CodeNoMatchingRTR)
	cases := []tc{
		{name: "zero-length Send instead of the Write RTR", offer: mpa.RTRWrite,
			first: sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, nil), term: rtrTerm, err: mpa.ErrNoMatchingRTR},
		{name: "zero-length Read instead of the Write RTR", offer: mpa.RTRWrite,
			first: readReqULPDU(1, rtrSTag, 0, 0, rtrSTag, 0), term: rtrTerm, err: mpa.ErrNoMatchingRTR},
		{name: "Write RTR with payload", offer: mpa.RTRWrite,
			first: writeULPDU(rtrSTag, 0, payload16), term: rtrTerm, err: mpa.ErrNoMatchingRTR},
		{name: "Send with data first", offer: mpa.RTRWrite,
			first: sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, []byte("hello")), term: rtrTerm, err: mpa.ErrNoMatchingRTR},
		{name: "zero-length Write instead of the Read RTR", offer: mpa.RTRRead,
			first: writeULPDU(rtrSTag, 0, nil), term: rtrTerm, err: mpa.ErrNoMatchingRTR},
		// The Read RTR is a zero-length RDMA Read (RFC 6581 section 9.2): a
		// Read Request for data is no RTR, whatever its STag.
		{name: "Read RTR asking for data", offer: mpa.RTRRead,
			first: readReqULPDU(1, rtrSTag, 0, 16, rtrSTag, 0), term: rtrTerm, err: mpa.ErrNoMatchingRTR},
		// RFC 5044 section 7.1.2 rule 4: the responder must "receive and
		// validate" the FPDU; a bad CRC is LLP code 0x02 (section 8).
		{name: "Write RTR with a bad CRC", offer: mpa.RTRWrite,
			first: writeULPDU(rtrSTag, 0, nil), badCRC: true, term: llpTerm(mpa.CodeCRC), err: mpa.ErrCRC},
		// Section 9.2: "If the initiator is not able to generate any of the
		// responder-supported RTR indications, then it MUST send a TERM
		// message ... Error Code 7". That is the peer's Terminate: it is
		// delivered to the ULP (RFC 5040 section 5.4), so Accept reports
		// it, and we send nothing back but the close.
		{name: "Terminate instead of the RTR", offer: mpa.RTRWrite,
			first:  sendULPDU(rdmap.OpTerminate, 0, rdmap.QNTerminate, 1, 0, true, []byte{0x20, 0x07, 0x00, 0x00}),
			remote: &rtrTerm, bug: bugRTRTerminate},
		// Nothing after the Reply: Accept gives up at RequestTimeout with a
		// Terminate 0x07. (siw_accept cancels its MPA timer and then waits
		// for the RTR without one.)
		{name: "no RTR", offer: mpa.RTRWrite, term: rtrTerm, err: mpa.ErrNoMatchingRTR},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			s := newStackSide(t, ConnConfig{MPA: listener, RequestTimeout: hostileTimeout})
			q := s.newQP(t, 4, 4)
			errc := s.acceptAsync(q)
			// Before the Request: the wait for the RTR starts after our
			// Reply is written, so no delay of this goroutine can make it
			// look shorter.
			start := time.Now()
			p := dialPeer(t, s.ln.Addr().String(), mpa.Config{P2P: mpa.P2POn, RTRs: k.offer, IRD: 4, ORD: 4})
			require.True(t, p.params.P2P)
			require.Equal(t, k.offer, p.params.RTR, "the RTR the stack chose")
			if k.first != nil {
				b := p.encode(t, k.first)
				if k.badCRC {
					b[len(b)-1] ^= 0xff
				}
				p.write(t, b)
			}
			if k.remote != nil {
				p.closeWrite(t) // Terminate, then FIN, as siw does
				if u, err := p.next(); err == nil {
					knownBug(t, k.bug, "the stack answered the peer's Terminate with an FPDU: %x", u)
				} else {
					require.ErrorIs(t, err, io.EOF, "the stack closes and sends nothing")
				}
			} else {
				p.wantTerminate(t, k.term)
				if k.first == nil {
					took := time.Since(start)
					t.Logf("Terminate %v after the Request", took.Round(time.Millisecond))
					require.GreaterOrEqual(t, took, hostileTimeout)
					require.Less(t, took, hostileTimeout+timeoutSlack)
				}
				p.wantClosed(t)
			}
			p.close()
			err := recvErr(t, errc, "Accept")
			waitDone(t, q.qp, peerTimeout)
			te := termErr(t, q.qp)
			if k.remote != nil {
				require.True(t, te.Remote)
				require.Equal(t, *k.remote, te.Terminate)
			} else {
				require.False(t, te.Remote)
				require.Equal(t, k.term, te.Terminate)
			}
			s.wantServesRaw(t, nil, good)
			if err == nil {
				knownBug(t, bugAwaitRTR, "Accept returned nil; the QP is %v with %v", q.qp.State(), q.qp.Err())
			}
			if k.remote != nil {
				var got *TerminateError
				require.ErrorAs(t, err, &got)
				require.True(t, got.Remote)
			} else {
				require.ErrorIs(t, err, k.err, "Accept")
			}
		})
	}
}
