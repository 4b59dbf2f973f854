package verbs

import (
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/require"
)

// The receive loop remembers the region of the last RDMA Write (stagCache).
// A change to that region after a Write through it must be seen by the
// next Write: re-registered under a new key, the old key is refused; a
// second Write with the new key lands in the new buffer; deregistered, its
// STag is refused with the Terminate RFC 5041 prescribes.
func TestSTagCacheFollowsBinding(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	src := c.regFilled(t, 64, 0, 9)
	write := func(id uint64, addr uint64, rkey uint32) {
		t.Helper()
		_, err := c.qp.PostSend(SendWR{ID: id, Opcode: OpRDMAWrite, Flags: Signaled, SGL: []SGE{src.SGE(0, 64)}, RemoteAddr: addr, RKey: rkey})
		require.NoError(t, err)
		waitOK(t, c.scq, WCRDMAWrite)
	}

	// A fast-registered region, written twice (the second through the
	// cache), then bound to another buffer under a new key.
	fmr, err := s.pd.AllocMR()
	require.NoError(t, err)
	buf1, buf2 := make([]byte, 64), make([]byte, 64)
	k1, err := s.qp.PostRegMR(1, Signaled, fmr, buf1, LocalWrite|RemoteWrite)
	require.NoError(t, err)
	waitOK(t, s.scq, WCRegMR)
	write(1, fmr.Addr(), k1)
	write(2, fmr.Addr(), k1)
	barrier(t, c, s)
	requireSame(t, src.Buf(), buf1)

	k2, err := s.qp.PostRegMR(2, Signaled, fmr, buf2, LocalWrite|RemoteWrite)
	require.NoError(t, err)
	waitOK(t, s.scq, WCRegMR)
	write(3, fmr.Addr(), k2)
	barrier(t, c, s)
	requireSame(t, src.Buf(), buf2)

	// A plain region the cache holds, deregistered: its STag is dead.
	mr := s.regMR(t, 64, LocalWrite|RemoteWrite)
	write(4, mr.Addr(), mr.RKey())
	barrier(t, c, s)
	requireSame(t, src.Buf(), mr.Buf())
	require.NoError(t, mr.Dereg())
	write(5, mr.Addr(), mr.RKey()) // completes when handed to TCP
	waitDone(t, s.qp, 10*time.Second)
	var te *TerminateError
	require.ErrorAs(t, s.qp.Err(), &te)
	require.Equal(t, "DDP tagged buffer error: invalid STag", te.Terminate.Cause().String())
	waitDone(t, c.qp, 10*time.Second)
	require.ErrorAs(t, c.qp.Err(), &te)
	require.True(t, te.Remote)
}

// The old key of a re-registered region is refused although the cache
// last saw it: the region's binding changed under it.
func TestSTagCacheOldKeyRefused(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	src := c.regFilled(t, 64, 0, 3)
	fmr, err := s.pd.AllocMR()
	require.NoError(t, err)
	k1, err := s.qp.PostRegMR(1, Signaled, fmr, make([]byte, 64), LocalWrite|RemoteWrite)
	require.NoError(t, err)
	waitOK(t, s.scq, WCRegMR)
	_, err = c.qp.PostSend(SendWR{ID: 1, Opcode: OpRDMAWrite, Flags: Signaled, SGL: []SGE{src.SGE(0, 64)}, RemoteAddr: fmr.Addr(), RKey: k1})
	require.NoError(t, err)
	waitOK(t, c.scq, WCRDMAWrite)
	barrier(t, c, s)
	k2, err := s.qp.PostRegMR(2, Signaled, fmr, make([]byte, 64), LocalWrite|RemoteWrite)
	require.NoError(t, err)
	require.NotEqual(t, k1, k2)
	waitOK(t, s.scq, WCRegMR)
	_, err = c.qp.PostSend(SendWR{ID: 2, Opcode: OpRDMAWrite, Flags: Signaled, SGL: []SGE{src.SGE(0, 64)}, RemoteAddr: fmr.Addr(), RKey: k1})
	require.NoError(t, err)
	waitDone(t, s.qp, 10*time.Second)
	var te *TerminateError
	require.ErrorAs(t, s.qp.Err(), &te)
	require.Equal(t, "DDP tagged buffer error: invalid STag", te.Terminate.Cause().String())
}

