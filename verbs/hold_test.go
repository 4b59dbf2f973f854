package verbs

import (
	"testing"
	"time"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/goiwarp/iwarp/tcpx"
	"github.com/stretchr/testify/require"
)

// Who sends first (ConnConfig.FirstFPDUHold). A responder outside
// peer-to-peer mode sends nothing before the initiator's first FPDU has
// arrived and checked out (RFC 5044 section 7.1.2), with a fallback for
// protocols whose responder speaks first; an initiator that sent a Read RTR
// sends nothing before its answer. A real ucmatose client (siw) failed the
// connection when a server's first Sends shared the Reply's segment.

// wantSendULPDU reads the stack's next FPDU and requires the Send of text.
func (p *rawPeer) wantSend(t *testing.T, text string) {
	t.Helper()
	u := p.wantULPDU(t, "the stack's Send")
	require.GreaterOrEqual(t, len(u), ddp.UntaggedHdrLen, "%x", u)
	require.Zero(t, u[0]&ddp.FlagTagged, "an untagged message: %x", u)
	require.Equal(t, rdmap.Ctrl(rdmap.OpSend), ddp.Untagged(u[:ddp.UntaggedHdrLen]).ULPCtrl(), "%x", u)
	require.Equal(t, text, string(u[ddp.UntaggedHdrLen:]))
}

func postSend(t *testing.T, qp *QP, text string) {
	t.Helper()
	_, err := qp.PostSend(SendWR{ID: 5, Opcode: OpSend, Flags: Signaled | Inline, InlineData: []byte(text)})
	require.NoError(t, err)
}

// acceptAndSend accepts the next request with q and posts a Send at once,
// as cmatose's server does.
func (s *stackSide) acceptAndSend(q *stackQP, text string) <-chan error {
	errc := make(chan error, 1)
	acc := s.acceptAsync(q)
	go func() {
		err := <-acc
		if err == nil {
			_, err = q.qp.PostSend(SendWR{ID: 5, Opcode: OpSend, Flags: Signaled | Inline, InlineData: []byte(text)})
		}
		errc <- err
	}()
	return errc
}

func TestResponderHoldsUntilFirstFPDU(t *testing.T) {
	checkRoutines(t)
	st := newStackSide(t, ConnConfig{FirstFPDUHold: time.Minute})
	q := st.newQP(t, 0, 0)
	dst := regGuarded(t, st.pd, 16, LocalWrite|RemoteWrite)
	errc := st.acceptAndSend(q, "hello")
	p := dialPeer(t, st.ln.Addr().String(), mpa.Config{IRD: 8, ORD: 8})
	require.NoError(t, <-errc)
	n, err := tcpx.Buffered(p.conn)
	require.NoError(t, err)
	require.Zero(t, n, "nothing follows the Reply")
	p.wantNothing(t, 300*time.Millisecond, "the responder speaks after the initiator")
	p.send(t, writeULPDU(dst.mr.RKey(), dst.mr.Addr(), []byte("first")))
	start := time.Now()
	p.wantSend(t, "hello")
	require.Less(t, time.Since(start), 5*time.Second)
	// The Send's completion orders the Write's placement before it: rx
	// placed, released the hold, tx sent and completed.
	require.Equal(t, Success, waitWC(t, q.scq).Status)
	require.Equal(t, "first", string(dst.region()[:5]))
}

func TestResponderHoldFallback(t *testing.T) {
	checkRoutines(t)
	const hold = 150 * time.Millisecond
	st := newStackSide(t, ConnConfig{FirstFPDUHold: hold})
	q := st.newQP(t, 0, 0)
	errc := st.acceptAndSend(q, "hello")
	// Before the Request: the hold starts after our Reply is written, so
	// no delay of this goroutine can make it look shorter.
	start := time.Now()
	p := dialPeer(t, st.ln.Addr().String(), mpa.Config{IRD: 8, ORD: 8})
	require.NoError(t, <-errc)
	n, err := tcpx.Buffered(p.conn)
	require.NoError(t, err)
	require.Zero(t, n, "nothing follows the Reply")
	p.wantSend(t, "hello")
	took := time.Since(start)
	t.Logf("the held Send left %v after the Request", took.Round(time.Millisecond))
	require.GreaterOrEqual(t, took, hold, "held back until the fallback")
}

// A negative FirstFPDUHold is the RFC's rule with no fallback: nothing
// before the initiator's first FPDU.
func TestResponderHoldStrict(t *testing.T) {
	checkRoutines(t)
	st := newStackSide(t, ConnConfig{FirstFPDUHold: -1})
	q := st.newQP(t, 0, 0)
	rb := regGuarded(t, st.pd, 16, LocalWrite)
	_, err := q.qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{rb.mr.SGE(0, 16)}})
	require.NoError(t, err)
	errc := st.acceptAndSend(q, "hello")
	p := dialPeer(t, st.ln.Addr().String(), mpa.Config{IRD: 8, ORD: 8})
	require.NoError(t, <-errc)
	p.wantNothing(t, 400*time.Millisecond, "no fallback")
	p.send(t, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, []byte("ping")))
	p.wantSend(t, "hello")
	require.Equal(t, Success, waitWC(t, q.rcq).Status)
}

