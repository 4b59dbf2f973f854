package verbs

import (
	"fmt"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// Terminates the peer sends, and a dialed QP's error path, with the
// scripted raw peer of scripted_test.go.

// A Terminate from the peer (RFC 5040 section 5.4): the stack must not
// answer with a Terminate, only close; qp.Err() is the peer's decoded
// Terminate with Remote true.
func TestScriptedPeerTerminate(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	badWrite := writeULPDU(0xdeadbeef, 0x1000, payload16)
	rr := readReqULPDU(1, 0xabcd0001, 0x5000, 64, 0xdeadbeef, 0x1000)
	cases := []struct {
		name string
		body []byte // the Terminate header, after the untagged DDP header
		want rdmap.Terminate
	}{
		{"DDP tagged invalid STag", terminateULPDU(ddpTerm(ddp.ETypeTagged, ddp.CodeInvalidSTag, badWrite))[ddp.UntaggedHdrLen:],
			ddpTerm(ddp.ETypeTagged, ddp.CodeInvalidSTag, badWrite)},
		{"RDMAP remote protection with the Read Request", terminateULPDU(rdmapTerm(rdmap.ETypeRemoteProtection, rdmap.CodeInvalidSTag, rr))[ddp.UntaggedHdrLen:],
			rdmapTerm(rdmap.ETypeRemoteProtection, rdmap.CodeInvalidSTag, rr)},
		{"LLP CRC, no headers", []byte{0x20, 0x02, 0x00, 0x00}, llpTerm(mpa.CodeCRC)},
		// Observed on the wire: Linux siw on x86 sends the
		// control word with its C bitfields in little-endian order.
		{"siw form: DDP tagged invalid STag",
			append([]byte{0x11, 0x00, 0x03, 0x00, 0x00, 0x10}, badWrite[:ddp.TaggedHdrLen]...),
			rdmap.Terminate{Layer: rdmap.LayerDDP, EType: uint8(ddp.ETypeTagged), Code: ddp.CodeInvalidSTag,
				M: true, D: true, SegLen: 0x10, DDPHdr: badWrite[:ddp.TaggedHdrLen], SiwForm: true}},
		{"siw form: LLP CRC", []byte{0x02, 0x02, 0x00, 0x00},
			rdmap.Terminate{Layer: rdmap.LayerLLP, EType: rdmap.ETypeMPA, Code: uint8(mpa.CodeCRC), SiwForm: true}},
	}
	// Long bodies: whatever a Terminate carries is read as far as it
	// matters and the rest discarded, never answered (an outside
	// hostile-peer suite found 111 octets and more answered with "DDP
	// message too long"). The RFC-encoded LLP CRC control word, then zeros.
	for _, n := range []int{52, 110, 111, 200, 1000, 4000} {
		body := make([]byte, n)
		copy(body, []byte{0x20, 0x02, 0x00, 0x00})
		cases = append(cases, struct {
			name string
			body []byte
			want rdmap.Terminate
		}{fmt.Sprintf("LLP CRC, body of %d octets", n), body, llpTerm(mpa.CodeCRC)})
	}
	// The outside suite's own case: 02 06 00 00 and 196 zeros, which
	// decodes as RDMAP(0), remote operation(2), code 6.
	long := make([]byte, 200)
	copy(long, []byte{0x02, 0x06, 0x00, 0x00})
	cases = append(cases, struct {
		name string
		body []byte
		want rdmap.Terminate
	}{"outside suite: 200 octets", long, rdmap.Terminate{Layer: rdmap.LayerRDMAP, EType: rdmap.ETypeRemoteOperation, Code: 6}})
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			s := startScenario(t, scenarioOpts{recvs: 2})
			s.p.send(t, sendULPDU(rdmap.OpTerminate, 0, rdmap.QNTerminate, 1, 0, true, k.body))
			s.p.closeWrite(t) // as siw does: Terminate, then drop the connection
			s.wantRemoteTerminate(t, k.want)
		})
	}
	t.Run("peer keeps the connection open", func(t *testing.T) {
		// The stack must close on its own after a Terminate, not wait for
		// the peer.
		s := startScenario(t, scenarioOpts{recvs: 2})
		start := time.Now()
		s.p.send(t, sendULPDU(rdmap.OpTerminate, 0, rdmap.QNTerminate, 1, 0, true, []byte{0x20, 0x02, 0x00, 0x00}))
		s.p.wantClosed(t)
		took := time.Since(start)
		t.Logf("the stack closed %v after the peer's Terminate", took.Round(time.Millisecond))
		require.Less(t, took, termLinger+time.Second)
		s.wantRemoteTerminate(t, llpTerm(mpa.CodeCRC))
	})
	t.Run("to a QP that dialed", func(t *testing.T) {
		// The same with the raw peer as the MPA responder.
		st := newStackSide(t, ConnConfig{})
		q := st.newQP(t, 0, 0)
		rb := regGuarded(t, st.pd, 64, LocalWrite)
		_, err := q.qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{rb.mr.SGE(0, 64)}})
		require.NoError(t, err)
		p := answerDial(t, q.qp, ConnConfig{}, mpa.Config{IRD: 8, ORD: 8})
		want := ddpTerm(ddp.ETypeTagged, ddp.CodeInvalidSTag, badWrite)
		p.send(t, sendULPDU(rdmap.OpTerminate, 0, rdmap.QNTerminate, 1, 0, true, terminateULPDU(want)[ddp.UntaggedHdrLen:]))
		p.closeWrite(t)
		p.wantClosed(t)
		p.close()
		waitDone(t, q.qp, peerTimeout)
		te := termErr(t, q.qp)
		require.True(t, te.Remote)
		require.Equal(t, want, te.Terminate)
		require.Equal(t, []string{wcString(1, WCRecv, WRFlushErr)}, wcStrings(drainWC(q.rcq)))
		rb.requireUntouched(t, "receive buffer")
	})
}

// A QP that dialed a raw responder terminates just the same.
func TestScriptedDialedQPWriteError(t *testing.T) {
	checkRoutines(t)
	st := newStackSide(t, ConnConfig{})
	q := st.newQP(t, 0, 0)
	g := regGuarded(t, st.pd, 256, LocalWrite|RemoteWrite)
	p := answerDial(t, q.qp, ConnConfig{}, mpa.Config{IRD: 8, ORD: 8})
	u := writeULPDU(g.mr.RKey(), g.mr.Addr()+250, payload16)
	p.send(t, u)
	want := ddpTerm(ddp.ETypeTagged, ddp.CodeBaseBounds, u)
	p.wantTerminate(t, want)
	p.wantClosed(t)
	p.close()
	waitDone(t, q.qp, peerTimeout)
	te := termErr(t, q.qp)
	require.False(t, te.Remote)
	require.Equal(t, want, te.Terminate)
	g.requireUntouched(t, "target region")
}
