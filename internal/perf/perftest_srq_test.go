package perf

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// send_bw with perftest's exchange and --use-srq against a receiver whose
// SRQ is perftest's size (rx-depth receives for all QPs) and slow to post
// them again: the sender keeps the sum over its QPs below rx-depth, so no
// Send finds the SRQ empty. (perftest's own client bounds each QP alone;
// siw ended such a connection in the interop suite, 308 of 600 Sends in.)
func TestPerftestSRQSharedCredits(t *testing.T) {
	testPerftestSRQ = true
	testRepostHook = func() { time.Sleep(200 * time.Microsecond) }
	defer func() { testPerftestSRQ, testRepostHook = false, nil }()
	// rx-depth 62 over 3 QPs: perftest's SRQ holds 60 receives, not 62.
	for _, c := range []struct{ q, rx int }{{2, 60}, {3, 60}, {3, 62}} {
		q := c.q
		t.Run(fmt.Sprintf("q%d-r%d", c.q, c.rx), func(t *testing.T) {
			args := []string{"send_bw", "-R", "--use-srq", "-q", strconv.Itoa(q), "-n", "600", "-r", strconv.Itoa(c.rx), "-s", "64", "--fpdu-delay", "0"}
			_, _, sout, cout := ptRun(t, args, args, false)
			crow := table(t, cout)
			require.Len(t, crow, 1)
			require.Equal(t, float64(600*q), crow[0][1], "the client's Sends, over all QPs")
			srow := table(t, sout)
			require.Len(t, srow, 1)
			require.Positive(t, srow[0][3], "the server's average")
		})
	}
}

// With four QPs perftest's credits can stall a shared receive queue:
// refused, with the bound named.
func TestPerftestSRQTooManyQPs(t *testing.T) {
	_, _, err := Parse([]string{"send_bw", "-R", "--use-srq", "-q", "4", "-n", "600", "-r", "300"})
	require.ErrorContains(t, err, "4 QPs could stall")
	require.ErrorContains(t, err, "at most 3 QPs")
	_, _, err = Parse([]string{"send_bw", "-R", "--use-srq", "-q", "3", "-n", "600", "-r", "300"})
	require.NoError(t, err)
	_, _, err = Parse([]string{"send_bw", "--use-srq", "-q", "8"})
	require.NoError(t, err, "iwarp-perf's own credits give each QP its own receives")
}
