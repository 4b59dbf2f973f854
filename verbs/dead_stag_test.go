package verbs

import (
	"bytes"
	"testing"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// Dead STags stay dead (SECURITY.md) for memory a WR resolved when it was
// posted, too: a Read's sink and a posted receive. The peer may invalidate
// a fast-registration STag of ours with Send with Invalidate; from then on
// nothing reaches that memory through it. Before, the Read's sink and the
// receive's buffer, resolved at post time, were filled anyway and their WRs
// completed with Success.

// readSinkSetup posts a Read into a fast-registered sink and returns the
// raw peer that answers it, the Read Request, the sink's STag and memory.
func readSinkSetup(t *testing.T) (*stackQP, *rawPeer, rdmap.ReadRequest, uint32, *MR, []byte) {
	t.Helper()
	st := newStackSide(t, ConnConfig{})
	q := st.newQP(t, 0, 4)
	fmr, err := st.pd.AllocMR()
	require.NoError(t, err)
	sink := make([]byte, 64)
	rb, err := st.pd.RegMR(make([]byte, 64), LocalWrite)
	require.NoError(t, err)
	_, err = q.qp.PostRecv(RecvWR{ID: 7, SGL: []SGE{rb.SGE(0, 64)}})
	require.NoError(t, err)
	p := answerDial(t, q.qp, ConnConfig{}, mpa.Config{IRD: 8, ORD: 8})
	stag, err := q.qp.PostRegMR(1, Signaled, fmr, sink, LocalWrite|RemoteWrite)
	require.NoError(t, err)
	require.Equal(t, Success, waitWC(t, q.scq).Status)
	_, err = q.qp.PostSend(SendWR{ID: 2, Opcode: OpRDMARead, Flags: Signaled, SGL: []SGE{fmr.SGE(0, 64)}, RemoteAddr: 0x1000, RKey: 0x1234})
	require.NoError(t, err)
	rr := p.wantReadRequest(t, 2) // MSN 1 was the RTR
	require.Equal(t, stag, rr.SinkSTag())
	return q, p, rr, stag, fmr, sink
}

func TestReadResponseIntoInvalidatedSink(t *testing.T) {
	checkRoutines(t)
	q, p, rr, stag, fmr, sink := readSinkSetup(t)
	p.send(t, sendULPDU(rdmap.OpSendInvalidate, stag, rdmap.QNSend, 1, 0, true, []byte("inv")))
	wc := waitWC(t, q.rcq)
	require.Equal(t, Success, wc.Status)
	require.Equal(t, WithInv, wc.Flags&WithInv)
	require.False(t, fmr.Valid())

	u := append(ddp.AppendTagged(nil, true, rdmap.Ctrl(rdmap.OpReadResponse), stag, rr.SinkTO()), bytes.Repeat([]byte{0xee}, 64)...)
	p.send(t, u)
	p.wantTerminate(t, ddpTerm(ddp.ETypeTagged, ddp.CodeInvalidSTag, u))
	p.wantClosed(t)
	waitDone(t, q.qp, peerTimeout)
	require.Equal(t, make([]byte, 64), sink, "nothing placed through the dead STag")
	wc = waitWC(t, q.scq)
	require.Equal(t, uint64(2), wc.ID)
	require.Equal(t, LocProtErr, wc.Status)
}

// A Send may arrive between two segments of a Read Response (Chelsio does
// this), so the sink is checked segment by segment.
func TestReadSinkInvalidatedBetweenSegments(t *testing.T) {
	checkRoutines(t)
	q, p, rr, stag, _, sink := readSinkSetup(t)
	first := append(ddp.AppendTagged(nil, false, rdmap.Ctrl(rdmap.OpReadResponse), stag, rr.SinkTO()), bytes.Repeat([]byte{0x11}, 32)...)
	inv := sendULPDU(rdmap.OpSendInvalidate, stag, rdmap.QNSend, 1, 0, true, []byte("inv"))
	second := append(ddp.AppendTagged(nil, true, rdmap.Ctrl(rdmap.OpReadResponse), stag, rr.SinkTO()+32), bytes.Repeat([]byte{0x22}, 32)...)
	p.send(t, first, inv, second)
	p.wantTerminate(t, ddpTerm(ddp.ETypeTagged, ddp.CodeInvalidSTag, second))
	waitDone(t, q.qp, peerTimeout)
	require.Equal(t, bytes.Repeat([]byte{0x11}, 32), sink[:32], "placed while the STag lived")
	require.Equal(t, make([]byte, 32), sink[32:], "nothing after its invalidation")
	var statuses []WCStatus
	for _, wc := range drainWC(q.scq) {
		statuses = append(statuses, wc.Status)
	}
	require.Equal(t, []WCStatus{LocProtErr}, statuses)
}

// A receive whose region the peer invalidated, or the application
// deregistered, after it was posted completes with LocProtErr, and the
// stream ends with a DDP catastrophic error, as siw's does.
func TestSendIntoDeadReceive(t *testing.T) {
	for _, how := range []string{"peer's Send with Invalidate", "local Dereg"} {
		t.Run(how, func(t *testing.T) {
			checkRoutines(t)
			st := newStackSide(t, ConnConfig{})
			q := st.newQP(t, 4, 4)
			p := st.acceptPeer(t, q, mpa.Config{IRD: 4, ORD: 4})
			rb, err := st.pd.RegMR(make([]byte, 64), LocalWrite)
			require.NoError(t, err)
			dead := make([]byte, 64)
			var mr *MR
			var stag uint32
			if how == "local Dereg" {
				mr, err = st.pd.RegMR(dead, LocalWrite)
				require.NoError(t, err)
			} else {
				mr, err = st.pd.AllocMR()
				require.NoError(t, err)
				stag, err = q.qp.PostRegMR(1, Signaled, mr, dead, LocalWrite)
				require.NoError(t, err)
				require.Equal(t, Success, waitWC(t, q.scq).Status)
			}
			_, err = q.qp.PostRecv(RecvWR{ID: 7, SGL: []SGE{rb.SGE(0, 64)}}, RecvWR{ID: 8, SGL: []SGE{mr.SGE(0, 64)}})
			require.NoError(t, err)
			if how == "local Dereg" {
				require.NoError(t, mr.Dereg())
				p.send(t, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, []byte("first")))
			} else {
				p.send(t, sendULPDU(rdmap.OpSendInvalidate, stag, rdmap.QNSend, 1, 0, true, []byte("inv")))
			}
			require.Equal(t, Success, waitWC(t, q.rcq).Status)
			p.send(t, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 2, 0, true, []byte("into a dead STag")))
			wc := waitWC(t, q.rcq)
			require.Equal(t, uint64(8), wc.ID)
			require.Equal(t, LocProtErr, wc.Status)
			// A local catastrophic error reports no segment (rdmap.NewTerminate).
			p.wantTerminate(t, rdmap.Terminate{Layer: rdmap.LayerDDP, EType: uint8(ddp.ETypeCatastrophic)})
			waitDone(t, q.qp, peerTimeout)
			require.Equal(t, make([]byte, 64), dead, "nothing placed through the dead STag")
		})
	}
}

