package rdmap

import (
	"testing"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/stretchr/testify/require"
)

func TestCheckQN(t *testing.T) {
	for op := Opcode(0); op < 12; op++ {
		info := op.Info()
		if info.Tagged {
			continue
		}
		require.NoError(t, CheckQN(op, info.QN, true), "%v", op)
		if !info.RFC7306 {
			require.NoError(t, CheckQN(op, info.QN, false), "%v", op)
		}
		for qn := uint32(0); qn < 6; qn++ {
			if qn == info.QN {
				continue
			}
			err := CheckQN(op, qn, true)
			require.ErrorIs(t, err, ddp.ErrInvalidQN, "%v on QN %d", op, qn)
			require.Equal(t, Cause{LayerDDP, uint8(ddp.ETypeUntagged), ddp.CodeInvalidQN}, CauseOf(err))
		}
	}
	// QN 3 exists only with RFC 7306 (ddp.CheckQN's part).
	err := CheckQN(OpAtomicResponse, QNAtomicResponse, false)
	require.ErrorIs(t, err, ddp.ErrInvalidQN)
	require.EqualError(t, err, "ddp: invalid QN: QN 3, stream has 3 queues")
	require.EqualError(t, CheckQN(OpSend, QNReadRequest, false), "ddp: invalid QN: Send on QN 1, its queue is 0")
}

func untagged(op Opcode, last bool, mo uint32) ddp.Untagged {
	return ddp.Untagged(ddp.AppendUntagged(nil, last, Ctrl(op), 0, op.Info().QN, 1, mo))
}

func TestCheckLen(t *testing.T) {
	for _, op := range []Opcode{OpReadRequest, OpAtomicRequest, OpAtomicResponse} {
		want := op.Info().HdrLen - ddp.UntaggedHdrLen
		require.NoError(t, CheckLen(op, untagged(op, true, 0), want), "%v", op)
		// Longer than its buffer, or going on past this segment: DDP 0x05.
		require.ErrorIs(t, CheckLen(op, untagged(op, true, 0), want+1), ddp.ErrMsgTooLong, "%v", op)
		require.ErrorIs(t, CheckLen(op, untagged(op, false, 0), want), ddp.ErrMsgTooLong, "%v", op)
		require.ErrorIs(t, CheckLen(op, untagged(op, false, 0), 1), ddp.ErrMsgTooLong, "%v", op)
		// Not at MO 0: DDP 0x04.
		require.ErrorIs(t, CheckLen(op, untagged(op, true, 4), want-4), ddp.ErrInvalidMO, "%v", op)
		// Shorter: a malformed RDMAP header, remote operation 0xFF.
		for n := 0; n < want; n++ {
			err := CheckLen(op, untagged(op, true, 0), n)
			require.ErrorIs(t, err, ErrMalformed, "%v of %d", op, n)
			require.Equal(t, Cause{LayerRDMAP, ETypeRemoteOperation, CodeUnspecified}, CauseOf(err))
		}
	}
	// Immediate Data: exactly 8 octets in one segment (RFC 7306 section 6.3),
	// anything else remote operation 0xFF.
	for _, op := range []Opcode{OpImmediateData, OpImmediateDataSE} {
		require.NoError(t, CheckLen(op, untagged(op, true, 0), ImmediateLen))
		for _, n := range []int{0, 7, 9, 1000} {
			require.ErrorIs(t, CheckLen(op, untagged(op, true, 0), n), ErrMalformed, "%v of %d", op, n)
		}
		require.ErrorIs(t, CheckLen(op, untagged(op, false, 0), ImmediateLen), ErrMalformed)
		require.ErrorIs(t, CheckLen(op, untagged(op, true, 8), ImmediateLen), ErrMalformed)
	}
	// Other messages are not for CheckLen.
	for _, op := range []Opcode{OpSend, OpSendInvalidate, OpSendSE, OpSendSEInvalidate, OpTerminate} {
		require.NoError(t, CheckLen(op, untagged(op, false, 77), 1<<16))
	}
}

func TestCheckReadResponse(t *testing.T) {
	const stag, to, size = 0x01020304, 0x1000, 32
	h := func(stag uint32, to uint64, last bool) ddp.Tagged {
		return ddp.Tagged(ddp.AppendTagged(nil, last, Ctrl(OpReadResponse), stag, to))
	}
	// In one segment, or two.
	require.NoError(t, CheckReadResponse(h(stag, to, true), size, stag, to, size, 0))
	require.NoError(t, CheckReadResponse(h(stag, to, false), 20, stag, to, size, 0))
	require.NoError(t, CheckReadResponse(h(stag, to+20, true), 12, stag, to, size, 20))
	// Zero-length Read: STag and TO not checked (RFC 5041 section 5.2).
	require.NoError(t, CheckReadResponse(h(0xdeadbeef, ^uint64(0), true), 0, 1, 0, 0, 0))

	for _, tc := range []struct {
		name string
		h    ddp.Tagged
		n    uint32
		off  uint32
		want error
	}{
		{"another STag", h(stag^0x5a, to, true), size, 0, ddp.ErrInvalidSTag},
		{"zero-length to another STag, not last", h(0xdeadbeef, to, false), 0, 0, ddp.ErrInvalidSTag},
		{"TO ahead", h(stag, to+8, true), size - 8, 0, ddp.ErrBaseBounds},
		{"TO behind", h(stag, to+4, true), size - 4, 8, ddp.ErrBaseBounds},
		{"longer than the Read", h(stag, to, true), size + 1, 0, ddp.ErrBaseBounds},
		{"past the Read in a later segment", h(stag, to+20, false), 13, 20, ddp.ErrBaseBounds},
		{"L before the end", h(stag, to, true), size - 1, 0, ddp.ErrBaseBounds},
		{"zero-length last segment of a longer Read", h(stag, to, true), 0, 0, ddp.ErrBaseBounds},
	} {
		err := CheckReadResponse(tc.h, tc.n, stag, to, size, tc.off)
		require.ErrorIs(t, err, tc.want, tc.name)
	}
	// No 32-bit overflow of off+n.
	require.ErrorIs(t, CheckReadResponse(h(stag, to+0xffffff00, false), 0x200, stag, to, 0xffffffff, 0xffffff00), ddp.ErrBaseBounds)
}

func TestChecksZeroAllocs(t *testing.T) {
	rr := untagged(OpReadRequest, true, 0)
	rresp := ddp.Tagged(ddp.AppendTagged(nil, true, Ctrl(OpReadResponse), 7, 0x1000))
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := CheckCtrl(false, rr.ULPCtrl(), false); err != nil {
			panic(err)
		}
		if CheckQN(OpReadRequest, rr.QN(), false) != nil || CheckLen(OpReadRequest, rr, ReadRequestLen) != nil ||
			CheckReadResponse(rresp, 16, 7, 0x1000, 16, 0) != nil {
			panic("check")
		}
	})
	require.Zero(t, allocs)
}
