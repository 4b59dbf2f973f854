//go:build netns

package wan

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An Ethernet path: namespaces joined by a veth pair with the default MTU
// of 1500, where TCP's MSS is 1448 (20 octets of IP, 32 of TCP with
// timestamps) and the stack sizes every FPDU to fit one such segment, as it
// must for hardware iWARP peers. iwarp-perf runs in the two namespaces as
// separate processes, server in A and client in B.
//
// The test checks the set-up and that each test runs; the bandwidth ratio
// against plain TCP on the same link is BenchmarkMSS1448's (performance is
// never asserted in a test).
func TestMSS1448(t *testing.T) {
	n := newNet(t, LinkVeth)
	out, err := n.A.IP("link", "show", "wan0")
	require.NoError(t, err)
	require.Contains(t, out, "mtu 1500")
	bin := buildPerf(t)
	for _, test := range []string{"write_bw", "read_bw", "send_bw", "tcp_bw"} {
		out := perfOn(t, n, bin, test, "-n", "2000", "-s", "65536")
		t.Logf("%s:\n%s", test, out)
		if test != "tcp_bw" {
			require.Regexp(t, `mss 1448\b`, out, "the QP's TCP connection runs with the Ethernet MSS")
		}
		require.Positive(t, bwOf(t, out), "bandwidth")
	}
}

// BenchmarkMSS1448 measures write_bw, read_bw and send_bw of 64 KiB
// messages against tcp_bw on the MTU-1500 veth path, each for a few
// seconds, interleaved, and reports the medians and the ratios (iwarp-perf's
// and TCP's MiB/s in the same run, since the machine is shared).
//
//	sudo go test -tags netns -run '^$' -bench MSS1448 -benchtime 1x ./interop/wan/
func BenchmarkMSS1448(b *testing.B) {
	n := newNet(b, LinkVeth)
	bin := buildPerf(b)
	rounds := envInt("MSS_ROUNDS", 3)
	dur := strconv.Itoa(envInt("MSS_SECONDS", 3))
	tests := []string{"tcp_bw", "write_bw", "read_bw", "send_bw"}
	bw := map[string][]float64{}
	for range b.N {
		for range rounds {
			for _, test := range tests {
				bw[test] = append(bw[test], bwOf(b, perfOn(b, n, bin, test, "-D", dur, "-s", "65536")))
			}
		}
	}
	tcp := median(bw["tcp_bw"])
	b.ReportMetric(tcp, "tcp-MiB/s")
	for _, test := range tests[1:] {
		m := median(bw[test])
		b.ReportMetric(m, test+"-MiB/s")
		b.ReportMetric(m/tcp, test+"/tcp")
		b.Logf("%s: median %.0f MiB/s of %v; tcp_bw median %.0f of %v: ratio %.2f", test, m, bw[test], tcp, bw["tcp_bw"], m/tcp)
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// buildPerf builds cmd/iwarp-perf into the test's temporary directory.
func buildPerf(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "iwarp-perf")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/goiwarp/iwarp/cmd/iwarp-perf").CombinedOutput()
	require.NoError(tb, err, "go build:\n%s", out)
	return bin
}

// perfOn runs an iwarp-perf server in n.A and its client in n.B and returns
// the client's output.
func perfOn(tb testing.TB, n *Net, bin, test string, args ...string) string {
	tb.Helper()
	const port = "18515"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.A.Name, bin, test, "-p", port}, args...)...)
	var srvOut strings.Builder
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	require.NoError(tb, srv.Start())
	defer srv.Wait()
	require.Eventually(tb, func() bool {
		out, _ := n.A.Exec("ss", "-Htln", "sport = :"+port)
		return strings.Contains(out, port)
	}, 10*time.Second, 10*time.Millisecond, "server listening")
	cli := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.B.Name, bin, test, "-p", port}, append(args, n.AddrA)...)...)
	out, err := cli.CombinedOutput()
	if err != nil {
		srv.Process.Kill()
	}
	require.NoError(tb, err, "client %s %v:\n%s\nserver:\n%s", test, args, out, &srvOut)
	require.NoError(tb, srv.Wait(), "server %s:\n%s", test, &srvOut)
	return string(out)
}

// bwRow is a row of the bandwidth table: #bytes #iterations peak average
// message-rate.
var bwRow = regexp.MustCompile(`(?m)^\s*\d+\s+\d+\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s*$`)

// bwOf returns the average bandwidth (MiB/s) of the table in out.
func bwOf(tb testing.TB, out string) float64 {
	tb.Helper()
	m := bwRow.FindStringSubmatch(out)
	require.NotNil(tb, m, "no bandwidth row in:\n%s", out)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(tb, err)
	return v
}
