package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/require"

	"github.com/goiwarp/iwarp/internal/perf"
)

// run runs the CLI in-process and returns its exit status and output.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := perf.MainContext(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

// table returns the rows after the table header (the line starting with
// " #bytes"), each split into fields, up to the closing dashed line.
func table(t *testing.T, out string) [][]float64 {
	t.Helper()
	lines := strings.Split(out, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, " #bytes") {
			start = i + 1
			break
		}
	}
	require.GreaterOrEqual(t, start, 0, "no table header in:\n%s", out)
	var rows [][]float64
	for _, l := range lines[start:] {
		if strings.HasPrefix(l, "---") || l == "" {
			break
		}
		var row []float64
		for _, f := range strings.Fields(l) {
			v, err := strconv.ParseFloat(f, 64)
			require.NoError(t, err, "row %q", l)
			row = append(row, v)
		}
		rows = append(rows, row)
	}
	require.NotEmpty(t, rows, "no rows in:\n%s", out)
	return rows
}

// checkRow checks a table row: the size, and every number positive (the BW
// peak is 0 in duration mode, as in perftest). Bandwidth is printed with
// two decimals: a run of a few tiny messages that the scheduler stalls for
// milliseconds prints 0.00 MiB/s, so that is positive only for runs of at
// least 64 KiB.
func checkRow(t *testing.T, row []float64, size int, lat, dur bool) {
	t.Helper()
	want := 5
	switch {
	case lat && dur:
		want = 4
	case lat:
		want = 9
	}
	require.Len(t, row, want, "row %v", row)
	require.Equal(t, float64(size), row[0], "size")
	for i, v := range row {
		if !lat && dur && i == 2 {
			require.Zero(t, v, "BW peak in duration mode")
			continue
		}
		if lat && !dur && i == 6 {
			require.GreaterOrEqual(t, v, 0.0, "t_stdev of %v", row) // 0.00 for a few equal samples
			continue
		}
		if !lat && (i == 2 || i == 3) && row[0]*row[1] < 64<<10 {
			require.GreaterOrEqual(t, v, 0.0, "column %d of %v", i, row)
			continue
		}
		require.Greater(t, v, 0.0, "column %d of %v", i, row)
	}
}

// leakCheck fails the test if it leaves goroutines behind.
func leakCheck(t *testing.T) {
	t.Cleanup(test.CheckRoutines(t))
}

