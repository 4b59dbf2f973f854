package perftest

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func unhex(t *testing.T, s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	require.NoError(t, err)
	return b
}

// Bytes from a siw↔siw ib_write_bw -R capture (perftest 6.06).
func TestCapturedMessages(t *testing.T) {
	require.Equal(t, unhex(t, "362e3036 00000000 00000000 00000000"), Version(OurVersion))
	v, err := ParseVersion(unhex(t, "362e3036 00000000 00000000 00000000"))
	require.NoError(t, err)
	require.Equal(t, "6.06", v)
	require.Equal(t, unhex(t, "00001000"), Int(PageSize))
	require.Equal(t, unhex(t, "00000040"), Int(CacheLine))
	require.Equal(t, unhex(t, "3300"), MTU(MTUEnum1024))

	x7 := unhex(t, "00000000 00000001 00000003 0094074d 86cf0900 287f0000 0000557b00f5f000 52540012345600000000000000000000 00000000 00000000")
	d, err := ParseDest(x7)
	require.NoError(t, err)
	require.Equal(t, uint32(0x86cf0900), d.RKey)
	require.Equal(t, uint64(0x557b00f5f000), d.VAddr)
	require.Equal(t, uint32(3), d.QPN)
	require.Equal(t, uint32(1), d.OutReads)
	// Re-encoding zeroes the C struct's padding, as a Go peer should.
	re := d.Marshal(DestLen)
	copy(re[20:24], x7[20:24])
	require.Equal(t, x7, re)

	d629 := d
	d629.TailVAddr = 0x1122334455667788
	got, err := ParseDest(d629.Marshal(DestLen629))
	require.NoError(t, err)
	require.Equal(t, d629, got)
}

func TestReport(t *testing.T) {
	// The captured report: 4096 B, 5 iterations, 19.69 peak, 2.43 avg, 0.000623 Mpps.
	m := [5][]byte{unhex(t, "0000000000001000"), unhex(t, "0000000000000005"),
		unhex(t, "4033b152a7fc2164"), unhex(t, "40037473a977688e"), unhex(t, "3f446661d9ebd133")}
	r, err := ParseReport(m)
	require.NoError(t, err)
	require.Equal(t, uint64(4096), r.Size)
	require.Equal(t, uint64(5), r.Iters)
	require.InDelta(t, 19.69, r.BWPeak, 0.01)
	require.InDelta(t, 2.43, r.BWAvg, 0.01)
	require.InDelta(t, 0.000623, r.MsgRate, 0.000001)
	require.Equal(t, m, r.Messages())
}

func TestVersionCheck(t *testing.T) {
	for s, ok := range map[string]bool{"6.06": true, "5.70": true, "6.29": true, "5.6": false, "iwarp-perf 1.0": false, "": false} {
		_, err := ParseVersion(Version(s))
		require.Equal(t, ok, err == nil, s)
	}
	_, err := ParseDest(make([]byte, 57))
	require.Error(t, err)
}
