package verbs

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Tearing down in ibverbs' order over a live connection: the CQs, the SRQ
// and the PD are refused (ErrBusy) while a QP or MR uses them, and
// destroyed once the QPs are closed and the MRs deregistered; after that
// every use of them is refused with ErrClosed.
func TestDestroyOrder(t *testing.T) {
	checkRoutines(t)
	d := openDev(DeviceAttr{})
	pd := d.AllocPD()
	srq, err := pd.CreateSRQ(16, 1)
	require.NoError(t, err)
	rcq, err := d.CreateCQ(64)
	require.NoError(t, err)
	cli := srqServer(t, srq, rcq, 1)[0]
	mr, err := pd.RegMR(make([]byte, 4096), LocalWrite|RemoteWrite)
	require.NoError(t, err)
	_, err = srq.PostRecv(RecvWR{ID: 1, SGL: []SGE{mr.SGE(0, 64)}}, RecvWR{ID: 2, SGL: []SGE{mr.SGE(64, 64)}})
	require.NoError(t, err)
	src := cli.regMR(t, 64, 0)
	_, err = cli.qp.PostSend(SendWR{ID: 9, Opcode: OpSend, Flags: Signaled, SGL: []SGE{src.SGE(0, 64)}})
	require.NoError(t, err)
	wc := waitOK(t, rcq, WCRecv)
	require.EqualValues(t, 1, wc.ID)
	srvQP := wc.QP

	require.ErrorIs(t, rcq.Destroy(), ErrBusy, "a connected QP completes receives there")
	require.ErrorIs(t, srq.Destroy(), ErrBusy)
	require.ErrorIs(t, pd.Dealloc(), ErrBusy)
	require.NoError(t, cli.qp.Close())
	require.ErrorIs(t, rcq.Destroy(), ErrBusy, "the server's QP is not closed yet, though its peer is")
	require.NoError(t, srvQP.Close())
	require.NoError(t, srq.Destroy(), "receive 2 is still posted: dropped")
	require.NoError(t, rcq.Destroy())
	require.ErrorIs(t, pd.Dealloc(), ErrBusy, "an MR is registered")
	require.NoError(t, mr.Dereg())
	require.NoError(t, pd.Dealloc())

	require.ErrorIs(t, rcq.Destroy(), ErrClosed, "twice")
	require.ErrorIs(t, srq.Destroy(), ErrClosed)
	require.ErrorIs(t, pd.Dealloc(), ErrClosed)
	require.Zero(t, rcq.Poll(make([]WC, 4)))
	require.ErrorIs(t, rcq.Wait(context.Background()), ErrClosed)
	_, err = rcq.PollWait(context.Background(), make([]WC, 1))
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, rcq.SetModeration(4), ErrClosed)
	_, err = srq.PostRecv(RecvWR{ID: 3})
	require.ErrorIs(t, err, ErrClosed)
	_, err = srq.ArmLimit(1)
	require.ErrorIs(t, err, ErrClosed)
	require.Zero(t, srq.Len())
	_, err = pd.RegMR(make([]byte, 64), LocalWrite)
	require.ErrorIs(t, err, ErrClosed)
	_, err = pd.AllocMR()
	require.ErrorIs(t, err, ErrClosed)
	_, err = pd.CreateSRQ(4, 1)
	require.ErrorIs(t, err, ErrClosed)
	scq, err := d.CreateCQ(4)
	require.NoError(t, err)
	_, err = pd.CreateQP(QPConfig{SendCQ: scq, RecvCQ: scq})
	require.ErrorIs(t, err, ErrClosed, "a deallocated PD")
	pd2 := d.AllocPD()
	_, err = pd2.CreateQP(QPConfig{SendCQ: scq, RecvCQ: rcq})
	require.ErrorIs(t, err, ErrClosed, "a destroyed CQ")
	_, err = pd2.CreateQP(QPConfig{SendCQ: scq, RecvCQ: scq, SRQ: srq})
	require.ErrorIs(t, err, ErrClosed, "a destroyed SRQ")
	require.NoError(t, pd2.Dealloc(), "the refused QPs count for nothing")
	require.NoError(t, scq.Destroy())
}

