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

// Gather and scatter lists at a cap between 1 and the device's: each SQ and
// RQ slot has a window of MaxSendSGE (MaxRecvSGE) elements in one array per
// ring, so a full ring of lists at the cap, wrapping twice, must reach the
// peer intact, and one element more is refused without harming the rest.
func TestSGEListsAtCap(t *testing.T) {
	checkRoutines(t)
	const depth, sendSGE, recvSGE, seg = 4, 3, 2, 7
	const msg, total = sendSGE * seg, 3 * depth * sendSGE * seg
	c, s := connect(t, pairOpts{cap: QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: sendSGE, MaxRecvSGE: recvSGE}})
	src := c.regFilled(t, total, 0, 7)
	dst := s.regMR(t, total, LocalWrite)
	wdst := s.regMR(t, total, LocalWrite|RemoteWrite)
	// The gather lists take each message's pieces in reverse order, the
	// scatter lists move its last piece to the front: a slot that used its
	// neighbour's window would show.
	for round := range 3 {
		var sends, writes []SendWR
		var recvs []RecvWR
		for i := range depth {
			m := (round*depth + i) * msg
			var sgl []SGE
			for k := sendSGE - 1; k >= 0; k-- {
				sgl = append(sgl, src.SGE(m+k*seg, seg))
			}
			sends = append(sends, SendWR{ID: uint64(m), Opcode: OpSend, Flags: Signaled, SGL: sgl})
			writes = append(writes, SendWR{ID: uint64(m), Opcode: OpRDMAWrite, Flags: Signaled, SGL: sgl,
				RemoteAddr: wdst.Addr() + uint64(m), RKey: wdst.RKey()})
			recvs = append(recvs, RecvWR{ID: uint64(m), SGL: []SGE{dst.SGE(m+msg-seg, seg), dst.SGE(m, msg-seg)}})
		}
		n, err := s.qp.PostRecv(append(recvs, RecvWR{ID: 1, SGL: []SGE{dst.SGE(0, 1)}})...)
		require.ErrorIs(t, err, ErrQueueFull)
		require.Equal(t, depth, n)
		for _, wrs := range [][]SendWR{sends, writes} {
			n, err := c.qp.PostSend(wrs...)
			require.NoError(t, err)
			require.Equal(t, depth, n)
			for i := range depth {
				wc := wait(t, c.scq)
				require.Equal(t, Success, wc.Status)
				require.Equal(t, wrs[i].ID, wc.ID)
				require.Equal(t, uint32(msg), wc.ByteLen)
			}
		}
		for i := range depth {
			wc := waitOK(t, s.rcq, WCRecv)
			require.Equal(t, recvs[i].ID, wc.ID)
			require.Equal(t, uint32(msg), wc.ByteLen)
		}
	}

	// One element beyond the cap is refused, and what was posted before it
	// in the same call goes through.
	var long []SGE
	for k := range sendSGE + 1 {
		long = append(long, src.SGE(k, 1))
	}
	_, err := s.qp.PostRecv(RecvWR{ID: 5, SGL: []SGE{dst.SGE(total-msg, msg)}},
		RecvWR{ID: 6, SGL: []SGE{dst.SGE(0, 1), dst.SGE(1, 1), dst.SGE(2, 1)}})
	require.ErrorIs(t, err, ErrTooManySGE)
	n, err := c.qp.PostSend(SendWR{ID: 7, Opcode: OpSend, Flags: Signaled, SGL: long[:sendSGE]},
		SendWR{ID: 8, Opcode: OpSend, Flags: Signaled, SGL: long})
	require.ErrorIs(t, err, ErrTooManySGE)
	require.Equal(t, 1, n)
	require.Equal(t, uint64(7), waitOK(t, c.scq, WCSend).ID)
	wc := waitOK(t, s.rcq, WCRecv)
	require.Equal(t, uint64(5), wc.ID)
	require.Equal(t, uint32(sendSGE), wc.ByteLen)

	// That Send came after every Write: all are placed.
	for m := 0; m < total; m += msg {
		var want []byte
		for k := sendSGE - 1; k >= 0; k-- {
			want = append(want, src.Buf()[m+k*seg:m+(k+1)*seg]...)
		}
		requireSame(t, want, wdst.Buf()[m:m+msg])
		if m == total-msg {
			want = src.Buf()[:sendSGE] // overwritten by receive 5
			requireSame(t, want, dst.Buf()[m:m+sendSGE])
			continue
		}
		requireSame(t, want, append(append([]byte{}, dst.Buf()[m+msg-seg:m+msg]...), dst.Buf()[m:m+msg-seg]...))
	}
}
