//go:build netns

package wan

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkWANTLS measures what TLS costs where the link is the limit:
// iwarp-perf's write_bw, read_bw and send_bw of 64 KiB, each in cleartext
// and inside TLS 1.3 (--tls, the self-signed mode: the record layer costs
// what it costs with verified certificates), on TestWAN's path (25 ms each
// way, 0.01 % loss, 1 Gbit/s). Server in A, client in B, separate
// processes, each setting no socket buffers (autotuning, raised above the
// BDP as for TestFetch). Each run lasts -D WAN_TLS_SECONDS (12) and is
// measured between its first and last quarter, past slow start. Rounds
// (WAN_TLS_ROUNDS, 3) run every test in both modes, cleartext first in
// even rounds and TLS first in odd ones; WAN_TLS_TESTS picks the tests
// (space-separated). It prints the medians in Mbit/s of payload (with the
// range), the ratio of the medians TLS ÷ cleartext, and the CPU of both
// processes per GiB moved; the log has each run's iWARP, TCP and CPU lines
// of both sides.
//
//	sudo go test -tags netns -run '^$' -bench WANTLS -benchtime 1x -v -timeout 30m ./interop/wan/
func BenchmarkWANTLS(b *testing.B) {
	requireNetns(b)
	kind, err := ImpairedKind()
	require.NoError(b, err)
	n := newNet(b, kind)
	require.NoError(b, n.Impair(wanProfile))
	raiseAutotuning(b, n)
	b.Logf("%s", n.Describe())
	bin := buildPerf(b)
	rounds := envInt("WAN_TLS_ROUNDS", 3)
	dur := strconv.Itoa(envInt("WAN_TLS_SECONDS", 12))

	tests := []string{"write_bw", "read_bw", "send_bw"}
	if v := os.Getenv("WAN_TLS_TESTS"); v != "" {
		tests = strings.Fields(v)
	}
	type key struct {
		test string
		tls  bool
	}
	mbits, cpu := map[key][]float64{}, map[key][]float64{}
	for range b.N {
		for r := range rounds {
			for _, test := range tests {
				for _, tls := range []bool{r%2 == 1, r%2 == 0} {
					args := []string{"-D", dur, "-s", "65536"}
					if tls {
						args = append(args, "--tls")
					}
					cli, srv := perfOnBoth(b, n, bin, test, args...)
					if tls {
						require.Contains(b, cli, "TLS             : TLS 1.3")
						require.Contains(b, cli, "inside TLS")
					} else {
						require.NotContains(b, cli, "TLS")
					}
					k := key{test, tls}
					mbits[k] = append(mbits[k], bwOf(b, cli)*(1<<20)*8/1e6)
					if c, ok := cpuOf(cli, srv); ok {
						cpu[k] = append(cpu[k], c)
					}
					b.Logf("round %d %s tls=%v: %.0f Mbit/s\n client %s\n server %s", r, test, tls, mbits[k][len(mbits[k])-1],
						strings.Join(tcpLines(cli), "\n        "), strings.Join(tcpLines(srv), "\n        "))
				}
			}
		}
	}
	b.Logf("link: %s", n.Stats())
	var tab strings.Builder
	fmt.Fprintf(&tab, "\n| 64 KiB, %s | cleartext Mbit/s | TLS Mbit/s | TLS ÷ cleartext | CPU s/GiB, both sides, cleartext → TLS |\n|---|---|---|---|---|\n", wanProfile)
	for _, test := range tests {
		c, s := mbits[key{test, false}], mbits[key{test, true}]
		ratio := median(s) / median(c)
		b.ReportMetric(ratio, test+"-tls/clear")
		cc, cs := "?", "?"
		if v := cpu[key{test, false}]; len(v) > 0 {
			cc = fmt.Sprintf("%.2f", median(v))
		}
		if v := cpu[key{test, true}]; len(v) > 0 {
			cs = fmt.Sprintf("%.2f", median(v))
		}
		fmt.Fprintf(&tab, "| %s | %s | %s | %.2f | %s → %s |\n", test, spread(c), spread(s), ratio, cc, cs)
	}
	b.Log(tab.String())
}

// tcpLines are the lines of iwarp-perf's output that describe a QP's
// connection and its CPU: the iWARP, TCP and CPU lines after the table.
func tcpLines(out string) []string {
	var ls []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == "iWARP" || f[0] == "TCP" || f[0] == "CPU") {
			ls = append(ls, strings.TrimSpace(l))
		}
	}
	return ls
}
