package perf

import (
	"bytes"
	"context"
	"regexp"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// With -D the report counts only the octets moved in the sample window (a
// quarter of -D in from each end), so the CPU line must count only the CPU
// spent in it: over -D 4 that window is 2 s, and no process spends more than
// 2 s of CPU per processor in 2 s. Counting the whole run (what the line did
// before) comes to 1.4 of the 2 processors here for 4 s: over the bound.
func TestCPULineCountsTheSampleWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 4 s bandwidth test")
	}
	for _, test := range []string{"write_bw", "tcp_bw"} {
		t.Run(test, func(t *testing.T) {
			var out, errb bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			code := MainContext(ctx, []string{test, "--loopback", "-D", "4"}, &out, &errb)
			require.Equal(t, 0, code, "stderr: %s", errb.String())
			m := regexp.MustCompile(`CPU\s*: ([\d.]+) s user\+sys for ([\d.]+) GiB = ([\d.]+) s/GiB .*: user ([\d.]+), sys ([\d.]+) s/GiB`).FindStringSubmatch(out.String())
			require.NotNil(t, m, "no CPU line in:\n%s", out.String())
			f := func(i int) float64 { v, err := strconv.ParseFloat(m[i], 64); require.NoError(t, err); return v }
			cpu, gib, per, user, sys := f(1), f(2), f(3), f(4), f(5)
			bound := 2 * float64(runtime.GOMAXPROCS(0)) * 1.15 // the 2 s window, with slack for timers that fire late
			require.Positive(t, cpu)
			require.LessOrEqual(t, cpu, bound, "CPU seconds of the 2 s sample window")
			// The line prints CPU and GiB to 0.01 each: their quotient is
			// s/GiB within 0.005 (1+s/GiB) / GiB, which is large where
			// a loaded machine moved little (0.07 GiB: 0.2).
			require.Greater(t, gib, 0.005, "enough moved to check the quotient")
			require.InDelta(t, cpu/gib, per, 0.001+0.005*(1+per)/(gib-0.005), "s/GiB is the CPU over the GiB")
			require.InDelta(t, per, user+sys, 0.0025, "user and sys add up")

			// The GiB are the table's: iterations × size.
			row := regexp.MustCompile(`(?m)^\s*65536\s+(\d+)\s`).FindStringSubmatch(out.String())
			require.NotNil(t, row)
			iters, _ := strconv.ParseFloat(row[1], 64)
			require.InDelta(t, iters*65536/(1<<30), gib, 0.006)
		})
	}
}