// A QP that never connected counts too, until it is closed; one CQ used
// as both the send and the receive CQ is busy until then as well.
func TestDestroyUnconnectedQP(t *testing.T) {
	d := openDev(DeviceAttr{})
	defer d.Close()
	pd := d.AllocPD()
	cq, err := d.CreateCQ(8)
	require.NoError(t, err)
	qp, err := pd.CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq})
	require.NoError(t, err)
	mr, err := pd.RegMR(make([]byte, 64), LocalWrite)
	require.NoError(t, err)
	_, err = qp.PostRecv(RecvWR{ID: 7, SGL: []SGE{mr.SGE(0, 64)}})
	require.NoError(t, err)
	require.ErrorIs(t, cq.Destroy(), ErrBusy)
	require.NoError(t, qp.Close())
	var wcs [2]WC
	require.Equal(t, 1, cq.Poll(wcs[:]), "the receive posted is flushed by Close")
	require.Equal(t, WRFlushErr, wcs[0].Status)
	require.NoError(t, cq.Destroy())
	require.NoError(t, mr.Dereg())
	require.NoError(t, pd.Dealloc())
}

// Destroying a CQ wakes every goroutine waiting on it, each with an error
// wrapping ErrClosed.
func TestDestroyWakesWaiters(t *testing.T) {
	checkRoutines(t)
	d := openDev(DeviceAttr{})
	defer d.Close()
	cq, err := d.CreateCQ(8)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 2 {
		wg.Add(3)
		go func() { defer wg.Done(); errs <- cq.Wait(ctx) }()
		go func() { defer wg.Done(); _, err := cq.PollWait(ctx, make([]WC, 1)); errs <- err }()
		go func() { defer wg.Done(); errs <- cq.WaitSolicited(ctx) }()
	}
	require.Eventually(t, func() bool { return cq.waiters.Load() == 4 && cq.solWtrs.Load() == 2 },
		5*time.Second, time.Millisecond, "the six waiters are waiting")
	require.NoError(t, cq.Destroy())
	wg.Wait()
	close(errs)
	for err := range errs {
		require.ErrorIs(t, err, ErrClosed)
		require.False(t, errors.Is(err, context.DeadlineExceeded), "woken by the destroy, not the deadline")
	}
}

// What a QP and a CQ were given, the defaults filled in, as ibv_create_qp
// and ibv_create_cq report back.
func TestQPConfigGranted(t *testing.T) {
	d := openDev(DeviceAttr{})
	defer d.Close()
	pd := d.AllocPD()
	cq, err := d.CreateCQ(37)
	require.NoError(t, err)
	require.Equal(t, 37, cq.Cap())
	qp, err := pd.CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq, ORD: -1})
	require.NoError(t, err)
	defer qp.Close()
	got := qp.Config()
	require.Equal(t, min(defaultQPWR, d.Attr().MaxQPWR), got.Cap.MaxSendWR, "the default send queue")
	require.Equal(t, min(defaultQPWR, d.Attr().MaxQPWR), got.Cap.MaxRecvWR)
	require.Equal(t, 1, got.Cap.MaxSendSGE)
	require.Equal(t, 1, got.Cap.MaxRecvSGE)
	require.Equal(t, min(defaultInline, d.Attr().MaxInline), got.Cap.MaxInline)
	require.Equal(t, d.Attr().MaxIRD, got.IRD, "0: the device's maximum")
	require.Zero(t, got.ORD, "negative: none")
	require.Same(t, cq, got.SendCQ)
	// The queues are as large as it says: that many receives post, one
	// more does not.
	mr, err := pd.RegMR(make([]byte, 64), LocalWrite)
	require.NoError(t, err)
	wrs := make([]RecvWR, got.Cap.MaxRecvWR+1)
	for i := range wrs {
		wrs[i] = RecvWR{ID: uint64(i), SGL: []SGE{mr.SGE(0, 64)}}
	}
	n, err := qp.PostRecv(wrs...)
	require.ErrorIs(t, err, ErrQueueFull)
	require.Equal(t, got.Cap.MaxRecvWR, n)
}
