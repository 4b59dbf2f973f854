package verbs

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// srqServer connects n clients to QPs of one server device that share srq.
func srqServer(t *testing.T, srq *SRQ, rcq *CQ, n int) []*side {
	t.Helper()
	d := srq.pd.dev
	ln, err := d.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{})
	require.NoError(t, err)
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var clients []*side
	for range n {
		scq, err := d.CreateCQ(16)
		require.NoError(t, err)
		qp, err := srq.pd.CreateQP(QPConfig{SendCQ: scq, RecvCQ: rcq, SRQ: srq, Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
		require.NoError(t, err)
		t.Cleanup(func() { qp.Close() })
		c := newSide(t, pairOpts{})
		t.Cleanup(func() { c.qp.Close() })
		errc := make(chan error, 1)
		go func() {
			req, err := ln.GetRequest(ctx)
			if err == nil {
				err = req.Accept(ctx, qp, nil)
			}
			errc <- err
		}()
		require.NoError(t, c.qp.Dial(ctx, "tcp", ln.Addr().String(), ConnConfig{}))
		require.NoError(t, <-errc)
		clients = append(clients, c)
	}
	return clients
}

func fired(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// The SRQ's low-watermark event (ibv_modify_srq's IBV_SRQ_LIMIT): it fires
// when Sends on any of the QPs sharing the SRQ leave fewer receives posted
// than the limit, once, and disarms; re-armed after a refill it fires
// again.
func TestSRQLimit(t *testing.T) {
	checkRoutines(t)
	d := openDev(DeviceAttr{})
	pd := d.AllocPD()
	srq, err := pd.CreateSRQ(8, 1)
	require.NoError(t, err)
	require.Equal(t, SRQAttr{MaxWR: 8, MaxSGE: 1}, srq.Attr())
	rb, err := pd.RegMR(make([]byte, 64*8), LocalWrite)
	require.NoError(t, err)
	next := 0 // the next receive's ID; its buffer is slot ID%8
	post := func(n int) {
		t.Helper()
		for range n {
			_, err := srq.PostRecv(RecvWR{ID: uint64(next), SGL: []SGE{rb.SGE(next%8*64, 64)}})
			require.NoError(t, err)
			next++
		}
	}
	post(8)
	require.Equal(t, 8, srq.Len())

	for _, bad := range []int{-1, 9} {
		_, err := srq.ArmLimit(bad)
		require.ErrorIs(t, err, ErrInvalidArg, "limit %d", bad)
	}
	ch, err := srq.ArmLimit(3)
	require.NoError(t, err)
	again, err := srq.ArmLimit(4)
	require.NoError(t, err)
	require.Equal(t, ch, again, "re-arming an armed SRQ keeps its channel")
	ch, err = srq.ArmLimit(3)
	require.NoError(t, err)
	require.Equal(t, 3, srq.Attr().Limit)

	rcq, err := d.CreateCQ(32)
	require.NoError(t, err)
	clients := srqServer(t, srq, rcq, 2)
	sent := 0
	send := func() {
		t.Helper()
		c := clients[sent%2]
		_, err := c.qp.PostSend(SendWR{ID: uint64(sent), Opcode: OpSend, Flags: Inline, InlineData: []byte{byte(sent)}})
		require.NoError(t, err)
		wc := waitOK(t, rcq, WCRecv)
		require.Equal(t, uint64(sent), wc.ID, "receives are taken in the order posted")
		require.Equal(t, byte(sent), rb.Buf()[wc.ID%8*64])
		sent++
	}
	for range 5 {
		send()
	}
	require.Equal(t, 3, srq.Len())
	require.False(t, fired(ch), "3 posted is not fewer than the limit")
	send()
	require.True(t, fired(ch), "2 posted, fewer than 3: fired before the receive completed")
	require.Zero(t, srq.Attr().Limit, "fired: disarmed")

	// Refill, re-arm: a new channel, and it fires again.
	post(6)
	ch2, err := srq.ArmLimit(7)
	require.NoError(t, err)
	require.NotEqual(t, ch, ch2)
	send()
	require.False(t, fired(ch2), "7 posted")
	send()
	require.True(t, fired(ch2), "6 posted")

	// Armed while already below: fires at the next receive taken, not at
	// once (as siw).
	ch3, err := srq.ArmLimit(8)
	require.NoError(t, err)
	require.False(t, fired(ch3))
	send()
	require.True(t, fired(ch3))

	// Disarmed: nil, and nothing fires.
	ch4, err := srq.ArmLimit(8)
	require.NoError(t, err)
	ch5, err := srq.ArmLimit(0)
	require.NoError(t, err)
	require.Nil(t, ch5)
	require.Zero(t, srq.Attr().Limit)
	send()
	require.False(t, fired(ch4), "disarmed before the receive")
	require.Equal(t, 4, srq.Len())
}
