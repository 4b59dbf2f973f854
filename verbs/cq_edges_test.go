package verbs

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// WaitSolicited counts a solicited completion already queued: the event
// loop "Poll until empty, then WaitSolicited" lost the one that landed in
// between (it waited for one after the call). It ignores the unsolicited,
// wakes every waiter, and reports an overrun CQ to every call, not the
// first only. Each of these failed before.
func TestWaitSolicitedSemantics(t *testing.T) {
	d := openDev(DeviceAttr{})
	t.Cleanup(func() { d.Close() })
	cq, err := d.CreateCQ(4)
	require.NoError(t, err)
	ctx := func() context.Context {
		c, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		t.Cleanup(cancel)
		return c
	}
	var wc [4]WC
	require.Zero(t, cq.Poll(wc[:])) // the loop's drain: empty
	cq.push(WC{ID: 1, Opcode: WCRecv})
	require.ErrorIs(t, cq.WaitSolicited(ctx()), context.DeadlineExceeded, "an unsolicited completion")
	cq.push(WC{ID: 2, Opcode: WCRecv, Flags: SolicitedEvent}) // lands before the call
	require.NoError(t, cq.WaitSolicited(ctx()), "a solicited completion queued")
	require.NoError(t, cq.WaitSolicited(ctx()), "still queued")
	require.Equal(t, 2, cq.Poll(wc[:]))
	require.ErrorIs(t, cq.WaitSolicited(ctx()), context.DeadlineExceeded, "polled: none left")

	res := make(chan error, 2)
	wctx := ctx()
	for range 2 {
		go func() { res <- cq.WaitSolicited(wctx) }()
	}
	time.Sleep(20 * time.Millisecond) // both waiting (if not, they find it queued: the same)
	cq.push(WC{ID: 3, Opcode: WCSend, Status: RemAccessErr})
	require.NoError(t, <-res, "first waiter")
	require.NoError(t, <-res, "second waiter")
	require.Equal(t, 1, cq.Poll(wc[:]))

	for i := range 5 { // past the ring: an overrun
		cq.push(WC{ID: uint64(10 + i)})
	}
	require.ErrorIs(t, cq.WaitSolicited(ctx()), ErrCQOverrun)
	require.ErrorIs(t, cq.WaitSolicited(ctx()), ErrCQOverrun, "a second call")
}

// A QP takes only its device's CQs and SRQs, a closed Device makes no CQs
// or SRQs (its doc said so; it made them), a
// fast registration keeps to MaxMRSize as RegMR does (it did not), and
// MaxMR stays below the 2^24 STag indices (index 0 is never issued: with
// MaxMR 2^24 and every index in use, RegMR searched forever holding the
// device's lock).
func TestDeviceLimitsKept(t *testing.T) {
	checkRoutines(t)
	_, err := Open(DeviceAttr{MaxMR: 1 << 24})
	require.Error(t, err)
	d, err := Open(DeviceAttr{MaxMR: 1<<24 - 1})
	require.NoError(t, err)
	d.Close()

	c, _ := connect(t, pairOpts{})
	c.dev.attr.MaxMRSize = 4096 // as Open(DeviceAttr{MaxMRSize: 4096}) would
	_, err = c.pd.RegMR(make([]byte, 8192), LocalWrite)
	require.ErrorIs(t, err, ErrResources)
	mr, err := c.pd.AllocMR()
	require.NoError(t, err)
	_, err = c.qp.PostRegMR(7, Signaled, mr, make([]byte, 8192), LocalWrite|RemoteWrite)
	require.NoError(t, err)
	wc := wait(t, c.scq)
	require.Equal(t, WCRegMR, wc.Opcode)
	require.Equal(t, LocProtErr, wc.Status, "a fast registration past MaxMRSize")

	// A QP's CQs and SRQ are its device's, as ibverbs asks (EINVAL).
	d2 := openDev(DeviceAttr{})
	pd := d2.AllocPD()
	own, err := d2.CreateCQ(4)
	require.NoError(t, err)
	srq, err := c.pd.CreateSRQ(4, 1)
	require.NoError(t, err)
	for _, cfg := range []QPConfig{{SendCQ: c.scq, RecvCQ: own}, {SendCQ: own, RecvCQ: c.rcq}, {SendCQ: own, RecvCQ: own, SRQ: srq}} {
		_, err = pd.CreateQP(cfg)
		require.ErrorIs(t, err, ErrInvalidArg)
	}
	qp, err := pd.CreateQP(QPConfig{SendCQ: own, RecvCQ: own})
	require.NoError(t, err)
	qp.Close()
	require.NoError(t, d2.Close())
	_, err = d2.CreateCQ(4)
	require.ErrorIs(t, err, ErrClosed)
	_, err = pd.CreateSRQ(4, 1)
	require.ErrorIs(t, err, ErrClosed)
}
