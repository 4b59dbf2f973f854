//go:build interop

package interop

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestJudgeDirection checks the iwarp-perf judge on made-up segment lists:
// it excuses Wireshark's losing its place after a segment that ends a few
// octets into an FPDU, and nothing else.
func TestJudgeDirection(t *testing.T) {
	const start = 100
	f := framing(1494) // 1500 octets
	// seg is a segment of n octets at stream offset off in which Wireshark
	// completed the FPDUs ulpdus.
	seg := func(frame int, off, n uint64, ulpdus ...int) *segment {
		return &segment{frame: frame, seq: start + off, len: n, ulpdus: ulpdus, good: len(ulpdus)}
	}
	judge := func(segs ...*segment) perfVerdict {
		var v perfVerdict
		v.judgeDirection(1, 1000, &direction{start: start, segs: segs})
		return v
	}

	t.Run("clean, FPDUs across segments", func(t *testing.T) {
		v := judge(seg(1, 0, 1000), seg(2, 1000, 2*f-1000, 1494, 1494))
		require.Empty(t, v.problems)
		require.Equal(t, 2, v.judged)
		require.Zero(t, v.unjudgedOctets)
	})
	t.Run("lost after a segment ending 4 octets into an FPDU", func(t *testing.T) {
		bad := seg(3, f+4, 3*f-4, 46333)
		bad.bad, bad.good = 1, 0
		v := judge(seg(2, 0, f+4, 1494), bad)
		require.Empty(t, v.problems)
		require.Equal(t, 1, v.judged, "the FPDU before the cut")
		require.Equal(t, uint64(3*f-4), v.unjudgedOctets)
		require.Len(t, v.notes, 1)
		require.Contains(t, v.notes[0], "frame 2 ends 4 octets into an FPDU")
	})
	t.Run("an FPDU missing after such a segment", func(t *testing.T) {
		v := judge(seg(2, 0, f+4, 1494), seg(3, f+4, 2*f-4, 1494))
		require.Empty(t, v.problems)
		require.Positive(t, v.unjudgedOctets)
	})
	t.Run("bad CRC before any such segment", func(t *testing.T) {
		bad := seg(2, 0, f, 1494)
		bad.bad, bad.good = 1, 0
		v := judge(bad, seg(3, f, f+4, 1494), seg(4, 2*f+4, f-4, 1494))
		require.Len(t, v.problems, 1)
		require.Contains(t, v.problems[0], "1 bad CRCs")
	})
	t.Run("octets not covered, no such segment", func(t *testing.T) {
		v := judge(seg(2, 0, f, 1494), seg(3, f, f+100))
		require.Len(t, v.problems, 1)
		require.Contains(t, v.problems[0], "cover 1500 of 3100 octets")
	})
	t.Run("a segment ending 8 octets into an FPDU excuses nothing", func(t *testing.T) {
		v := judge(seg(2, 0, f+8, 1494), seg(3, f+8, f-8))
		require.Len(t, v.problems, 1)
	})
	t.Run("lost after octets out of order", func(t *testing.T) {
		late := seg(4, f, f) // overtaken by frame 3, resent as frame 5
		late.outOfOrder = true
		re := seg(5, f, f)
		re.retransmitted = true
		v := judge(seg(2, 0, f, 1494), seg(3, 2*f, f), late, re, seg(6, 3*f, f))
		require.Empty(t, v.problems)
		require.Equal(t, 1, v.judged, "the FPDU before the reordering")
		require.Equal(t, uint64(3*f), v.unjudgedOctets)
		require.Contains(t, v.notes[len(v.notes)-1], "octets from 1500 arrived out of order")
	})
	t.Run("out of step before octets out of order", func(t *testing.T) {
		late := seg(4, 2*f, f)
		late.outOfOrder = true
		v := judge(seg(2, 0, f), seg(3, f, f, 1494), late)
		require.Len(t, v.problems, 1, "an FPDU missing before the reordering")
		require.Contains(t, v.problems[0], "cover")
	})
	t.Run("bad CRC before octets out of order", func(t *testing.T) {
		bad := seg(2, 0, f, 1494)
		bad.bad, bad.good = 1, 0
		late := seg(4, f, f)
		late.outOfOrder = true
		v := judge(bad, late)
		require.Len(t, v.problems, 2)
		require.Contains(t, v.problems[0], "1 bad CRCs")
	})
	// With markers (--fpdu-per-segment): one 1482-octet ULPDU and three
	// markers in each 1500-octet segment.
	marked := func(segs ...*segment) perfVerdict {
		var v perfVerdict
		v.judgeDirection(1, 1000, &direction{start: start, markers: true, segs: segs})
		return v
	}
	mseg := func(frame int, k uint64, ulpdus ...int) *segment { return seg(frame, k*1500, 1500, ulpdus...) }
	t.Run("markers, clean", func(t *testing.T) {
		v := marked(mseg(1, 0, 1482), mseg(2, 1, 1482), mseg(3, 2, 1482))
		require.Empty(t, v.problems)
		require.Equal(t, 3, v.judged)
	})
	t.Run("markers, lost after a hole filled late", func(t *testing.T) {
		// Frame 4 fills the hole frames 2 and 3 left (CI, 2026-11-25):
		// Wireshark decodes the held FPDUs with it and none after.
		v := marked(mseg(1, 0, 1482), mseg(2, 2), mseg(3, 3), mseg(4, 1, 1482, 1482, 1482), mseg(5, 4))
		require.Empty(t, v.problems)
		require.Equal(t, 1, v.judged, "the FPDU before the hole")
		require.Equal(t, uint64(4*1500), v.unjudgedOctets)
		require.Contains(t, v.notes[len(v.notes)-1], "octets from 1500 arrived out of order")
	})
	t.Run("markers, wrong before the reordering", func(t *testing.T) {
		bad := mseg(1, 0, 1482)
		bad.bad, bad.good = 1, 0
		v := marked(bad, mseg(2, 1), mseg(3, 2), mseg(4, 3), mseg(5, 4))
		require.NotEmpty(t, v.problems, "a bad CRC and FPDUs missing, with nothing out of order")
		require.Contains(t, v.problems[0], "1 bad CRCs")
		late := mseg(3, 1, 1482, 1482)
		late.outOfOrder = true
		v = marked(bad, mseg(2, 2), late)
		require.Len(t, v.problems, 1, "the bad CRC before the reordering")
	})
	t.Run("retransmissions left out", func(t *testing.T) {
		re := seg(3, 0, f, 1494)
		re.retransmitted = true
		v := judge(seg(2, 0, f, 1494), re, seg(4, f, f, 1494))
		require.Empty(t, v.problems)
		require.Equal(t, 2, v.judged)
		require.Contains(t, v.notes[0], "1 retransmitted segments left out")
	})
}