func TestTests(t *testing.T) {
	leakCheck(t)
	cases := []struct {
		name string
		args []string
		size int
		rows int
	}{
		{"write_bw", []string{"write_bw", "-n", "20", "-s", "4096"}, 4096, 1},
		{"read_bw", []string{"read_bw", "-n", "20", "-s", "4096"}, 4096, 1},
		{"send_bw", []string{"send_bw", "-n", "50", "-s", "4096", "-r", "8"}, 4096, 1},
		{"write_lat", []string{"write_lat", "-n", "20"}, 2, 1},
		{"read_lat", []string{"read_lat", "-n", "20", "-s", "100"}, 100, 1},
		{"send_lat", []string{"send_lat", "-n", "20", "-s", "300"}, 300, 1}, // above the inline size
		{"tcp_bw", []string{"tcp_bw", "-n", "20", "-s", "4096"}, 4096, 1},
		{"tcp_lat", []string{"tcp_lat", "-n", "20"}, 2, 1},
		{"write_bw/big", []string{"write_bw", "-n", "5", "-s", "3000000", "-t", "2"}, 3000000, 1},
		{"write_bw/bidir", []string{"write_bw", "-n", "20", "-s", "4096", "-b"}, 4096, 1},
		{"send_bw/bidir", []string{"send_bw", "-n", "100", "-s", "1000", "-b", "-r", "6", "-Q", "3"}, 1000, 1},
		{"send_bw/qps", []string{"send_bw", "-n", "30", "-s", "1024", "-q", "3", "-r", "4"}, 1024, 1},
		{"read_bw/qps", []string{"read_bw", "-n", "30", "-s", "10000", "-q", "2", "-o", "2"}, 10000, 1},
		{"tcp_bw/bidir", []string{"tcp_bw", "-n", "20", "-s", "4096", "-b", "-q", "2"}, 4096, 1},
		{"write_lat/iwarp-options", []string{"write_lat", "-n", "20", "-s", "5000", "--mpa-rev", "1", "--crc", "off",
			"--markers", "both", "--fpdu", "1000"}, 5000, 1},
		{"send_bw/p2p", []string{"send_bw", "-n", "20", "--p2p", "send", "--markers", "tx", "-s", "2000"}, 2000, 1},
		{"read_lat/p2p", []string{"read_lat", "-n", "20", "--p2p", "read", "--crc", "required"}, 2, 1},
		{"write_bw/p2p", []string{"write_bw", "-n", "400", "--p2p", "write", "-s", "200", "-I", "256"}, 200, 1},
		// RFC 7306 atomics: 8 octets; the client checks the target word
		// afterwards (and fails the run if the atomics did not happen).
		{"atomic_bw", []string{"atomic_bw", "-n", "200"}, 8, 1},
		{"atomic_bw/cas/qps", []string{"atomic_bw", "-n", "100", "-A", "CMP_AND_SWAP", "-q", "3", "-o", "4"}, 8, 1},
		{"atomic_lat", []string{"atomic_lat", "-n", "50"}, 8, 1},
		{"atomic_lat/cas", []string{"atomic_lat", "-n", "50", "--atomic_type=CMP_AND_SWAP"}, 8, 1},
		// The latency tests polling from their own goroutine, as perftest
		// (the default steps in the QP's receive handler).
		{"write_lat/poll", []string{"write_lat", "-n", "300", "--lat-wait", "poll"}, 2, 1},
		{"read_lat/poll", []string{"read_lat", "-n", "20", "-s", "100", "--lat-wait=poll"}, 100, 1},
		{"send_lat/poll", []string{"send_lat", "-n", "20", "-s", "300", "--lat-wait=poll"}, 300, 1},
		{"atomic_lat/poll", []string{"atomic_lat", "-n", "50", "--lat-wait=poll"}, 8, 1},
		{"write_lat/multi-fpdu", []string{"write_lat", "-n", "300", "-s", "70000"}, 70000, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := run(t, append(c.args, "--loopback")...)
			require.Equal(t, 0, code, "stderr: %s\nstdout: %s", errs, out)
			require.Contains(t, out, "Transport type : ")
			rows := table(t, out)
			require.Len(t, rows, c.rows)
			lat := strings.HasSuffix(c.args[0], "_lat")
			checkRow(t, rows[0], c.size, lat, false)
		})
	}
}

func TestAllSizes(t *testing.T) {
	leakCheck(t)
	for _, tc := range []string{"send_bw", "write_lat"} {
		t.Run(tc, func(t *testing.T) {
			code, out, errs := run(t, tc, "-a", "-n", "5", "--loopback")
			require.Equal(t, 0, code, "stderr: %s", errs)
			rows := table(t, out)
			require.Len(t, rows, 23)
			for i, r := range rows {
				checkRow(t, r, 2<<i, strings.HasSuffix(tc, "_lat"), false)
			}
		})
	}
}

func TestDuration(t *testing.T) {
	leakCheck(t)
	for _, tc := range [][]string{{"write_bw"}, {"send_lat"}, {"write_lat", "--lat-wait=poll"}} {
		t.Run(strings.Join(tc, " "), func(t *testing.T) {
			code, out, errs := run(t, append(tc, "-D", "1", "--loopback")...)
			require.Equal(t, 0, code, "stderr: %s", errs)
			rows := table(t, out)
			lat := strings.HasSuffix(tc[0], "_lat")
			checkRow(t, rows[0], map[bool]int{false: 65536, true: 2}[lat], lat, true)
		})
	}
}

func TestOutput(t *testing.T) {
	leakCheck(t)
	for _, c := range [][]string{
		{"write_bw", "-n", "20", "-s", "1024", "--output=bandwidth"},
		{"send_bw", "-n", "20", "-s", "1024", "--output=message_rate", "--report_gbits"},
		{"read_lat", "-n", "20", "--output=latency"},
		{"tcp_lat", "-n", "20", "--output", "latency"},
		{"atomic_bw", "-n", "50", "--output=message_rate"},
		{"atomic_lat", "-n", "20", "--output=latency"},
	} {
		t.Run(c[0]+"/"+c[len(c)-1], func(t *testing.T) {
			code, out, errs := run(t, append(c, "--loopback")...)
			require.Equal(t, 0, code, "stderr: %s", errs)
			require.True(t, strings.HasSuffix(out, "\n"), "%q", out)
			fields := strings.Fields(out)
			require.Len(t, fields, 1, "stdout must be one number: %q", out)
			v, err := strconv.ParseFloat(fields[0], 64)
			require.NoError(t, err)
			require.Greater(t, v, 0.0)
		})
	}
}