// The send and receive queues remember the last local region posted from
// (stagCache) too: a deregistered region's key is refused at the next post
// from that queue, as are rights the region lacks, and a region
// re-registered under a new key is reached by the new key only.
func TestSTagCacheLocalKeys(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{ird: 4, ord: 4})
	src := s.regFilled(t, 64, RemoteRead, 1)
	dst := s.regMR(t, 64, LocalWrite|RemoteWrite)
	ro := c.regMR(t, 64, 0) // no local write: a send source, never a sink
	_, err := c.qp.PostSend(SendWR{ID: 1, Opcode: OpRDMAWrite, Flags: Signaled, SGL: []SGE{ro.SGE(0, 64)},
		RemoteAddr: dst.Addr(), RKey: dst.RKey()}) // the SQ's cache now holds ro
	require.NoError(t, err)
	waitOK(t, c.scq, WCRDMAWrite)
	_, err = c.qp.PostSend(SendWR{ID: 2, Opcode: OpRDMARead, Flags: Signaled, SGL: []SGE{ro.SGE(0, 64)}, RemoteAddr: src.Addr(), RKey: src.RKey()})
	require.ErrorIs(t, err, ErrLocalProt, "a Read into a region without local write")
	_, err = c.qp.PostRecv(RecvWR{ID: 3, SGL: []SGE{ro.SGE(0, 64)}})
	require.ErrorIs(t, err, ErrLocalProt, "a receive into a region without local write")

	rb := c.regMR(t, 64, LocalWrite)
	_, err = c.qp.PostRecv(RecvWR{ID: 4, SGL: []SGE{rb.SGE(0, 32)}}) // the RQ's cache now holds rb
	require.NoError(t, err)
	key := rb.LKey()
	require.NoError(t, rb.Dereg())
	_, err = c.qp.PostRecv(RecvWR{ID: 5, SGL: []SGE{{Addr: rb.Addr(), Length: 32, LKey: key}}})
	require.ErrorIs(t, err, ErrLocalProt, "a receive into a deregistered region")
	_, err = c.qp.PostSend(SendWR{ID: 6, Opcode: OpSend, SGL: []SGE{{Addr: rb.Addr(), Length: 32, LKey: key}}})
	require.ErrorIs(t, err, ErrLocalProt, "a Send from a deregistered region")

	fmr, err := c.pd.AllocMR()
	require.NoError(t, err)
	buf := make([]byte, 64)
	k1, err := c.qp.PostRegMR(7, Signaled, fmr, buf, LocalWrite)
	require.NoError(t, err)
	waitOK(t, c.scq, WCRegMR)
	_, err = c.qp.PostRecv(RecvWR{ID: 8, SGL: []SGE{{Addr: fmr.Addr(), Length: 64, LKey: k1}}})
	require.NoError(t, err)
	k2, err := c.qp.PostRegMR(9, Signaled, fmr, buf, LocalWrite)
	require.NoError(t, err)
	waitOK(t, c.scq, WCRegMR)
	_, err = c.qp.PostRecv(RecvWR{ID: 10, SGL: []SGE{{Addr: fmr.Addr(), Length: 64, LKey: k1}}})
	require.ErrorIs(t, err, ErrLocalProt, "the key of the registration before")
	_, err = c.qp.PostRecv(RecvWR{ID: 11, SGL: []SGE{{Addr: fmr.Addr(), Length: 64, LKey: k2}}})
	require.NoError(t, err)
}

// A QP that is done lets go of the regions its STag caches hold: an
// application that keeps the dead QP (to read its Err, say) does not keep a
// deregistered region alive through it. Before, the receive loop's cache
// and the SQ's and RQ's each held their last region until the QP went.
func TestSTagCacheLetsGoWhenDone(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	mr, _, _ := fillSTagCaches(t, c, s, make([]byte, 1<<20))

	gone := weak.Make(mr)
	require.NoError(t, mr.Dereg())
	mr = nil
	require.NoError(t, s.qp.Close())
	waitDone(t, s.qp, 10*time.Second)
	waitDone(t, c.qp, 10*time.Second)
	for range 3 {
		runtime.GC()
	}
	require.Nil(t, gone.Value(), "the deregistered region outlives its QP's end")
	runtime.KeepAlive(s.qp)
}

