package verbs

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The receive handler runs after each FPDU, sees what it placed, and can
// answer from there; once removed it runs no more.
func TestRxHandler(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	n := 3*(c.qp.MULPDU()-14) + 100 // four FPDUs
	src := c.regFilled(t, n, 0, 7)
	src.Buf()[n-1] = 0xab
	dst := s.regMR(t, n, LocalWrite|RemoteWrite)
	pong := c.regMR(t, 16, LocalWrite)
	_, err := c.qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{pong.SGE(0, 16)}})
	require.NoError(t, err)

	var calls atomic.Int32
	seen := make(chan bool, 1) // whether the whole message was in place when the last octet was
	answered := false          // only the receive goroutine touches it
	s.qp.SetRxHandler(func() {
		calls.Add(1)
		if answered || dst.Buf()[n-1] != 0xab {
			return
		}
		answered = true
		seen <- bytes.Equal(dst.Buf(), src.Buf())
		if _, err := s.qp.PostSend(SendWR{Opcode: OpSend, Flags: Signaled | Inline, InlineData: []byte("pong")}); err != nil {
			panic(err)
		}
	})
	_, err = c.qp.PostSend(SendWR{Opcode: OpRDMAWrite, SGL: []SGE{src.SGE(0, n)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
	require.NoError(t, err)
	wc := waitOK(t, c.rcq, WCRecv)
	require.Equal(t, uint32(4), wc.ByteLen)
	require.Equal(t, "pong", string(pong.Buf()[:4]))
	require.True(t, <-seen, "the handler saw the message placed whole")
	waitOK(t, s.scq, WCSend)
	require.GreaterOrEqual(t, calls.Load(), int32(4), "one call per FPDU")

	// Removed: a Send that arrives completes, and no handler runs.
	s.qp.SetRxHandler(nil)
	before := calls.Load()
	rb := s.regMR(t, 16, LocalWrite)
	_, err = s.qp.PostRecv(RecvWR{SGL: []SGE{rb.SGE(0, 16)}})
	require.NoError(t, err)
	_, err = c.qp.PostSend(SendWR{Opcode: OpSend, Flags: Inline, InlineData: []byte("ping")})
	require.NoError(t, err)
	waitOK(t, s.rcq, WCRecv)
	require.Equal(t, before, calls.Load())
}

// TestRxHandlerPostNeverBlocks: both ends post Writes from their receive
// handlers, two for every FPDU that arrives, through 8 KiB send buffers,
// so that both send queues fill while both receive goroutines run
// handlers. A handler's post written on its receive goroutine into a full
// send queue would wait for a peer whose receive goroutine waits the same
// way; every Write must arrive.
func TestRxHandlerPostNeverBlocks(t *testing.T) {
	checkRoutines(t)
	small := ConnConfig{TCP: smallSendBuffers}
	c, s := connect(t, pairOpts{client: small, server: small, cap: QPCap{MaxSendWR: 64, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	const writes, size = 600, 16 << 10
	var got [2]atomic.Int32
	var kick [2]SendWR
	done := make(chan struct{}, 2)
	for i, p := range [][2]*side{{c, s}, {s, c}} {
		me, peer := p[0], p[1]
		src := me.regFilled(t, size, 0, 9)
		dst := peer.regMR(t, size, RemoteWrite|LocalWrite)
		posted := 0 // the receive goroutine's
		kick[i] = SendWR{Opcode: OpRDMAWrite, SGL: []SGE{src.SGE(0, size)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}
		post := func() {
			if posted < writes {
				if _, err := me.qp.PostSend(SendWR{Opcode: OpRDMAWrite, SGL: []SGE{src.SGE(0, size)},
					RemoteAddr: dst.Addr(), RKey: dst.RKey()}); err == nil {
					posted++
				}
			}
		}
		me.qp.SetRxHandler(func() {
			if got[i].Add(1) == writes {
				done <- struct{}{}
			}
			post()
		})
	}
	// Both ends start with a burst from their own goroutines; from then
	// on every arrival posts one more from the receive goroutine.
	for range 16 {
		_, err := c.qp.PostSend(kick[0])
		require.NoError(t, err)
		_, err = s.qp.PostSend(kick[1])
		require.NoError(t, err)
	}
	for range 2 {
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("FPDUs received: client %d, server %d of %d; QPs: %v, %v", got[0].Load(), got[1].Load(), writes, c.qp.Err(), s.qp.Err())
		}
	}
	c.qp.SetRxHandler(nil)
	s.qp.SetRxHandler(nil)
}