// An FPDU that fails its checks releases nothing: the stack's answer is its
// Terminate, not the held Send.
func TestResponderHoldBadFirstFPDU(t *testing.T) {
	checkRoutines(t)
	st := newStackSide(t, ConnConfig{FirstFPDUHold: time.Minute})
	q := st.newQP(t, 0, 0)
	errc := st.acceptAndSend(q, "hello")
	p := dialPeer(t, st.ln.Addr().String(), mpa.Config{IRD: 8, ORD: 8})
	require.NoError(t, <-errc)
	u := writeULPDU(0xdeadbe00, 0, []byte("x"))
	p.send(t, u)
	p.wantTerminate(t, ddpTerm(ddp.ETypeTagged, ddp.CodeInvalidSTag, u))
	p.wantClosed(t)
	require.Equal(t, WRFlushErr, waitWC(t, q.scq).Status)
}

// The initiator's Read RTR (P2PAuto): nothing else leaves before its answer.
func TestInitiatorHoldsUntilRTRAnswer(t *testing.T) {
	checkRoutines(t)
	st := newStackSide(t, ConnConfig{})
	q := st.newQP(t, 0, 0)
	p := answerDialNoRTR(t, q.qp, ConnConfig{FirstFPDUHold: time.Minute}, mpa.Config{IRD: 8, ORD: 8})
	require.True(t, p.params.P2P)
	require.Equal(t, mpa.RTRRead, p.params.RTR)
	require.Equal(t, mpa.RTRRead, q.qp.Params().RTR)
	postSend(t, q.qp, "hello")
	rr := p.wantReadRequest(t, 1)
	require.Zero(t, rr.Size())
	p.wantNothing(t, 300*time.Millisecond, "the initiator waits for its RTR's answer")
	p.send(t, ddp.AppendTagged(nil, true, rdmap.Ctrl(rdmap.OpReadResponse), rr.SinkSTag(), rr.SinkTO()))
	p.wantSend(t, "hello")
	require.Equal(t, Success, waitWC(t, q.scq).Status)
}

// wantNudge reads the stack's zero-length RDMA Write (nudgeRTR).
func (p *rawPeer) wantNudge(t *testing.T) {
	t.Helper()
	u := p.wantULPDU(t, "the stack's nudge")
	require.Equal(t, ddp.AppendTagged(nil, true, rdmap.Ctrl(rdmap.OpWrite), rtrSTag, 0), u, "a zero-length Write to STag 1")
}

// A responder that does not answer the Read RTR (siw, when the RTR reached
// it before its QP took the socket, reads nothing until more data comes):
// after a fallback the initiator nudges it with a zero-length Write, and
// after another lets its WRs go.
func TestInitiatorRTRHoldFallback(t *testing.T) {
	checkRoutines(t)
	const hold = 150 * time.Millisecond
	st := newStackSide(t, ConnConfig{})
	q := st.newQP(t, 0, 0)
	// Before the Dial: the hold starts inside it, so no delay of this
	// goroutine can make it look shorter.
	start := time.Now()
	p := answerDialNoRTR(t, q.qp, ConnConfig{FirstFPDUHold: hold}, mpa.Config{IRD: 8, ORD: 8})
	postSend(t, q.qp, "hello")
	rr := p.wantReadRequest(t, 1)
	require.Zero(t, rr.Size())
	p.wantNudge(t)
	require.GreaterOrEqual(t, time.Since(start), hold)
	p.wantSend(t, "hello")
	require.GreaterOrEqual(t, time.Since(start), 2*hold)
	// The late answer still completes the RTR, and the QP goes on.
	p.send(t, ddp.AppendTagged(nil, true, rdmap.Ctrl(rdmap.OpReadResponse), rr.SinkSTag(), rr.SinkTO()))
	postSend(t, q.qp, "again")
	p.wantSend(t, "again")
	require.Equal(t, Success, waitWC(t, q.scq).Status)
	require.Equal(t, Success, waitWC(t, q.scq).Status)
}

// Two stacks: the default start-up is peer-to-peer with a Read RTR, and a
// server that sends right after Accept is served without waiting for any
// fallback.
func TestDefaultStartupP2PRead(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{server: ConnConfig{FirstFPDUHold: time.Minute}, client: ConnConfig{FirstFPDUHold: time.Minute}})
	for _, q := range []*QP{c.qp, s.qp} {
		require.True(t, q.Params().P2P)
		require.Equal(t, mpa.RTRRead, q.Params().RTR)
	}
	start := time.Now()
	exercise(t, s, c, 10)
	exercise(t, c, s, 10)
	require.Less(t, time.Since(start), 10*time.Second)
}

// The nudge works: a responder that reads the RTR only when more data
// comes answers it then, and the held WRs go at once.
func TestInitiatorRTRNudgeAnswered(t *testing.T) {
	checkRoutines(t)
	// The second fallback would let the Send go a hold after the nudge,
	// the answer lets it go at once: half a hold tells them apart with
	// room for a loaded machine either way.
	const hold = time.Second
	st := newStackSide(t, ConnConfig{})
	q := st.newQP(t, 0, 0)
	p := answerDialNoRTR(t, q.qp, ConnConfig{FirstFPDUHold: hold}, mpa.Config{IRD: 8, ORD: 8})
	postSend(t, q.qp, "hello")
	rr := p.wantReadRequest(t, 1)
	p.wantNudge(t)
	answered := time.Now()
	p.send(t, ddp.AppendTagged(nil, true, rdmap.Ctrl(rdmap.OpReadResponse), rr.SinkSTag(), rr.SinkTO()))
	p.wantSend(t, "hello")
	took := time.Since(answered)
	t.Logf("the held Send left %v after the answer", took.Round(time.Millisecond))
	require.Less(t, took, hold/2, "no second fallback")
	require.Equal(t, Success, waitWC(t, q.scq).Status)
}
