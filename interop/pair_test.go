//go:build interop

package interop

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

// end is one side of a connection made with the public API only.
type end struct {
	dev      *verbs.Device
	pd       *verbs.PD
	scq, rcq *verbs.CQ
	qp       *verbs.QP
}

func newEnd(t *testing.T) *end {
	dev, err := verbs.Open(verbs.DeviceAttr{})
	require.NoError(t, err)
	e := &end{dev: dev}
	e.pd = e.dev.AllocPD()
	e.scq, _ = e.dev.CreateCQ(1024)
	e.rcq, _ = e.dev.CreateCQ(1024)
	e.qp, err = e.pd.CreateQP(verbs.QPConfig{SendCQ: e.scq, RecvCQ: e.rcq, IRD: 8, ORD: 8,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 64}})
	require.NoError(t, err)
	t.Cleanup(func() { e.qp.Close() })
	return e
}

// pairOn connects a client to a listener already bound (so that a capture
// can start before the MPA start-up).
func pairOn(t *testing.T, ln *verbs.Listener, ccfg verbs.ConnConfig) (c, s *end) {
	c, s = newEnd(t), newEnd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		req, err := ln.GetRequest(ctx)
		if err == nil {
			err = req.Accept(ctx, s.qp, []byte("server"))
		}
		errc <- err
	}()
	err := c.qp.Dial(ctx, "tcp", ln.Addr().String(), withPD(ccfg, []byte("client")))
	require.NoError(t, err)
	require.NoError(t, <-errc)
	return c, s
}

func port(ln *verbs.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

func waitWC(t *testing.T, cq *verbs.CQ) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]verbs.WC
	for cq.Poll(wc[:]) == 0 {
		require.NoError(t, cq.Wait(ctx))
	}
	require.Equal(t, verbs.Success, wc[0].Status, "%v", wc[0])
	return wc[0]
}

// traffic runs Sends, Writes and Reads of several sizes from c to s, and
// returns how many FPDUs they take, both directions together.
func traffic(t *testing.T, c, s *end) int {
	t.Helper()
	buf := make([]byte, 40000)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	src, err := c.pd.RegMR(buf, verbs.LocalWrite)
	require.NoError(t, err)
	dstBuf := make([]byte, 40000)
	dst, err := s.pd.RegMR(dstBuf, verbs.LocalWrite|verbs.RemoteWrite|verbs.RemoteRead)
	require.NoError(t, err)
	fpdus := 0
	segs := func(n, payload int) int { return max(1, (n+payload-1)/payload) }
	for _, n := range []int{5, 1000, 40000} {
		fpdus += segs(n, c.qp.MULPDU()-18) + segs(n, c.qp.MULPDU()-14) + 1 + segs(n, s.qp.MULPDU()-14)
		_, err := s.qp.PostRecv(verbs.RecvWR{SGL: []verbs.SGE{dst.SGE(0, n)}})
		require.NoError(t, err)
		_, err = c.qp.PostSend(verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{src.SGE(0, n)}})
		require.NoError(t, err)
		waitWC(t, c.scq)
		waitWC(t, s.rcq)
		_, err = c.qp.PostSend(verbs.SendWR{Opcode: verbs.OpRDMAWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{src.SGE(0, n)},
			RemoteAddr: dst.Addr(), RKey: dst.RKey()})
		require.NoError(t, err)
		waitWC(t, c.scq)
		_, err = c.qp.PostSend(verbs.SendWR{Opcode: verbs.OpRDMARead, Flags: verbs.Signaled, SGL: []verbs.SGE{src.SGE(0, n)},
			RemoteAddr: dst.Addr(), RKey: dst.RKey()})
		require.NoError(t, err)
		waitWC(t, c.scq)
		time.Sleep(5 * time.Millisecond) // keep FPDUs of different messages in different segments
	}
	return fpdus
}

// withPD returns cfg with private data pd.
func withPD(cfg verbs.ConnConfig, pd []byte) verbs.ConnConfig {
	cfg.PrivateData = pd
	return cfg
}
