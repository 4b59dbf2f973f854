package verbs

import (
	"bytes"
	"sync/atomic"
	"testing"

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
