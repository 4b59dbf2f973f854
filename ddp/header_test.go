package ddp

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// Distinctive field values: a byte-order mistake shows at a glance.
const (
	stag  = 0x01020304
	to    = 0x0102030405060708
	qn    = 0x11121314
	msn   = 0x21222324
	mo    = 0x31323334
	word  = 0x41424344
	rctrl = 0x4a // an RDMAP-like control octet
)

var (
	goldenTagged = []byte{
		0xc1, 0x4a, // T|L|DV=1, RsvdULP
		0x01, 0x02, 0x03, 0x04, // STag
		0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // TO
	}
	goldenUntagged = []byte{
		0x01, 0x4a, // DV=1 (not last), RsvdULP[0:7]
		0x41, 0x42, 0x43, 0x44, // RsvdULP[8:39]
		0x11, 0x12, 0x13, 0x14, // QN
		0x21, 0x22, 0x23, 0x24, // MSN
		0x31, 0x32, 0x33, 0x34, // MO
	}
)

func TestAppendTaggedGolden(t *testing.T) {
	b := AppendTagged([]byte{0xee}, true, rctrl, stag, to)
	require.Equal(t, append([]byte{0xee}, goldenTagged...), b, "appends after existing octets")

	h := Tagged(goldenTagged)
	require.True(t, h.Last())
	require.EqualValues(t, 1, h.Version())
	require.Equal(t, byte(rctrl), h.ULPCtrl())
	require.Equal(t, uint32(stag), h.STag())
	require.Equal(t, uint64(to), h.TO())
}

func TestAppendUntaggedGolden(t *testing.T) {
	b := AppendUntagged(nil, false, rctrl, word, qn, msn, mo)
	require.Equal(t, goldenUntagged, b)

	h := Untagged(goldenUntagged)
	require.False(t, h.Last())
	require.EqualValues(t, 1, h.Version())
	require.Equal(t, byte(rctrl), h.ULPCtrl())
	require.Equal(t, uint32(word), h.ULPWord())
	require.Equal(t, uint32(qn), h.QN())
	require.Equal(t, uint32(msn), h.MSN())
	require.Equal(t, uint32(mo), h.MO())
}

func TestRoundTrip(t *testing.T) {
	for _, last := range []bool{false, true} {
		for _, v := range []uint64{0, 1, 0xffffffff, 0x8000000000000001, ^uint64(0)} {
			tb := AppendTagged(nil, last, byte(v), uint32(v), v)
			n, tagged, err := Parse(tb)
			require.NoError(t, err)
			require.True(t, tagged)
			h := Tagged(tb[:n])
			require.Equal(t, last, h.Last())
			require.Equal(t, byte(v), h.ULPCtrl())
			require.Equal(t, uint32(v), h.STag())
			require.Equal(t, v, h.TO())

			w := uint32(v)
			ub := AppendUntagged(nil, last, byte(v), w, w^1, w^2, w^3)
			n, tagged, err = Parse(ub)
			require.NoError(t, err)
			require.False(t, tagged)
			u := Untagged(ub[:n])
			require.Equal(t, last, u.Last())
			require.Equal(t, byte(v), u.ULPCtrl())
			require.Equal(t, []uint32{w, w ^ 1, w ^ 2, w ^ 3}, []uint32{u.ULPWord(), u.QN(), u.MSN(), u.MO()})
		}
	}
}

func TestParseVersion(t *testing.T) {
	for _, dv := range []byte{0, 2, 3} {
		tb := append([]byte(nil), goldenTagged...)
		tb[0] = tb[0]&^VersionMask | dv
		_, tagged, err := Parse(tb)
		require.True(t, tagged)
		require.ErrorIs(t, err, ErrTaggedVersion, "RFC 5041 section 7.2: tagged 0x04")
		var de *Error
		require.True(t, errors.As(err, &de))
		require.Equal(t, ETypeTagged, de.EType)
		require.Equal(t, CodeTaggedVersion, de.Code)

		ub := append([]byte(nil), goldenUntagged...)
		ub[0] = ub[0]&^VersionMask | dv
		_, tagged, err = Parse(ub)
		require.False(t, tagged)
		require.ErrorIs(t, err, ErrUntaggedVersion, "RFC 5041 section 7.2: untagged 0x06")

		// The version is checked before the length: one octet is enough.
		_, _, err = Parse(ub[:1])
		require.ErrorIs(t, err, ErrUntaggedVersion)
	}
}

func TestParseIgnoresReservedBits(t *testing.T) {
	// RFC 5041 section 4.1: Rsvd is "not checked on receive".
	tb := append([]byte(nil), goldenTagged...)
	tb[0] |= ReservedMask
	n, tagged, err := Parse(tb)
	require.NoError(t, err)
	require.True(t, tagged)
	require.Equal(t, TaggedHdrLen, n)
	require.True(t, Tagged(tb).Last())
	require.EqualValues(t, 1, Tagged(tb).Version())
}

func TestParseTruncated(t *testing.T) {
	for _, full := range [][]byte{goldenTagged, goldenUntagged} {
		for i := range full {
			_, _, err := Parse(full[:i])
			require.Error(t, err, "prefix of %d octets", i)
			require.ErrorIs(t, err, ErrCatastrophic)
		}
		n, _, err := Parse(full)
		require.NoError(t, err)
		require.Equal(t, len(full), n)
	}
	// A receiver that reads the segment piece by piece passes what it read:
	// all of a segment too short for its header.
	_, _, err := Parse(goldenUntagged[:10])
	require.EqualError(t, err, "ddp: local catastrophic error: 10-octet segment is shorter than the 18-octet untagged header")
}

func TestParsePayloadFollows(t *testing.T) {
	b := append(append([]byte(nil), goldenUntagged...), "payload"...)
	n, _, err := Parse(b)
	require.NoError(t, err)
	require.Equal(t, "payload", string(b[n:]))
}

func TestErrorStrings(t *testing.T) {
	_, _, err := Parse([]byte{0x82})
	require.EqualError(t, err, "ddp: invalid DDP version: DV 2")
	require.Equal(t, "tagged buffer error", ETypeTagged.String())
	require.Equal(t, "DDP error type 9", EType(9).String())
	require.False(t, errors.Is(err, ErrUntaggedVersion))
}

func TestZeroAllocs(t *testing.T) {
	buf := make([]byte, 0, 64)
	allocs := testing.AllocsPerRun(100, func() {
		b := AppendTagged(buf[:0], true, rctrl, stag, to)
		b = AppendUntagged(b, true, rctrl, word, qn, msn, mo)
		n, _, err := Parse(b)
		if err != nil || n != TaggedHdrLen {
			panic("parse")
		}
		h := Tagged(b)
		u := Untagged(b[TaggedHdrLen:])
		_ = h.STag() + uint32(h.TO()) + u.QN() + u.MSN() + u.MO() + u.ULPWord()
	})
	require.Zero(t, allocs)
}