// MR.Placed counts a Write whose last segment is empty, once its earlier
// segments were placed: the poller that waits on Placed sees it.
func TestPlacedCountsWriteWithEmptyLastSegment(t *testing.T) {
	checkRoutines(t)
	st := newStackSide(t, ConnConfig{})
	q := st.newQP(t, 4, 4)
	rb, err := st.pd.RegMR(make([]byte, 64), LocalWrite)
	require.NoError(t, err)
	_, err = q.qp.PostRecv(RecvWR{ID: 7, SGL: []SGE{rb.SGE(0, 64)}})
	require.NoError(t, err)
	p := st.acceptPeer(t, q, mpa.Config{IRD: 4, ORD: 4})
	g := regGuarded(t, st.pd, 64, LocalWrite|RemoteWrite)
	first := append(ddp.AppendTagged(nil, false, rdmap.Ctrl(rdmap.OpWrite), g.mr.RKey(), g.mr.Addr()), payload16...)
	last := ddp.AppendTagged(nil, true, rdmap.Ctrl(rdmap.OpWrite), g.mr.RKey(), g.mr.Addr()+16)
	empty := ddp.AppendTagged(nil, true, rdmap.Ctrl(rdmap.OpWrite), g.mr.RKey(), g.mr.Addr()) // a Write of nothing: not counted
	p.send(t, first, last, empty, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, []byte("done")))
	require.Equal(t, Success, waitWC(t, q.rcq).Status)
	require.Equal(t, uint64(1), g.mr.Placed())
}

