package verbs

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// sizes covers the boundaries of segmentation: empty, odd, page, around
// the MULPDU, and multi-megabyte messages.
func sizes(mulpdu int) []int {
	return []int{0, 1, 3, 4095, 4096, mulpdu - 1, mulpdu, mulpdu + 1, 1 << 20, 8 << 20}
}

// Memory a peer reads or writes is prepared before it is registered: the
// registration orders the test's writes before the QP loops' accesses (as a
// Send would in an application), which keeps the race detector honest.

func TestRDMAWriteSizes(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	for i, n := range sizes(c.qp.MULPDU() - 14) {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			src := c.regFilled(t, n, 0, uint64(i))
			dst := s.regMR(t, n+16, LocalWrite|RemoteWrite)
			_, err := c.qp.PostSend(SendWR{ID: uint64(i), Opcode: OpRDMAWrite, Flags: Signaled,
				SGL: []SGE{src.SGE(0, n)}, RemoteAddr: dst.Addr() + 8, RKey: dst.RKey()})
			require.NoError(t, err)
			wc := waitOK(t, c.scq, WCRDMAWrite)
			require.Equal(t, uint64(i), wc.ID)
			require.Equal(t, uint32(n), wc.ByteLen)
			// A Write completes at the sender when handed to TCP; a Send
			// behind it arrives after it (same stream), so use one as a
			// barrier before looking at the target memory.
			rb := s.regMR(t, 16, LocalWrite)
			_, err = s.qp.PostRecv(RecvWR{ID: 99, SGL: []SGE{rb.SGE(0, 16)}})
			require.NoError(t, err)
			_, err = c.qp.PostSend(SendWR{ID: 100, Opcode: OpSend, Flags: Signaled | Inline, InlineData: []byte("done")})
			require.NoError(t, err)
			waitOK(t, c.scq, WCSend)
			waitOK(t, s.rcq, WCRecv)
			requireSame(t, src.Buf()[:n], dst.Buf()[8:8+n])
			require.Equal(t, make([]byte, 8), dst.Buf()[:8], "guard before")
			require.Equal(t, make([]byte, 8), dst.Buf()[8+n:16+n], "guard after")
		})
	}
}

func TestRDMAReadSizes(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	for i, n := range sizes(c.qp.MULPDU() - 14) {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			src := s.regFilled(t, n, RemoteRead, uint64(i))
			dst := c.regMR(t, n+16, LocalWrite)
			_, err := c.qp.PostSend(SendWR{ID: uint64(i), Opcode: OpRDMARead, Flags: Signaled,
				SGL: []SGE{dst.SGE(8, n)}, RemoteAddr: src.Addr(), RKey: src.RKey()})
			require.NoError(t, err)
			wc := waitOK(t, c.scq, WCRDMARead)
			require.Equal(t, uint32(n), wc.ByteLen)
			requireSame(t, src.Buf()[:n], dst.Buf()[8:8+n])
			require.Equal(t, make([]byte, 8), dst.Buf()[:8], "guard before")
			require.Equal(t, make([]byte, 8), dst.Buf()[8+n:16+n], "guard after")
		})
	}
}

func TestSendSizes(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	for i, n := range sizes(c.qp.MULPDU() - 18) {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			src := c.regFilled(t, n, 0, uint64(i))
			dst := s.regMR(t, n+16, LocalWrite)
			_, err := s.qp.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{dst.SGE(8, n)}})
			require.NoError(t, err)
			_, err = c.qp.PostSend(SendWR{ID: uint64(i), Opcode: OpSend, Flags: Signaled, SGL: []SGE{src.SGE(0, n)}})
			require.NoError(t, err)
			waitOK(t, c.scq, WCSend)
			wc := waitOK(t, s.rcq, WCRecv)
			require.Equal(t, uint64(i), wc.ID)
			require.Equal(t, uint32(n), wc.ByteLen)
			requireSame(t, src.Buf()[:n], dst.Buf()[8:8+n])
			require.Equal(t, make([]byte, 8), dst.Buf()[:8], "guard before")
			require.Equal(t, make([]byte, 8), dst.Buf()[8+n:16+n], "guard after")
		})
	}
}

// Gather from several SGEs, scatter into several SGEs of other sizes.
func TestSendScatterGather(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	src := c.regFilled(t, 100000, 0, 7)
	dst := s.regMR(t, 100000, LocalWrite)
	gather := []SGE{src.SGE(0, 10), src.SGE(10, 40000), src.SGE(40010, 1), src.SGE(40011, 59989)}
	scatter := []SGE{dst.SGE(0, 3), dst.SGE(3, 65000), dst.SGE(65003, 34997)}
	_, err := s.qp.PostRecv(RecvWR{ID: 1, SGL: scatter})
	require.NoError(t, err)
	_, err = c.qp.PostSend(SendWR{ID: 2, Opcode: OpSend, Flags: Signaled, SGL: gather})
	require.NoError(t, err)
	waitOK(t, c.scq, WCSend)
	wc := waitOK(t, s.rcq, WCRecv)
	require.Equal(t, uint32(100000), wc.ByteLen)
	requireSame(t, src.Buf(), dst.Buf())
}
