package perf

import (
	"bytes"
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A run that moved next to nothing prints its CPU without a cost per GiB:
// the ratio divided by almost nothing ("0.00 GiB = 5140.539 s/GiB").
func TestCPULineWithoutData(t *testing.T) {
	require.Equal(t, " CPU       : 0.00 s user+sys for 0 octets (this process): too little moved for a cost per GiB",
		cpuLine(cpuCost{cpu: cpuUse{user: 3 * time.Millisecond, sys: time.Millisecond}}, false))
	line := cpuLine(cpuCost{cpu: cpuUse{user: 3 * time.Millisecond, sys: time.Millisecond}, bytes: 800}, true)
	require.NotContains(t, line, "s/GiB", line)
	require.Contains(t, line, "800 octets")

	// From the command line: 5 Writes of 2 octets.
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := MainContext(ctx, []string{"write_bw", "--loopback", "-n", "5", "-s", "2"}, &out, &errb)
	require.Equal(t, 0, code, "stderr: %s", errb.String())
	m := regexp.MustCompile(`(?m)^ CPU .*$`).FindString(out.String())
	require.NotEmpty(t, m, "no CPU line in:\n%s", out.String())
	require.NotContains(t, m, "s/GiB")
	require.Contains(t, m, "10 octets")

	// Enough moved: the ratio is there.
	line = cpuLine(cpuCost{cpu: cpuUse{user: time.Second}, bytes: 1 << 30}, false)
	require.Contains(t, line, "= 1.000 s/GiB")
}