// A region deregistered while the QPs that used it live on, idle, lets go of
// its memory: their STag caches (the receive loop's, the SQ's, the RQ's)
// keep the MR, whose dead binding no longer holds the buffer. The QPs go on
// working, and the dead STag reaches nothing.
func TestSTagCacheLetsGoOnDereg(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	mem := new([1 << 20]byte)
	mr, src, peer := fillSTagCaches(t, c, s, mem[:])
	_, err := c.qp.PostSend(SendWR{ID: 4, Opcode: OpSend, Flags: Signaled, SGL: []SGE{src.SGE(0, 8)}}) // takes the receive
	require.NoError(t, err)
	waitOK(t, c.scq, WCSend)
	waitOK(t, s.rcq, WCRecv)

	// No WR holds the region any more, only the caches.
	gone := weak.Make(mem)
	rkey := mr.RKey()
	require.NoError(t, mr.Dereg())
	require.Nil(t, mr.Buf())
	require.Zero(t, mr.Len())
	mem = nil
	for range 3 {
		runtime.GC()
	}
	require.True(t, gone.Value() == nil, "a live QP keeps a deregistered region's memory")

	// The QPs work on: s sends from a new region into a receive c posts.
	_, err = c.qp.PostRecv(RecvWR{ID: 5, SGL: []SGE{peer.SGE(0, 64)}})
	require.NoError(t, err)
	fresh := s.regFilled(t, 64, 0, 7)
	_, err = s.qp.PostSend(SendWR{ID: 6, Opcode: OpSend, Flags: Signaled, SGL: []SGE{fresh.SGE(0, 64)}})
	require.NoError(t, err)
	waitOK(t, s.scq, WCSend)
	wc := waitOK(t, c.rcq, WCRecv)
	require.Equal(t, uint32(64), wc.ByteLen)
	require.Equal(t, fresh.Buf(), peer.Buf())

	// And the dead STag reaches nothing: a Write to it ends the connection
	// with a Terminate.
	_, err = c.qp.PostSend(SendWR{ID: 7, Opcode: OpRDMAWrite, Flags: Signaled, SGL: []SGE{src.SGE(0, 64)},
		RemoteAddr: 0, RKey: rkey})
	require.NoError(t, err)
	waitDone(t, s.qp, 10*time.Second)
	var te *TerminateError
	require.ErrorAs(t, s.qp.Err(), &te)
	runtime.KeepAlive(s.qp)
}

// fillSTagCaches registers buf on s and has each of s's STag caches take
// it: c Writes into it (s's receive loop), s posts a receive into it (its
// RQ; the receive stays posted) and Writes from it to c (its SQ). It
// returns the region, and c's source and target regions.
func fillSTagCaches(t *testing.T, c, s *side, buf []byte) (mr, src, peer *MR) {
	t.Helper()
	src = c.regFilled(t, 64, 0, 9)
	peer = c.regMR(t, 64, LocalWrite|RemoteWrite)
	mr, err := s.pd.RegMR(buf, LocalWrite|RemoteWrite)
	require.NoError(t, err)
	_, err = c.qp.PostSend(SendWR{ID: 1, Opcode: OpRDMAWrite, Flags: Signaled, SGL: []SGE{src.SGE(0, 64)},
		RemoteAddr: mr.Addr(), RKey: mr.RKey()}) // s's receive loop caches mr
	require.NoError(t, err)
	waitOK(t, c.scq, WCRDMAWrite)
	barrier(t, c, s)
	_, err = s.qp.PostRecv(RecvWR{ID: 2, SGL: []SGE{mr.SGE(0, 64)}}) // s's RQ caches mr
	require.NoError(t, err)
	_, err = s.qp.PostSend(SendWR{ID: 3, Opcode: OpRDMAWrite, Flags: Signaled, SGL: []SGE{mr.SGE(0, 64)},
		RemoteAddr: peer.Addr(), RKey: peer.RKey()}) // and its SQ
	require.NoError(t, err)
	waitOK(t, s.scq, WCRDMAWrite)
	require.Equal(t, mr, s.qp.rx.stags.mr, "the receive loop's cache")
	require.Equal(t, mr, s.qp.sqStags.mr, "the SQ's cache")
	require.Equal(t, mr, s.qp.rq.stags.mr, "the RQ's cache")
	return mr, src, peer
}

// A WR that fill refuses after taking an element of its gather list into
// its SQ slot leaves no reference there: on an idle QP, a region
// deregistered after the refusal is collected.
func TestRefusedWRLetsGo(t *testing.T) {
	checkRoutines(t)
	cp := defaultCap()
	cp.MaxSendSGE = 2
	c, _ := connect(t, pairOpts{cap: cp})
	mem := new([1 << 20]byte)
	mr, err := c.pd.RegMR(mem[:], LocalWrite)
	require.NoError(t, err)
	bad := SGE{Addr: mr.Addr(), Length: 8, LKey: mr.LKey() + 1}
	_, err = c.qp.PostSend(SendWR{ID: 1, Opcode: OpSend, SGL: []SGE{mr.SGE(0, 8), bad}})
	require.ErrorIs(t, err, ErrLocalProt)
	gone := weak.Make(mem)
	require.NoError(t, mr.Dereg())
	mem = nil
	for range 3 {
		runtime.GC()
	}
	require.True(t, gone.Value() == nil, "the refused WR's slot keeps a deregistered region's memory")
	runtime.KeepAlive(c.qp)
}
