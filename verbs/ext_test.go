package verbs

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

func extPair(t *testing.T) (c, s *side) {
	return connect(t, pairOpts{client: ConnConfig{RFC7306: true}, server: ConnConfig{RFC7306: true}, ird: 4, ord: 4})
}

func TestAtomics(t *testing.T) {
	checkRoutines(t)
	c, s := extPair(t)
	target := s.regMR(t, 64, LocalWrite|RemoteAtomic)
	// The target is shared with the peer's atomics: touch it atomically too.
	word := (*uint64)(unsafe.Pointer(&target.Buf()[8]))
	atomic.StoreUint64(word, 40)
	res := c.regMR(t, 16, LocalWrite)
	post := func(wr SendWR) uint64 {
		t.Helper()
		wr.Flags |= Signaled
		wr.RemoteAddr, wr.RKey = target.Addr()+8, target.RKey()
		wr.SGL = []SGE{res.SGE(0, 8)}
		_, err := c.qp.PostSend(wr)
		require.NoError(t, err)
		wc := wait(t, c.scq)
		require.Equal(t, Success, wc.Status, "%v (%v)", wc, c.qp.Err())
		return binary.NativeEndian.Uint64(res.Buf())
	}
	require.Equal(t, uint64(40), post(SendWR{Opcode: OpAtomicFetchAdd, CompareAdd: 2}))
	require.Equal(t, uint64(42), post(SendWR{Opcode: OpAtomicCmpSwap, CompareAdd: 42, Swap: 7}))
	require.Equal(t, uint64(7), post(SendWR{Opcode: OpAtomicCmpSwap, CompareAdd: 42, Swap: 9})) // no match: unchanged
	require.Equal(t, uint64(7), post(SendWR{Opcode: OpAtomicFetchAdd, CompareAdd: 1}))
	require.Equal(t, uint64(8), atomic.LoadUint64(word))
	// Masked fetch-and-add: two 32-bit fields; the low one's carry is dropped.
	atomic.StoreUint64(word, 0x00000001_ffffffff)
	post(SendWR{Opcode: OpAtomicFetchAdd, CompareAdd: 0x00000001_00000001, AddMask: 0x80000000_80000000})
	require.Equal(t, uint64(0x00000002_00000000), atomic.LoadUint64(word))
}

func TestMaskedAddMatchesRFCPseudocode(t *testing.T) {
	ref := func(orig, add, mask uint64) uint64 { // RFC 7306 section 5.1.1, literally
		var out, carry uint64
		loc := uint64(1)
		for bit := 0; bit < 64; bit++ {
			if bit != 0 {
				loc <<= 1
			}
			v1, v2 := (orig&loc)>>bit, (add&loc)>>bit
			sum := carry + v1 + v2
			carry = (sum & 2) >> 1
			if sum&1 != 0 {
				out |= loc
			}
			if carry != 0 && mask&loc == 0 {
				carry = 1
			} else {
				carry = 0
			}
		}
		return out
	}
	for _, c := range [][3]uint64{{1, 2, 0}, {^uint64(0), 1, 0}, {0xff, 1, 0x80}, {0x1ffff, 0x10001, 0x8000_8000}, {0xdeadbeef, 0xfeedface, 0x8080808080808080}} {
		require.Equal(t, ref(c[0], c[1], c[2]), maskedAdd(c[0], c[1], c[2]), "%#x", c)
	}
}

func TestImmediateData(t *testing.T) {
	checkRoutines(t)
	c, s := extPair(t)
	dst := s.regMR(t, 64, LocalWrite|RemoteWrite)
	rb := s.regMR(t, 8, LocalWrite)
	_, err := s.qp.PostRecv(RecvWR{ID: 5, SGL: []SGE{rb.SGE(0, 8)}}, RecvWR{ID: 6})
	require.NoError(t, err)
	_, err = c.qp.PostSend(SendWR{ID: 1, Opcode: OpRDMAWriteWithImm, Flags: Signaled | Inline, InlineData: []byte("written"),
		RemoteAddr: dst.Addr(), RKey: dst.RKey(), ImmData: 0x0102030405060708})
	require.NoError(t, err)
	waitOK(t, c.scq, WCRDMAWrite)
	wc := waitOK(t, s.rcq, WCRecvImm)
	require.Equal(t, uint64(5), wc.ID)
	require.Equal(t, WithImm, wc.Flags&WithImm)
	require.Equal(t, uint64(0x0102030405060708), wc.ImmData)
	require.Equal(t, "written", string(dst.Buf()[:7]), "the Write lands before the Immediate Data completes")
	require.Equal(t, []byte{1, 2, 3, 4, 5, 6, 7, 8}, rb.Buf())
	// Immediate Data alone, with SE, into a receive with no buffer.
	_, err = c.qp.PostSend(SendWR{ID: 2, Opcode: OpImmediate, Flags: Solicited, ImmData: 99})
	require.NoError(t, err)
	wc = waitOK(t, s.rcq, WCRecvImm)
	require.Equal(t, uint64(6), wc.ID)
	require.Equal(t, uint64(99), wc.ImmData)
	require.Equal(t, SolicitedEvent, wc.Flags&SolicitedEvent)
}

// Without the opt-in, the extensions are refused locally, and a peer that
// sends them anyway gets a Terminate (unexpected opcode).
func TestExtensionsNeedOptIn(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{client: ConnConfig{RFC7306: true}})
	_, err := s.qp.PostSend(SendWR{Opcode: OpImmediate, ImmData: 1})
	require.ErrorIs(t, err, ErrNotOptedIn)
	_, err = s.qp.PostRecv(RecvWR{ID: 1})
	require.NoError(t, err)
	_, err = c.qp.PostSend(SendWR{Opcode: OpImmediate, ImmData: 1})
	require.NoError(t, err)
	<-s.qp.Done()
	var te *TerminateError
	require.ErrorAs(t, s.qp.Err(), &te)
	require.Equal(t, "RDMAP remote operation error: unexpected opcode", te.Terminate.Cause().String())
}
