package verbs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// An Inline WR with an SGL (ibverbs' IBV_SEND_INLINE with an sg_list)
// sends what the SGL names, copied at post time: the memory may change at
// once. It used to send nothing, and say success on both sides.
func TestInlineFromSGL(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	rb := s.regMR(t, 64, LocalWrite)
	_, err := s.qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{rb.SGE(0, 64)}})
	require.NoError(t, err)
	src := c.regMR(t, 32, 0)
	copy(src.Buf(), "hello, inline, from two elements")
	_, err = c.qp.PostSend(SendWR{ID: 2, Opcode: OpSend, Flags: Inline | Signaled,
		SGL: []SGE{src.SGE(0, 7), {LKey: 0, Length: 0}, src.SGE(7, 25)}})
	require.NoError(t, err)
	copy(src.Buf(), "overwritten right after the post") // the WR holds its own copy
	waitOK(t, c.scq, WCSend)
	wc := waitOK(t, s.rcq, WCRecv)
	require.Equal(t, "hello, inline, from two elements", string(rb.Buf()[:wc.ByteLen]))

	_, err = c.qp.PostSend(SendWR{Opcode: OpSend, Flags: Inline, InlineData: []byte("x"), SGL: []SGE{src.SGE(0, 1)}})
	require.ErrorIs(t, err, ErrInvalidArg, "both InlineData and an SGL")
	big := c.regMR(t, 1024, 0)
	_, err = c.qp.PostSend(SendWR{Opcode: OpSend, Flags: Inline, SGL: []SGE{big.SGE(0, 1024)}})
	require.ErrorIs(t, err, ErrInlineTooLarge)
	_, err = c.qp.PostSend(SendWR{Opcode: OpSend, Flags: Inline, SGL: []SGE{{LKey: src.LKey() ^ 0x100, Addr: src.Addr(), Length: 4}}})
	require.ErrorIs(t, err, ErrLocalProt, "an SGL element with a bad lkey")
}

// A zero-length SGL element is not looked up (ibverbs providers skip it),
// in sends and in receives; a Read with no sink at all is a plain bad
// argument.
func TestZeroLengthSGE(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{cap: QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 4, MaxRecvSGE: 4}})
	rb := s.regMR(t, 64, LocalWrite)
	_, err := s.qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{{LKey: 0xdead, Length: 0}, rb.SGE(0, 64)}})
	require.NoError(t, err)
	src := c.regMR(t, 8, 0)
	copy(src.Buf(), "8 octets")
	_, err = c.qp.PostSend(SendWR{ID: 2, Opcode: OpSend, Flags: Signaled, SGL: []SGE{{LKey: 0, Length: 0}, src.SGE(0, 8)}})
	require.NoError(t, err)
	waitOK(t, c.scq, WCSend)
	wc := waitOK(t, s.rcq, WCRecv)
	require.Equal(t, "8 octets", string(rb.Buf()[:wc.ByteLen]))
	_, err = c.qp.PostSend(SendWR{Opcode: OpRDMARead, RKey: 1})
	require.ErrorIs(t, err, ErrInvalidArg)
	require.False(t, errors.Is(err, ErrTooManySGE))
}

// A local operation that fails ends the QP, as an error completion does in
// ibverbs: the WR completes in error, the WRs after it flush, the peer gets
// a local catastrophic Terminate. The QP used to go on as if nothing had
// happened.
func TestLocalOpFailureEndsQP(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	_, err := c.qp.PostSend(
		SendWR{ID: 1, Opcode: OpLocalInv, Flags: Signaled, InvalidateRKey: 0xdeadbe01},
		SendWR{ID: 2, Opcode: OpSend, Flags: Inline | Signaled, InlineData: []byte("after")})
	require.NoError(t, err)
	wc := wait(t, c.scq)
	require.Equal(t, uint64(1), wc.ID)
	require.Equal(t, LocProtErr, wc.Status)
	wc = wait(t, c.scq)
	require.Equal(t, uint64(2), wc.ID)
	require.Equal(t, WRFlushErr, wc.Status)
	<-c.qp.Done()
	var te *TerminateError
	require.ErrorAs(t, c.qp.Err(), &te)
	require.False(t, te.Remote)
	<-s.qp.Done()
	require.ErrorAs(t, s.qp.Err(), &te, "the peer's error")
	require.True(t, te.Remote)
	require.Equal(t, rdmap.LayerRDMAP, te.Terminate.Layer)
	require.Equal(t, rdmap.ETypeLocalCatastrophic, te.Terminate.EType)
}

