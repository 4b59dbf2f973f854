package ddp

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func code(t *testing.T, err error) (EType, uint8) {
	t.Helper()
	var e *Error
	require.True(t, errors.As(err, &e), "%v", err)
	return e.EType, e.Code
}

func TestCheckQN(t *testing.T) {
	require.NoError(t, CheckQN(0, 3))
	require.NoError(t, CheckQN(2, 3))
	err := CheckQN(3, 3)
	require.ErrorIs(t, err, ErrInvalidQN)
	et, c := code(t, err)
	require.Equal(t, ETypeUntagged, et)
	require.Equal(t, uint8(0x01), c)
	require.ErrorIs(t, CheckQN(5, 4), ErrInvalidQN)
	require.ErrorIs(t, CheckQN(0, 0), ErrInvalidQN)
	require.ErrorIs(t, CheckQN(0xffffffff, 4), ErrInvalidQN)
}

// On a stream only the expected MSN is legal: behind or ahead, near or far,
// any other is 0x03 (see "Which MSN error" in untagged_check.go).
func TestCheckMSN(t *testing.T) {
	require.NoError(t, CheckMSN(1, 1), "RFC 5041 section 4.3: the first MSN is one")
	for _, msn := range []uint32{0, 2, 3, 0x80000000, 0xffffffff} {
		err := CheckMSN(msn, 1)
		require.ErrorIs(t, err, ErrMSNRange, "MSN %d", msn)
		require.NotErrorIs(t, err, ErrMSNNoBuffer)
		et, c := code(t, err)
		require.Equal(t, ETypeUntagged, et)
		require.Equal(t, uint8(0x03), c)
	}
	// MSNs wrap from 0xFFFFFFFF to 0 (RFC 5041 section 4.3).
	require.NoError(t, CheckMSN(0, 0))
	require.NoError(t, CheckMSN(0xffffffff, 0xffffffff))
	require.ErrorIs(t, CheckMSN(0, 0xffffffff), ErrMSNRange)
}

func TestCheckBuffer(t *testing.T) {
	require.NoError(t, CheckBuffer(0, 1, true))
	err := CheckBuffer(1, 7, false)
	require.ErrorIs(t, err, ErrMSNNoBuffer)
	et, c := code(t, err)
	require.Equal(t, ETypeUntagged, et)
	require.Equal(t, uint8(0x02), c)
	require.EqualError(t, err, "ddp: invalid MSN - no buffer available: no buffer posted on QN 1 for MSN 7")
}

func TestCheckMO(t *testing.T) {
	require.NoError(t, CheckMO(0, 0), "a message starts at MO 0")
	require.NoError(t, CheckMO(1482, 1482), "a segment continues where the last ended")
	for _, tc := range [][2]uint32{{1, 0}, {0x10000, 0}, {0, 1482}, {1481, 1482}, {1483, 1482}} {
		err := CheckMO(tc[0], tc[1])
		require.ErrorIs(t, err, ErrInvalidMO, "MO %d, want %d", tc[0], tc[1])
		et, c := code(t, err)
		require.Equal(t, ETypeUntagged, et)
		require.Equal(t, uint8(0x04), c)
	}
}

func TestCheckMsgLen(t *testing.T) {
	require.NoError(t, CheckMsgLen(0, 100, 100))
	require.NoError(t, CheckMsgLen(99, 1, 100))
	require.NoError(t, CheckMsgLen(500, 0, 100), "zero-length: places nothing")
	require.NoError(t, CheckMsgLen(0, 0, 0))
	require.ErrorIs(t, CheckMsgLen(50, 51, 100), ErrMsgTooLong)
	require.ErrorIs(t, CheckMsgLen(100, 1, 100), ErrMsgTooLong, "continues a full buffer")
	require.ErrorIs(t, CheckMsgLen(0, 1, 0), ErrMsgTooLong)
	require.ErrorIs(t, CheckMsgLen(1, 0xffffffff, 0xffffffff), ErrMsgTooLong, "no 32-bit overflow")
	require.ErrorIs(t, CheckMsgLen(0xffffffff, 1, 0xffffffff), ErrMsgTooLong)
	et, c := code(t, CheckMsgLen(50, 51, 100))
	require.Equal(t, ETypeUntagged, et)
	require.Equal(t, uint8(0x05), c)
}

func TestChecksZeroAllocs(t *testing.T) {
	h := Untagged(AppendUntagged(nil, true, 0x43, 0, 0, 5, 10))
	allocs := testing.AllocsPerRun(100, func() {
		if CheckQN(h.QN(), 3) != nil || CheckMSN(h.MSN(), 5) != nil || CheckMO(h.MO(), 10) != nil ||
			CheckBuffer(h.QN(), h.MSN(), true) != nil || CheckMsgLen(h.MO(), 20, 100) != nil {
			panic("check")
		}
	})
	require.Zero(t, allocs)
}
