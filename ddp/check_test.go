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
}

func TestQueueMSN(t *testing.T) {
	q := NewQueue(4)
	require.Equal(t, uint32(1), q.Next(), "RFC 5041 section 4.3: the first MSN is one")
	require.ErrorIs(t, q.CheckMSN(1), ErrMSNNoBuffer, "nothing posted yet")

	require.True(t, q.Post(2))
	require.Equal(t, uint32(2), q.Posted())
	require.NoError(t, q.CheckMSN(1))
	require.NoError(t, q.CheckMSN(2))
	require.Equal(t, uint32(1), q.Slot(2))
	require.ErrorIs(t, q.CheckMSN(3), ErrMSNNoBuffer, "within the window, no buffer posted")
	require.ErrorIs(t, q.CheckMSN(4), ErrMSNNoBuffer)
	require.ErrorIs(t, q.CheckMSN(5), ErrMSNRange, "beyond the window")
	require.ErrorIs(t, q.CheckMSN(0), ErrMSNRange, "behind Next")
	require.ErrorIs(t, q.CheckMSN(0x80000000), ErrMSNRange)

	require.False(t, q.Post(3), "window of 4")
	require.Equal(t, uint32(2), q.Posted())
	require.True(t, q.Post(2))

	q.Complete()
	require.Equal(t, uint32(2), q.Next())
	require.Equal(t, uint32(3), q.Posted())
	require.ErrorIs(t, q.CheckMSN(1), ErrMSNRange, "an old message")
	require.NoError(t, q.CheckMSN(4))
	require.ErrorIs(t, q.CheckMSN(5), ErrMSNNoBuffer)
	require.ErrorIs(t, q.CheckMSN(6), ErrMSNRange)

	et, c := code(t, q.CheckMSN(6))
	require.Equal(t, ETypeUntagged, et)
	require.Equal(t, uint8(0x03), c)
	et, c = code(t, q.CheckMSN(5))
	require.Equal(t, ETypeUntagged, et)
	require.Equal(t, uint8(0x02), c)
}

func TestQueueWrap(t *testing.T) {
	q := Queue{next: 0xfffffffe, window: 8}
	require.True(t, q.Post(4))
	for _, m := range []uint32{0xfffffffe, 0xffffffff, 0, 1} {
		require.NoError(t, q.CheckMSN(m), "MSN %#x", m)
	}
	require.ErrorIs(t, q.CheckMSN(2), ErrMSNNoBuffer)
	require.ErrorIs(t, q.CheckMSN(0xfffffffd), ErrMSNRange)
	q.Complete()
	q.Complete()
	require.Zero(t, q.Next(), "RFC 5041 section 4.3: wraps to 0 after 0xFFFFFFFF")
	q.Complete()
	q.Complete()
	q.Complete() // nothing posted: no-op
	require.Equal(t, uint32(2), q.Next())
	require.Zero(t, q.Posted())
}

func TestCheckMO(t *testing.T) {
	require.NoError(t, CheckMO(0, 100, 100))
	require.NoError(t, CheckMO(99, 1, 100))
	require.NoError(t, CheckMO(500, 0, 100), "zero-length: not checked")
	require.ErrorIs(t, CheckMO(100, 1, 100), ErrInvalidMO)
	require.ErrorIs(t, CheckMO(0xffffffff, 1, 100), ErrInvalidMO)
	require.ErrorIs(t, CheckMO(50, 51, 100), ErrMsgTooLong)
	require.ErrorIs(t, CheckMO(1, 0xffffffff, 0xffffffff), ErrMsgTooLong, "no 32-bit overflow")
	et, c := code(t, CheckMO(50, 51, 100))
	require.Equal(t, ETypeUntagged, et)
	require.Equal(t, uint8(0x05), c)
	et, c = code(t, CheckMO(100, 1, 100))
	require.Equal(t, ETypeUntagged, et)
	require.Equal(t, uint8(0x04), c)
}

func TestCheckTagged(t *testing.T) {
	const base, size = 0x1000, 0x100
	require.NoError(t, CheckTagged(0x1000, 0x100, base, size))
	require.NoError(t, CheckTagged(0x10ff, 1, base, size))
	require.NoError(t, CheckTagged(0, 0, base, size), "zero-length: STag and TO not checked")
	require.NoError(t, CheckTagged(^uint64(0), 0, base, size))

	require.ErrorIs(t, CheckTagged(0xfff, 1, base, size), ErrBaseBounds, "below base")
	require.ErrorIs(t, CheckTagged(0x1100, 1, base, size), ErrBaseBounds, "at the end")
	require.ErrorIs(t, CheckTagged(0x10ff, 2, base, size), ErrBaseBounds, "runs past the end")
	et, c := code(t, CheckTagged(0x10ff, 2, base, size))
	require.Equal(t, ETypeTagged, et)
	require.Equal(t, uint8(0x01), c)

	err := CheckTagged(^uint64(0), 1, base, size)
	require.ErrorIs(t, err, ErrTOWrap, "RFC 5041 section 7.1 check 5")
	et, c = code(t, err)
	require.Equal(t, ETypeTagged, et)
	require.Equal(t, uint8(0x03), c)
	require.NoError(t, CheckTOWrap(^uint64(0), 0))
	// The RFC's test is literal: the 64-bit sum TO+length must not wrap, so
	// a segment ending exactly at 2^64 (sum 0) is a wrap.
	require.NoError(t, CheckTOWrap(^uint64(0)-9, 9))
	require.ErrorIs(t, CheckTOWrap(^uint64(0)-9, 10), ErrTOWrap)

	// A buffer reaching the top of the TO space: nothing overflows.
	top := ^uint64(0) - 0xff
	require.NoError(t, CheckBounds(top, 0x100, top, 0x100))
	require.NoError(t, CheckTagged(top, 0xff, top, 0x100))
	require.ErrorIs(t, CheckBounds(top, 0x101, top, 0x100), ErrBaseBounds)
	require.NoError(t, CheckBounds(5, 10, 0, ^uint64(0)))
}

func TestChecksZeroAllocs(t *testing.T) {
	q := NewQueue(16)
	q.Post(16)
	allocs := testing.AllocsPerRun(100, func() {
		if CheckQN(1, 3) != nil || q.CheckMSN(5) != nil || CheckMO(10, 20, 100) != nil ||
			CheckTagged(0x1000, 10, 0x1000, 100) != nil {
			panic("check")
		}
	})
	require.Zero(t, allocs)
}