func TestJSON(t *testing.T) {
	leakCheck(t)
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		keys []string
	}{
		{[]string{"write_bw", "-n", "20", "-s", "2048"}, []string{"MsgSize", "n_iterations", "BW_peak", "BW_average", "MsgRate"}},
		{[]string{"send_lat", "-n", "20"}, []string{"MsgSize", "n_iterations", "t_min", "t_max", "t_typical", "t_avg",
			"t_stdev", "percentile_99", "percentile_99.9"}},
		{[]string{"write_lat", "-D", "1"}, []string{"MsgSize", "n_iterations", "t_avg", "tps_average"}},
	} {
		t.Run(c.args[0], func(t *testing.T) {
			file := filepath.Join(dir, c.args[0]+".json")
			code, _, errs := run(t, append(c.args, "--loopback", "--out_json", "--out_json_file="+file)...)
			require.Equal(t, 0, code, "stderr: %s", errs)
			b, err := os.ReadFile(file)
			require.NoError(t, err)
			var doc struct {
				TestInfo map[string]any `json:"test_info"`
				Results  map[string]any `json:"results"`
			}
			require.NoError(t, json.Unmarshal(b, &doc), "%s", b)
			require.Equal(t, "IW", doc.TestInfo["Transport_type"])
			for _, k := range c.keys {
				require.Contains(t, doc.Results, k)
				require.IsType(t, 0.0, doc.Results[k], k)
			}
			require.Len(t, doc.Results, len(c.keys))
			require.Greater(t, doc.Results["n_iterations"], 0.0)
		})
	}
}

func TestBadFlags(t *testing.T) {
	leakCheck(t)
	for _, args := range [][]string{
		{"--bogus"},
		{"write_bw", "-s"},
		{"write_bw", "-s", "lots"},
		{"write_bw", "-s", "0"},
		{"write_bw", "-s", "9000000"},
		{"frobnicate_bw"},
		{"write_bw", "-n", "2"},
		{"write_bw", "-n", "10", "-D", "2"},
		{"write_bw", "-a", "-D", "2"},
		{"write_lat", "-q", "2"},
		{"write_lat", "--output=bandwidth"},
		{"write_bw", "--output=latency"},
		{"write_bw", "--output=loud"},
		{"write_bw", "--crc=maybe"},
		{"write_bw", "--markers=some"},
		{"write_bw", "--p2p=atomic"},
		{"write_lat", "--lat-wait=spin"},
		{"write_bw", "--mpa-rev=3"},
		{"write_bw", "--profile=heap"},
		{"write_bw", "-I", "1000"},
		{"write_bw", "host1", "host2"},
		{"write_bw", "--loopback", "host1"},
		{"atomic_bw", "-A", "SWAP"},
		{"atomic_bw", "-s", "16"},
		{"atomic_lat", "-a"},
		{"write_bw", "-A", "CMP_AND_SWAP"},
		{"atomic_bw", "-R", "host1"},
		{"write_bw", "--exchange-timeout=0"},
		{"write_bw", "--exchange-timeout=soon"},
		{"write_bw", "--max-region=lots"},
		{"write_bw", "--max-region=0"},
		{"write_bw", "--runs=-1"},
		{"write_bw", "-q", "1024", "-s", "1048576"},         // 2 GiB of regions, above the default --max-region
		{"write_bw", "-a", "-q", "2", "--max-region=16MiB"}, // 32 MiB
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errs := run(t, args...)
			require.Equal(t, 2, code, "stdout: %s\nstderr: %s", out, errs)
			require.Empty(t, out)
			require.Contains(t, errs, "iwarp-perf: ")
		})
	}
	code, out, _ := run(t, "-h")
	require.Equal(t, 0, code)
	require.Contains(t, out, "Usage: iwarp-perf")
}

