//go:build netns

package wan

import (
	"context"
	"fmt"
	"os"
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

// BenchmarkMSS1448 measures every iwarp-perf test that the performance
// table of BENCHMARKS.md names on the MTU-1500 veth path, against plain
// TCP on the same link in the same run, interleaved: write_bw, read_bw and
// send_bw of 64 KiB against tcp_bw, with the CPU each costs both sides
// (user+sys per GiB, the CPU lines of server and client added); and
// write_lat, send_lat and read_lat of 8 octets against tcp_lat (read_lat
// against two of tcp_lat's round trips, since a Read is a request and a
// response). It prints the table with medians and ratios.
//
//	sudo go test -tags netns -run '^$' -bench MSS1448 -benchtime 1x ./interop/wan/
//
// MSS_ROUNDS (3), MSS_SECONDS (3) and MSS_LAT_ITERS (20000) set the rounds,
// each bandwidth test's duration and each latency test's iterations.
// MSS_CPUS, a taskset list such as 0, pins both processes to those CPUs.
// Pinned to one CPU the veth keeps TCP's segments in order: unpinned, the
// sender's segments go out both from its own CPU and, clocked by ACKs, from
// the softirq of the receiver's, and the two CPUs' backlogs deliver them out
// of order. On some VMs that costs tcp_bw tens of thousands of spurious fast
// retransmits a second, which make every ratio against it look better than
// the protocols are (the log shows each test's retransmits). One CPU also
// makes a bandwidth ratio the inverse of the CPU each costs per octet.
func BenchmarkMSS1448(b *testing.B) {
	n := newNet(b, LinkVeth)
	bin := buildPerf(b)
	rounds := envInt("MSS_ROUNDS", 3)
	dur := strconv.Itoa(envInt("MSS_SECONDS", 3))
	iters := strconv.Itoa(envInt("MSS_LAT_ITERS", 20000)) // latency: a median needs iterations, not a duration
	bwTests := []string{"tcp_bw", "write_bw", "read_bw", "send_bw"}
	latTests := []string{"tcp_lat", "write_lat", "send_lat", "read_lat"}
	vals := map[string][]float64{}
	cpu := map[string][]float64{}
	rtx := map[string]int{}
	for range b.N {
		for range rounds {
			for _, test := range bwTests {
				cli, srv := perfOnBoth(b, n, bin, test, "-D", dur, "-s", "65536")
				vals[test] = append(vals[test], bwOf(b, cli))
				rtx[test] += retransmitsOf(cli)
				if c, ok := cpuOf(cli, srv); ok {
					cpu[test] = append(cpu[test], c)
				}
			}
			for _, test := range latTests {
				cli, _ := perfOnBoth(b, n, bin, test, "-n", iters, "-s", "8")
				vals[test] = append(vals[test], latOf(b, cli))
			}
		}
	}
	tcp, tcpLat := median(vals["tcp_bw"]), median(vals["tcp_lat"])
	var tab strings.Builder
	fmt.Fprintf(&tab, "\n%-34s %12s %12s %8s\n", "measure (MSS 1448)", "iwarp", "tcp", "ratio")
	for _, test := range bwTests[1:] {
		m := median(vals[test])
		b.ReportMetric(m/tcp, test+"/tcp")
		fmt.Fprintf(&tab, "%-34s %9.0f MiB/s %9.0f MiB/s %8.2f\n", test+" 64 KiB", m, tcp, m/tcp)
	}
	if len(cpu["tcp_bw"]) > 0 {
		tc := median(cpu["tcp_bw"])
		for _, test := range bwTests[1:] {
			if len(cpu[test]) == 0 {
				continue
			}
			c := median(cpu[test])
			b.ReportMetric(c/tc, test+"-cpu/tcp")
			fmt.Fprintf(&tab, "%-34s %10.3f s %10.3f s %8.2f\n", "CPU per GiB, both sides, "+test, c, tc, c/tc)
		}
	}
	for _, test := range latTests[1:] {
		m := median(vals[test])
		base := tcpLat
		name := test + " 8 B / tcp_lat"
		if test == "read_lat" {
			base, name = 2*tcpLat, "read_lat 8 B / (2 × tcp_lat)"
		}
		b.ReportMetric(m/base, test+"/tcp")
		fmt.Fprintf(&tab, "%-34s %10.2f µs %10.2f µs %8.2f\n", name, m, base, m/base)
	}
	b.Log(tab.String())
	for k, v := range vals {
		b.Logf("%s: %v", k, v)
	}
	for _, test := range bwTests {
		b.Logf("%s: %d TCP retransmits by the client in all rounds", test, rtx[test])
	}
}

// retransmitsOf adds the TCP retransmits of every connection the TCP lines of
// iwarp-perf's output show.
func retransmitsOf(out string) int {
	n := 0
	for _, m := range retransmitsRe.FindAllStringSubmatch(out, -1) {
		k, _ := strconv.Atoi(m[1])
		n += k
	}
	return n
}

var retransmitsRe = regexp.MustCompile(`retransmits (\d+)`)

// latRow is a row of the latency table: #bytes #iterations t_min t_max
// t_typical ...; latOf returns t_typical (µs), perftest's median.
var latRow = regexp.MustCompile(`(?m)^\s*\d+\s+\d+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s`)

func latOf(tb testing.TB, out string) float64 {
	tb.Helper()
	m := latRow.FindStringSubmatch(out)
	require.NotNil(tb, m, "no latency row in:\n%s", out)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(tb, err)
	return v
}

// cpuLineRe is iwarp-perf's CPU line: seconds and GiB of one process.
var cpuLineRe = regexp.MustCompile(`CPU\s*: ([\d.]+) s user\+sys for ([\d.]+) GiB`)

// cpuOf adds the CPU of both processes and divides by the GiB moved (the
// client's count): CPU seconds per GiB, both sides.
func cpuOf(cli, srv string) (float64, bool) {
	c, s := cpuLineRe.FindStringSubmatch(cli), cpuLineRe.FindStringSubmatch(srv)
	if c == nil || s == nil {
		return 0, false
	}
	cs, _ := strconv.ParseFloat(c[1], 64)
	ss, _ := strconv.ParseFloat(s[1], 64)
	gib, _ := strconv.ParseFloat(c[2], 64)
	if gib == 0 {
		return 0, false
	}
	return (cs + ss) / gib, true
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
	out, _ := perfOnBoth(tb, n, bin, test, args...)
	return out
}

// perfOnBoth is perfOn returning the server's output too.
func perfOnBoth(tb testing.TB, n *Net, bin, test string, args ...string) (client, server string) {
	tb.Helper()
	const port = "18515"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pin := []string{}
	if cpus := os.Getenv("MSS_CPUS"); cpus != "" {
		pin = []string{"taskset", "-c", cpus}
	}
	inNS := func(ns string, cmd ...string) []string {
		return append(append([]string{"netns", "exec", ns}, pin...), cmd...)
	}
	srv := exec.CommandContext(ctx, "ip", inNS(n.A.Name, append([]string{bin, test, "-p", port}, args...)...)...)
	var srvOut strings.Builder
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	require.NoError(tb, srv.Start())
	defer srv.Wait()
	require.Eventually(tb, func() bool {
		out, _ := n.A.Exec("ss", "-Htln", "sport = :"+port)
		return strings.Contains(out, port)
	}, 10*time.Second, 10*time.Millisecond, "server listening")
	cli := exec.CommandContext(ctx, "ip", inNS(n.B.Name, append(append([]string{bin, test, "-p", port}, args...), n.AddrA)...)...)
	out, err := cli.CombinedOutput()
	if err != nil {
		srv.Process.Kill()
	}
	require.NoError(tb, err, "client %s %v:\n%s\nserver:\n%s", test, args, out, &srvOut)
	require.NoError(tb, srv.Wait(), "server %s:\n%s", test, &srvOut)
	return string(out), srvOut.String()
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
