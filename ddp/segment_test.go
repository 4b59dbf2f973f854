package ddp

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func segments(msgLen, max uint32) []Segment {
	var out []Segment
	s := NewSegmenter(msgLen, max)
	for seg, ok := s.Next(); ok; seg, ok = s.Next() {
		out = append(out, seg)
	}
	return out
}

func TestSegmenter(t *testing.T) {
	for _, tc := range []struct {
		name     string
		len, max uint32
		want     []Segment
	}{
		{"zero-length message is one segment with L", 0, 100, []Segment{{0, 0, true}}},
		{"zero-length message, zero max", 0, 0, []Segment{{0, 0, true}}},
		{"fits", 5, 100, []Segment{{0, 5, true}}},
		{"exactly one", 100, 100, []Segment{{0, 100, true}}},
		{"one over", 101, 100, []Segment{{0, 100, false}, {100, 1, true}}},
		// RFC 5041 section 5.2's untagged example: 2048 octets, MULPDU 1500.
		{"RFC untagged example", 2048, MaxPayload(1500, false), []Segment{{0, 1482, false}, {1482, 566, true}}},
		// Its tagged example: TO 16384 + 0 and 16384 + 1486 = 17870.
		{"RFC tagged example", 2048, MaxPayload(1500, true), []Segment{{0, 1486, false}, {1486, 562, true}}},
		{"cannot segment", 10, 0, nil},
		{"largest message", 1<<32 - 1, 1<<31 + 1, []Segment{{0, 1<<31 + 1, false}, {1<<31 + 1, 1<<31 - 2, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := segments(tc.len, tc.max)
			require.Equal(t, tc.want, got)
			require.Equal(t, len(tc.want), NewSegmenter(tc.len, tc.max).Count())
			s := NewSegmenter(tc.len, tc.max)
			for range got {
				s.Next()
			}
			_, ok := s.Next()
			require.False(t, ok, "stays done")
		})
	}
}

func TestSegmenterCovers(t *testing.T) {
	for _, l := range []uint32{1, 2, 3, 17, 1000, 4096, 65536 + 7} {
		for _, m := range []uint32{1, 2, 7, 1000, 1 << 20} {
			segs := segments(l, m)
			var off uint32
			for i, s := range segs {
				require.Equal(t, off, s.Off)
				require.LessOrEqual(t, s.Len, m)
				require.NotZero(t, s.Len)
				require.Equal(t, i == len(segs)-1, s.Last)
				off += s.Len
			}
			require.Equal(t, l, off)
			require.Equal(t, len(segs), NewSegmenter(l, m).Count())
		}
	}
}

func TestMaxPayload(t *testing.T) {
	require.Equal(t, uint32(1482), MaxPayload(1500, false))
	require.Equal(t, uint32(1486), MaxPayload(1500, true))
	require.Zero(t, MaxPayload(14, true))
	require.Zero(t, MaxPayload(17, false))
	require.Equal(t, uint32(1), MaxPayload(19, false))
	require.Zero(t, MaxPayload(-1, false))
}

func TestSegmenterZeroAllocs(t *testing.T) {
	var sum uint32
	allocs := testing.AllocsPerRun(100, func() {
		s := NewSegmenter(1<<20, 1448)
		for seg, ok := s.Next(); ok; seg, ok = s.Next() {
			sum += seg.Len
		}
	})
	require.Zero(t, allocs)
	require.NotZero(t, sum)
}
