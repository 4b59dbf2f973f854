//go:build netns

package wan

import (
	"context"
	"fmt"
	"maps"
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
// response). It prints the table with medians and ratios, with the CPU
// rows also split into user and system time: the kernel's part is TCP's
// own work, so what the stack adds shows in user space. tcp_bw --floor
// (tcp_floor) runs alongside: TCP plus the copy and CRC per octet that any
// MPA over a socket must make, so that the CPU rows can also be read against
// that floor, whose user time no user-space stack over sockets goes below
// (its system time is tcp_bw's, which larger writes can undercut).
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
//
// MSS_BASE, a git revision of this repository (or the path of an iwarp-perf
// binary), measures that version too, alternated with this one test by
// test (which goes first changes every round), and the table gets a base
// column: old → new in one run, against the same tcp_bw and tcp_lat.
// MSS_ARGS adds iwarp-perf flags to the RDMA tests (for example "--crc
// off", to see what the CRC costs).
func BenchmarkMSS1448(b *testing.B) {
	n := newNet(b, LinkVeth)
	bins := []string{buildPerf(b)} // now, then base if any
	if base := os.Getenv("MSS_BASE"); base != "" {
		bins = append(bins, buildPerfAt(b, base))
	}
	rounds := envInt("MSS_ROUNDS", 3)
	dur := strconv.Itoa(envInt("MSS_SECONDS", 3))
	iters := strconv.Itoa(envInt("MSS_LAT_ITERS", 20000)) // latency: a median needs iterations, not a duration
	extra := strings.Fields(os.Getenv("MSS_ARGS"))
	// tcp_floor is tcp_bw --floor: TCP plus the copy and CRC per octet
	// that MPA over a socket cannot avoid (internal/perf/tcp_floor.go),
	// with the RDMA tests' --crc.
	bwTests := []string{"tcp_bw", "tcp_floor", "write_bw", "read_bw", "send_bw"}
	floorArgs := []string{"--floor"}
	for i, a := range extra {
		switch {
		case strings.HasPrefix(a, "--crc="):
			floorArgs = append(floorArgs, a)
		case a == "--crc" && i+1 < len(extra):
			floorArgs = append(floorArgs, a, extra[i+1])
		}
	}
	latTests := []string{"tcp_lat", "write_lat", "send_lat", "read_lat"}
	// Keyed by test, or test+" base" for the base binary's.
	vals := map[string][]float64{}
	cpu := map[string][]float64{}
	rtx := map[string]int{}
	run := func(round int, test string, args ...string) {
		order := bins
		name := test
		if test == "tcp_floor" {
			name, args = "tcp_bw", append(args, floorArgs...)
		}
		if name == "tcp_bw" || name == "tcp_lat" {
			order = bins[:1] // plain TCP is the same code in either binary
		} else {
			args = append(args, extra...)
			if round%2 == 1 {
				order = slices.Clone(bins)
				slices.Reverse(order)
			}
		}
		for _, bin := range order {
			key := test
			if bin != bins[0] {
				key += " base"
			}
			cli, srv := perfOnBoth(b, n, bin, name, args...)
			if strings.HasSuffix(test, "_lat") {
				vals[key] = append(vals[key], latOf(b, cli))
				continue
			}
			vals[key] = append(vals[key], bwOf(b, cli))
			rtx[key] += retransmitsOf(cli)
			if c, s, ok := cpuSides(cli, srv); ok {
				cpu[key] = append(cpu[key], c+s)
				cpu[key+" client"] = append(cpu[key+" client"], c)
				cpu[key+" server"] = append(cpu[key+" server"], s)
			}
			if u, s, ok := cpuSplit(cli, srv); ok {
				cpu[key+" user"] = append(cpu[key+" user"], u)
				cpu[key+" sys"] = append(cpu[key+" sys"], s)
			}
		}
	}
	for range b.N {
		for r := range rounds {
			for _, test := range bwTests {
				run(r, test, "-D", dur, "-s", "65536")
			}
			for _, test := range latTests {
				run(r, test, "-n", iters, "-s", "8")
			}
		}
	}
	tcp, tcpLat := median(vals["tcp_bw"]), median(vals["tcp_lat"])
	var tab strings.Builder
	based := len(bins) > 1
	// A row: the measure, this binary's median, the base's (if any), TCP's,
	// and the ratios to TCP's, base first.
	row := func(name, unit string, prec int, now, base, tcp float64) {
		f := func(v float64) string { return strconv.FormatFloat(v, 'f', prec, 64) + " " + unit }
		switch {
		case based && base == 0: // tcp_floor: plain TCP's code, run by this binary only
			fmt.Fprintf(&tab, "%-34s %14s %14s %14s %15.2f\n", name, "", f(now), f(tcp), now/tcp)
		case based:
			fmt.Fprintf(&tab, "%-34s %14s %14s %14s %8.2f → %.2f\n", name, f(base), f(now), f(tcp), base/tcp, now/tcp)
		default:
			fmt.Fprintf(&tab, "%-34s %14s %14s %8.2f\n", name, f(now), f(tcp), now/tcp)
		}
	}
	if based {
		fmt.Fprintf(&tab, "\n%-34s %14s %14s %14s %15s\n", "measure (MSS 1448)", "base", "now", "tcp", "ratio base → now")
	} else {
		fmt.Fprintf(&tab, "\n%-34s %14s %14s %8s\n", "measure (MSS 1448)", "iwarp", "tcp", "ratio")
	}
	med := func(m map[string][]float64, key string) float64 {
		if len(m[key]) == 0 {
			return 0
		}
		return median(m[key])
	}
	for _, test := range bwTests[1:] {
		m := median(vals[test])
		b.ReportMetric(m/tcp, test+"/tcp")
		row(test+" 64 KiB", "MiB/s", 0, m, med(vals, test+" base"), tcp)
	}
	if len(cpu["tcp_bw"]) > 0 {
		tc := median(cpu["tcp_bw"])
		for _, test := range bwTests[1:] {
			if len(cpu[test]) == 0 {
				continue
			}
			c := median(cpu[test])
			b.ReportMetric(c/tc, test+"-cpu/tcp")
			row("CPU per GiB, both sides, "+test, "s", 3, c, med(cpu, test+" base"), tc)
		}
		// Against the floor: what the stack costs beyond the copy and CRC
		// per octet that any MPA over a socket must make.
		if fc := med(cpu, "tcp_floor"); fc > 0 {
			for _, test := range bwTests[2:] {
				if len(cpu[test]) > 0 {
					c := median(cpu[test])
					b.ReportMetric(c/fc, test+"-cpu/floor")
					row("CPU per GiB, "+test+" / floor's", "s", 3, c, med(cpu, test+" base"), fc)
				}
			}
		}
		// Where the difference is: the kernel's part (sys) is TCP's own
		// work, user space is what the stack adds (framing, CRC, copies).
		for _, part := range []string{" user", " sys"} {
			tp := med(cpu, "tcp_bw"+part)
			for _, test := range bwTests[1:] {
				if len(cpu[test+part]) > 0 && tp > 0 {
					row(" "+strings.TrimSpace(part)+" CPU per GiB, "+test, "s", 3, median(cpu[test+part]), med(cpu, test+" base"+part), tp)
				}
			}
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
		row(name, "µs", 2, m, med(vals, test+" base"), base)
	}
	if len(extra) > 0 {
		fmt.Fprintf(&tab, "(RDMA tests with %s)\n", strings.Join(extra, " "))
	}
	b.Log(tab.String())
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		b.Logf("%s: %v", k, vals[k])
	}
	for _, k := range slices.Sorted(maps.Keys(cpu)) {
		b.Logf("CPU s/GiB, %s: median %.3f of %.3f", k, median(cpu[k]), cpu[k])
	}
	for _, k := range slices.Sorted(maps.Keys(rtx)) {
		b.Logf("%s: %d TCP retransmits by the client in all rounds", k, rtx[k])
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
	c, s, ok := cpuSides(cli, srv)
	return c + s, ok
}

// cpuSides is cpuOf for each side: the client's and the server's CPU
// seconds per GiB.
func cpuSides(cli, srv string) (client, server float64, ok bool) {
	c, s := cpuLineRe.FindStringSubmatch(cli), cpuLineRe.FindStringSubmatch(srv)
	if c == nil || s == nil {
		return 0, 0, false
	}
	cs, _ := strconv.ParseFloat(c[1], 64)
	ss, _ := strconv.ParseFloat(s[1], 64)
	gib, _ := strconv.ParseFloat(c[2], 64)
	if gib == 0 {
		return 0, 0, false
	}
	return cs / gib, ss / gib, true
}

// cpuSplitRe is the user and system CPU per GiB at the end of the CPU line.
var cpuSplitRe = regexp.MustCompile(`CPU\s*: .*: user ([\d.]+), sys ([\d.]+) s/GiB`)

// cpuSplit returns the user and the system CPU seconds per GiB, both sides
// added; ok is false for an iwarp-perf that prints user+sys only (an older
// MSS_BASE).
func cpuSplit(cli, srv string) (user, sys float64, ok bool) {
	c, s := cpuSplitRe.FindStringSubmatch(cli), cpuSplitRe.FindStringSubmatch(srv)
	if c == nil || s == nil {
		return 0, 0, false
	}
	f := func(v string) float64 { x, _ := strconv.ParseFloat(v, 64); return x }
	return f(c[1]) + f(s[1]), f(c[2]) + f(s[2]), true
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

// buildPerfAt builds cmd/iwarp-perf as of git revision rev (or returns
// rev if it is the path of an executable) into the test's temporary
// directory: the revision's tree is exported there and built with this
// module cache.
func buildPerfAt(tb testing.TB, rev string) string {
	tb.Helper()
	if st, err := os.Stat(rev); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
		return rev
	}
	dir := tb.TempDir()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	require.NoError(tb, err, "MSS_BASE=%s: not a binary, and no git repository here", rev)
	arch := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", strings.TrimSpace(string(top)), rev, dir)
	out, err := arch.CombinedOutput()
	require.NoError(tb, err, "git archive %s:\n%s", rev, out)
	bin := filepath.Join(tb.TempDir(), "iwarp-perf-base")
	build := exec.Command("go", "build", "-o", bin, "./cmd/iwarp-perf")
	build.Dir = dir
	out, err = build.CombinedOutput()
	require.NoError(tb, err, "go build at %s:\n%s", rev, out)
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
	}, time.Minute, 10*time.Millisecond, "server listening") // a process start on a loaded machine
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