// freePort returns a TCP port that was free a moment ago.
func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// waitListening waits until something listens on port: up to 10 s, for
// a server goroutine that a loaded machine may not run for a while.
func waitListening(t *testing.T, port string) {
	for i := 0; i < 1000; i++ {
		c, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("server did not listen")
}

// TestServerClient runs the two sides as two invocations, as two hosts
// would.
func TestServerClient(t *testing.T) {
	leakCheck(t)
	for _, tc := range []string{"write_bw", "read_bw", "tcp_bw", "atomic_bw"} {
		t.Run(tc, func(t *testing.T) {
			size := "8192"
			if tc == "atomic_bw" {
				size = "8"
			}
			port := freePort(t)
			type result struct {
				code     int
				out, err string
			}
			done := make(chan result)
			go func() {
				code, out, errs := run(t, tc, "-p", port, "-n", "20", "-s", size)
				done <- result{code, out, errs}
			}()
			waitListening(t, port)
			code, out, errs := run(t, tc, "-n", "20", "-s", size, "-p", port, "127.0.0.1")
			require.Equal(t, 0, code, "client stderr: %s", errs)
			s := <-done
			require.Equal(t, 0, s.code, "server stderr: %s", s.err)
			require.Contains(t, s.out, "Waiting for client to connect")
			// The server shows the client's measurement.
			require.Equal(t, table(t, out), table(t, s.out))
			// and its own counters of the FPDUs that moved, though the
			// receiver of Writes and the responder to Reads do their
			// work after their own test loop has returned.
			if tc == "write_bw" || tc == "read_bw" {
				m := regexp.MustCompile(`iWARP qp 0: FPDUs sent (\d+) received (\d+)`).FindStringSubmatch(s.out)
				require.NotNil(t, m, "server output: %s", s.out)
				n := m[2] // the Writes received
				if tc == "read_bw" {
					n = m[1] // the Read Responses sent
				}
				got, _ := strconv.Atoi(n)
				require.GreaterOrEqual(t, got, 20, "server's %s", m[0])
			}
		})
	}
	// A client with other parameters is refused with the differences; the
	// server logs it and serves the next client.
	for _, tc := range []string{"write_bw", "tcp_bw"} {
		t.Run("mismatch/"+tc, func(t *testing.T) {
			port := freePort(t)
			type result struct {
				code      int
				out, errs string
			}
			done := make(chan result, 1)
			go func() {
				code, out, errs := run(t, tc, "-p", port, "-s", "4096", "-n", "20")
				done <- result{code, out, errs}
			}()
			waitListening(t, port)
			code, _, errs := run(t, tc, "-p", port, "-s", "8192", "-n", "20", "127.0.0.1")
			require.Equal(t, 1, code)
			require.Contains(t, errs, "size (-s) mismatch")
			code, _, errs = run(t, tc, "-p", port, "-s", "4096", "-n", "20", "127.0.0.1")
			require.Equal(t, 0, code, "the next client: %s", errs)
			s := <-done
			require.Equal(t, 0, s.code, "server stderr: %s", s.errs)
			require.Contains(t, s.errs, "size (-s) mismatch")
			require.Contains(t, s.errs, "dropped, waiting for the next client")
			require.Contains(t, s.out, "One client at a time")
			require.Len(t, table(t, s.out), 1)
		})
	}
}

func TestDemo(t *testing.T) {
	leakCheck(t)
	code, out, errs := run(t, "-D", "1", "-s", "16384")
	require.Equal(t, 0, code, "stderr: %s", errs)
	require.Contains(t, out, "RDMA_Write BW Test")
	checkRow(t, table(t, out)[0], 16384, false, true)
	require.Regexp(t, `(?m)^RDMA Write 16 KiB: [0-9.]+ MiB/s = [0-9.]+ × raw TCP \([0-9.]+ MiB/s\)$`, out)
}

// --run_infinitely between a server and a client over TCP: the client
// prints a row every -D seconds until it is interrupted, then its CPU line,
// and exits 0; the server ends with it, as the peer ended the run, and with
// -b prints rows of its own too.
func TestRunInfinitely(t *testing.T) {
	leakCheck(t)
	for _, tc := range [][]string{{"write_bw"}, {"send_bw", "-s", "4096"}, {"read_bw", "-b"}} {
		t.Run(strings.Join(tc, " "), func(t *testing.T) {
			port := freePort(t)
			args := append([]string{"--run_infinitely", "-D", "1", "-p", port}, tc...)
			type result struct {
				code     int
				out, err string
			}
			done := make(chan result, 1)
			go func() {
				code, out, errs := run(t, args...)
				done <- result{code, out, errs}
			}()
			waitListening(t, port)
			ctx, interrupt := context.WithTimeout(context.Background(), 3500*time.Millisecond)
			defer interrupt()
			var out, errb bytes.Buffer
			code := perf.MainContext(ctx, append(args, "127.0.0.1"), &out, &errb)
			require.Equal(t, 0, code, "an interrupt ends the run: %s", errb.String())
			rows := table(t, out.String())
			require.GreaterOrEqual(t, len(rows), 2, "a row a second:\n%s", out.String())
			moved := 0
			for _, r := range rows {
				if len(r) == 5 && r[1] == 0 {
					// A period in which nothing completed shows as a row of
					// zeros, by design: the machine stalled the run (CI's
					// race-detected packages side by side did, for a second).
					require.Equal(t, []float64{rows[0][0], 0, 0, 0, 0}, r, "an idle period's row")
					continue
				}
				checkRow(t, r, int(rows[0][0]), false, true)
				moved++
			}
			require.Positive(t, moved, "rows of periods that moved data:\n%s", out.String())
			require.Contains(t, out.String(), " CPU       : ")
			var s result
			select {
			case s = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the server outlived the client's run")
			}
			require.Equal(t, 0, s.code, "server stderr: %s", s.err)
			require.Contains(t, s.out, "The peer ended the run")
			if slices.Contains(tc, "-b") {
				require.GreaterOrEqual(t, len(table(t, s.out)), 2, "the server's own rows:\n%s", s.out)
			}
		})
	}
}

// perftest's verifier limits, for scripts: -w and -y fail the run (exit 1,
// perftest's error line) unless a row's average reaches them.
func TestLimits(t *testing.T) {
	leakCheck(t)
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"-w", "1"}, 0, ""},
		{[]string{"--limit_bw=1e9"}, 1, "Error: BW result is below bw limit"},
		{[]string{"--report_gbits", "-w", "1e6"}, 1, "Error: BW result is below bw limit"},
		{[]string{"-y", "1e-9"}, 0, ""},
		{[]string{"--limit_msgrate", "1e6"}, 1, "Error: Msg rate  is below msg_rate limit"},
	} {
		args := append([]string{"write_bw", "--loopback", "-s", "4096", "-n", "500"}, c.args...)
		code, out, errs := run(t, args...)
		require.Equal(t, c.code, code, "%v: %s", c.args, errs)
		if c.msg != "" {
			require.Contains(t, errs, c.msg)
		}
		table(t, out) // the table is printed either way
	}
	code, _, errs := run(t, "write_lat", "--loopback", "-w", "5")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "in bandwidth tests")
}