// Receives posted on a QP that never connected flush when it is closed,
// and so do those posted after, as on a QP that did connect.
func TestClosedIdleQPFlushesReceives(t *testing.T) {
	checkRoutines(t)
	d := openDev(DeviceAttr{})
	t.Cleanup(func() { d.Close() })
	pd := d.AllocPD()
	cq, err := d.CreateCQ(8)
	require.NoError(t, err)
	qp, err := pd.CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq})
	require.NoError(t, err)
	mr, err := pd.RegMR(make([]byte, 8), LocalWrite)
	require.NoError(t, err)
	_, err = qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{mr.SGE(0, 8)}})
	require.NoError(t, err)
	require.NoError(t, qp.Close())
	_, err = qp.PostRecv(RecvWR{ID: 2, SGL: []SGE{mr.SGE(0, 8)}})
	require.NoError(t, err)
	for _, id := range []uint64{1, 2} {
		wc := wait(t, cq)
		require.Equal(t, id, wc.ID)
		require.Equal(t, WRFlushErr, wc.Status)
		require.Equal(t, WCRecv, wc.Opcode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.ErrorIs(t, qp.Dial(ctx, "tcp", "127.0.0.1:9", ConnConfig{}), ErrClosed, "a closed QP connects")
}

// Accept and Reject with arguments they refuse leave the request open: the
// application can still answer it (rdma_accept's EINVAL); they used to
// close the connection, and the initiator saw an EOF instead of a Reject.
func TestCMRefusedArgumentsLeaveRequest(t *testing.T) {
	checkRoutines(t)
	for _, bad := range []string{"accept with a connected QP", "accept with too much private data", "reject with too much private data"} {
		t.Run(bad, func(t *testing.T) {
			busy, _ := connect(t, pairOpts{}) // a QP in RTS
			srv, cli := newSide(t, pairOpts{}), newSide(t, pairOpts{})
			t.Cleanup(func() { srv.qp.Close(); cli.qp.Close(); srv.dev.Close(); cli.dev.Close() })
			ln, err := srv.dev.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{})
			require.NoError(t, err)
			defer ln.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			answered := make(chan error, 1)
			go func() {
				req, err := ln.GetRequest(ctx)
				if err != nil {
					answered <- err
					return
				}
				switch bad {
				case "accept with a connected QP":
					err = req.Accept(ctx, busy.qp, nil)
					if !errors.Is(err, ErrQPState) {
						answered <- err
						return
					}
				case "accept with too much private data":
					err = req.Accept(ctx, srv.qp, make([]byte, 509))
					if !errors.Is(err, ErrInvalidArg) {
						answered <- err
						return
					}
				default:
					err = req.Reject(make([]byte, 509))
					if !errors.Is(err, ErrInvalidArg) {
						answered <- err
						return
					}
				}
				answered <- req.Reject([]byte("sorry"))
			}()
			err = cli.qp.Dial(ctx, "tcp", ln.Addr().String(), ConnConfig{})
			require.NoError(t, <-answered)
			var re *mpa.RejectError
			require.ErrorAs(t, err, &re)
			require.Equal(t, "sorry", string(re.PrivateData))
		})
	}
}

// An STag already invalid may be invalidated again, as siw allows: a
// LocalInv after the peer's Send with Invalidate of the same STag (a
// host's common safety step), and a second LocalInv, both succeed and the
// QP lives on. Since a failed local operation ends the QP, this matters.
func TestInvalidateTwice(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	fmr, err := s.pd.AllocMR()
	require.NoError(t, err)
	rkey, err := s.qp.PostRegMR(1, Signaled, fmr, make([]byte, 64), LocalWrite|RemoteWrite)
	require.NoError(t, err)
	waitOK(t, s.scq, WCRegMR)
	rb := s.regMR(t, 8, LocalWrite)
	_, err = s.qp.PostRecv(RecvWR{ID: 7, SGL: []SGE{rb.SGE(0, 8)}}, RecvWR{ID: 8, SGL: []SGE{rb.SGE(0, 8)}})
	require.NoError(t, err)
	_, err = c.qp.PostSend(SendWR{ID: 3, Opcode: OpSendWithInv, Flags: Signaled | Inline, InlineData: []byte("inv"), InvalidateRKey: rkey})
	require.NoError(t, err)
	waitOK(t, c.scq, WCSend)
	wc := waitOK(t, s.rcq, WCRecv)
	require.Equal(t, WithInv, wc.Flags&WithInv)
	_, err = s.qp.PostSend(SendWR{ID: 9, Opcode: OpLocalInv, Flags: Signaled, InvalidateRKey: rkey},
		SendWR{ID: 10, Opcode: OpLocalInv, Flags: Signaled, InvalidateRKey: rkey})
	require.NoError(t, err)
	for _, id := range []uint64{9, 10} {
		wc = waitOK(t, s.scq, WCLocalInv)
		require.Equal(t, id, wc.ID)
	}
	// The QP lives on: a Send gets through.
	_, err = c.qp.PostSend(SendWR{ID: 4, Opcode: OpSend, Flags: Signaled | Inline, InlineData: []byte("live")})
	require.NoError(t, err)
	waitOK(t, c.scq, WCSend)
	waitOK(t, s.rcq, WCRecv)
	// An STag no region has still fails, and ends the QP (TestLocalOpFailureEndsQP).
}