// Immediate Data (RFC 7306) lands in a posted receive too, and an atomic's
// original value in its result buffer: both resolved when posted, both
// checked again when they land.
func TestImmediateDataIntoDeadReceive(t *testing.T) {
	checkRoutines(t)
	st := newStackSide(t, ConnConfig{RFC7306: true})
	q := st.newQP(t, 4, 4)
	p := st.acceptPeer(t, q, mpa.Config{IRD: 4, ORD: 4})
	buf := make([]byte, 8)
	mr, err := st.pd.RegMR(buf, LocalWrite)
	require.NoError(t, err)
	_, err = q.qp.PostRecv(RecvWR{ID: 9, SGL: []SGE{mr.SGE(0, 8)}})
	require.NoError(t, err)
	require.NoError(t, mr.Dereg())
	p.send(t, sendULPDU(rdmap.OpImmediateData, 0, rdmap.QNSend, 1, 0, true, []byte{1, 2, 3, 4, 5, 6, 7, 8}))
	wc := waitWC(t, q.rcq)
	require.Equal(t, uint64(9), wc.ID)
	require.Equal(t, LocProtErr, wc.Status)
	p.wantTerminate(t, rdmap.Terminate{Layer: rdmap.LayerDDP, EType: uint8(ddp.ETypeCatastrophic)})
	waitDone(t, q.qp, peerTimeout)
	require.Equal(t, make([]byte, 8), buf)
}

func TestAtomicResultIntoDeadRegion(t *testing.T) {
	checkRoutines(t)
	st := newStackSide(t, ConnConfig{RFC7306: true})
	q := st.newQP(t, 4, 4)
	p := st.acceptPeer(t, q, mpa.Config{IRD: 4, ORD: 4})
	res := make([]byte, 8)
	mr, err := st.pd.RegMR(res, LocalWrite)
	require.NoError(t, err)
	_, err = q.qp.PostSend(SendWR{ID: 3, Opcode: OpAtomicFetchAdd, Flags: Signaled, SGL: []SGE{mr.SGE(0, 8)},
		RemoteAddr: 0x1000, RKey: 0x1234, CompareAdd: 1})
	require.NoError(t, err)
	u := p.wantULPDU(t, "the Atomic Request")
	reqID := rdmap.AtomicRequest(u[ddp.UntaggedHdrLen:]).ReqID()
	require.NoError(t, mr.Dereg())
	p.send(t, atomicRespULPDU(1, reqID, 0x0102030405060708))
	p.wantTerminate(t, rdmap.Terminate{Layer: rdmap.LayerDDP, EType: uint8(ddp.ETypeCatastrophic)})
	waitDone(t, q.qp, peerTimeout)
	require.Equal(t, make([]byte, 8), res, "nothing placed through the dead STag")
	var got []WCStatus
	for _, c := range drainWC(q.scq) {
		got = append(got, c.Status)
	}
	require.Equal(t, []WCStatus{LocProtErr}, got)
}