// --report-both, with -b: after the table of both directions, perftest's
// "Local results" and "Remote results" tables, one row a size each, whose
// averages add up to the first table's; without -b, nothing more.
func TestReportBoth(t *testing.T) {
	leakCheck(t)
	for _, test := range []string{"write_bw", "read_bw", "send_bw"} {
		t.Run(test, func(t *testing.T) {
			code, out, errs := run(t, test, "-b", "--report-both", "-n", "200", "-s", "4096", "--loopback")
			require.Equal(t, 0, code, "stderr: %s", errs)
			both := table(t, out)
			li := strings.Index(out, "\n Local results: \n")
			ri := strings.Index(out, "\n Remote results: \n")
			require.Positive(t, li, "%s", out)
			require.Greater(t, ri, li, "%s", out)
			local, remote := table(t, out[li:]), table(t, out[ri:])
			require.Len(t, local, 1)
			require.Len(t, remote, 1)
			require.Equal(t, both[0][0], local[0][0], "size")
			require.InDelta(t, both[0][3], local[0][3]+remote[0][3], 0.02*both[0][3]+0.02, "the two directions' averages add up")
		})
	}
	code, out, errs := run(t, "write_bw", "--report-both", "-n", "50", "--loopback")
	require.Equal(t, 0, code, "stderr: %s", errs)
	require.NotContains(t, out, "Local results")
}

// --latency_gap: each side spins that long before each post, and, as in
// perftest (which times from one post to the next), the latency reported
// includes it; only the RDMA latency tests take it.
func TestLatencyGap(t *testing.T) {
	leakCheck(t)
	for _, test := range []string{"write_lat", "send_lat", "read_lat"} {
		t.Run(test, func(t *testing.T) {
			code, out, errs := run(t, test, "-n", "100", "--latency_gap", "1000", "--loopback")
			require.Equal(t, 0, code, "stderr: %s", errs)
			rows := table(t, out)
			require.GreaterOrEqual(t, rows[0][4], 1000.0, "t_typical with a gap of 1000 µs:\n%s", out)
		})
	}
	for _, args := range [][]string{{"write_bw", "--latency_gap", "10"}, {"tcp_lat", "--latency_gap", "10"}} {
		code, _, errs := run(t, append(args, "--loopback")...)
		require.NotEqual(t, 0, code)
		require.Contains(t, errs, "latency gap feature is only for the RDMA latency tests")
	}
	code, _, errs := run(t, "write_lat", "--latency_gap", "-1", "--loopback")
	require.NotEqual(t, 0, code)
	require.Contains(t, errs, "--latency_gap -1: not negative")
}
