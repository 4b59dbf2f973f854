package perf

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/goiwarp/iwarp/verbs"
)

func TestDefaults(t *testing.T) {
	for _, c := range []struct {
		args                            []string
		size, iters, tx, cqm, inl, outs int
	}{
		{[]string{"write_bw"}, 65536, 5000, 128, 1, 0, 16}, // CQ moderation off above 8 KiB
		{[]string{"write_bw", "-s", "4096"}, 4096, 5000, 128, 100, 0, 16},
		{[]string{"write_bw", "-Q", "16"}, 65536, 5000, 128, 16, 0, 16},
		{[]string{"read_bw", "-n", "50"}, 65536, 50, 50, 1, 0, 128}, // tx depth at most the iterations
		{[]string{"read_bw", "-o", "4"}, 65536, 1000, 128, 1, 0, 4},
		{[]string{"send_bw", "-s", "64", "-t", "8"}, 64, 1000, 8, 8, 0, 16},
		{[]string{"write_lat"}, 2, 1000, 1, 1, 220, 16},
		{[]string{"send_lat"}, 2, 1000, 1, 1, 236, 16},
		{[]string{"read_lat", "-I", "64"}, 2, 1000, 1, 1, 0, 128},
		{[]string{"tcp_bw", "-D", "2"}, 65536, 1000, 128, 1, 0, 16},
		{[]string{"atomic_bw"}, 8, 1000, 128, 100, 0, 128}, // perftest: DEF_SIZE_ATOMIC
		{[]string{"atomic_lat", "-s", "8"}, 8, 1000, 1, 1, 0, 128},
	} {
		p, demo, err := Parse(c.args)
		require.NoError(t, err, "%v", c.args)
		require.False(t, demo)
		got := []int{p.Size, p.Iters, p.TxDepth, p.CQMod, p.Inline, p.Outs}
		require.Equal(t, []int{c.size, c.iters, c.tx, c.cqm, c.inl, c.outs}, got, "%v: size iters tx cq-mod inline outs", c.args)
		require.Equal(t, DefPort, p.Port)
	}
	p, demo, err := Parse(nil)
	require.NoError(t, err)
	require.True(t, demo)
	require.Equal(t, WriteBW, p.Test)
	require.Equal(t, 3*time.Second, p.Duration)
	require.True(t, p.Loopback)

	// Flags and arguments in any order, as getopt permutes them.
	p, _, err = Parse([]string{"-s", "128", "send_bw", "-b", "server.example", "-q", "2"})
	require.NoError(t, err)
	require.Equal(t, SendBW, p.Test)
	require.Equal(t, "server.example", p.Server)
	require.Equal(t, []int{128, 2}, []int{p.Size, p.QPs})
	require.True(t, p.Bidir)
	require.Equal(t, 512, p.RxDepth)
}

// perftest command lines as scripts write them: size suffixes, getopt's
// joined short options, the device flags that name nothing here; and
// numbers out of range refused rather than wrapped or allocated.
func TestPerftestCommandLines(t *testing.T) {
	p, _, err := Parse([]string{"write_bw", "-s", "64K", "-n100", "-ab", "-d", "mlx5_0", "-i", "1", "-x", "3", "-m", "4096", "-F", "-c", "RC", "-N", "host"})
	require.NoError(t, err)
	require.Equal(t, []int{65536, 100}, []int{p.Size, p.Iters})
	require.True(t, p.All && p.Bidir && p.NoPeak)
	require.False(t, p.peak())
	require.Equal(t, "host", p.Server)
	p, _, err = Parse([]string{"read_bw", "-s1M", "-q2", "-size=4096", "--size", "8K"})
	require.NoError(t, err)
	require.Equal(t, []int{8192, 2}, []int{p.Size, p.QPs})
	for _, bad := range [][]string{
		{"write_bw", "-c", "UD"},
		{"write_lat", "-n", "1000000000000000000"},
		{"write_bw", "-n", "99999999999"},
		{"write_lat", "-n", "100000000"}, // 800 MB of time stamps
		{"tcp_bw", "-D", "18446744075"},
		{"tcp_bw", "-D", "9300000000"},
		{"write_bw", "-s", "64Q"},
		{"write_bw", "-nX"},
	} {
		_, _, err := Parse(bad)
		require.Error(t, err, "%v", bad)
	}
}

// --cq-wake: CQ moderation for the bandwidth tests, bounded by the queue
// depths so that a round of the queue still wakes the loop eight times;
// never for the latency tests.
func TestCQWake(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"read_bw"}, 16},
		{[]string{"write_bw", "-t", "64"}, 8},
		{[]string{"send_bw", "-r", "32"}, 4},
		{[]string{"read_bw", "-n", "5"}, 1},
		{[]string{"send_bw", "--cq-wake", "1"}, 1},
		{[]string{"send_bw", "--cq-wake", "100"}, 100},
		{[]string{"read_lat", "--cq-wake", "100"}, 1},
	} {
		p, _, err := Parse(c.args)
		require.NoError(t, err, "%v", c.args)
		require.Equal(t, c.want, p.CQWake, "%v", c.args)
	}
	_, _, err := Parse([]string{"read_bw", "--cq-wake", "-2"})
	require.ErrorContains(t, err, "--cq-wake -2 out of range")
}

func TestMismatch(t *testing.T) {
	a, _, _ := Parse([]string{"send_bw", "-s", "100", "-r", "64"})
	b, _, _ := Parse([]string{"send_bw", "-s", "200", "-r", "64", "-b"})
	require.Empty(t, a.symmetric().mismatch(a.symmetric()))
	require.Equal(t, "size (-s) mismatch: local=100, remote=200; bidirectional (-b) mismatch: local=false, remote=true",
		a.symmetric().mismatch(b.symmetric()))
}

func TestLatReport(t *testing.T) {
	// 12 posts 10 µs apart but for two slow round trips: 11 samples of a
	// full round trip, halved.
	var tp []int64
	var t0 int64
	for i := range 12 {
		tp = append(tp, t0)
		switch i {
		case 3:
			t0 += 50e3
		case 7:
			t0 += 90e3
		default:
			t0 += 10e3
		}
	}
	r := latReport(2, tp, 2)
	require.Equal(t, uint64(12), r.Iters)
	// Sorted halves: 9 × 5, 25, 45; the two largest are dropped from the
	// statistics, t_max is the first dropped one (perftest's indexing).
	require.InDelta(t, 5, r.TMin, 1e-9)
	require.InDelta(t, 25, r.TMax, 1e-9)
	require.InDelta(t, 5, r.TTypical, 1e-9)
	require.InDelta(t, 5, r.TAvg, 1e-9)
	require.InDelta(t, 0, r.TStdev, 1e-9)
	require.InDelta(t, 25, r.P99, 1e-9)  // sorted[ceil(9 × 0.99)] = sorted[9]
	require.InDelta(t, 25, r.P999, 1e-9) // sorted[9]

	d := latDurReport(2, 1000, time.Second, 2)
	require.InDelta(t, 500, d.TAvg, 1e-9)
	require.InDelta(t, 1000, d.TPS, 1e-9)
}

func TestBWReport(t *testing.T) {
	// Four 1000-octet messages posted at 0 and completed (CQ moderation 2)
	// at 2 µs and 10 µs: the average is 4000 octets in 10 µs, the peak the
	// first pair, 2 messages in 2 µs.
	r := bwReport(1000, 4, []int64{0, 0, 0, 0}, []completion{{1, 2000}, {3, 10000}}, true)
	require.InDelta(t, 4e8, r.BWAvg, 1)
	require.InDelta(t, 1e9, r.BWPeak, 1)
	require.InDelta(t, 4e5, r.MsgRate, 1e-6)
	require.Zero(t, bwReport(1000, 4, []int64{0}, []completion{{3, 10000}}, false).BWPeak)
}

// peakDelta against perftest's loop over every pair, on random runs with
// completions for every WR and moderated ones; and a million WRs, which
// perftest's loop would take hours over.
func TestPeakDelta(t *testing.T) {
	brute := func(tp []int64, comps []completion) float64 {
		best := math.Inf(1)
		for i := range tp {
			for _, c := range comps {
				if c.idx >= i {
					best = min(best, float64(c.t-tp[i])/float64(c.idx-i+1))
				}
			}
		}
		return best
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		n := 1 + rng.IntN(200)
		mod := 1 + rng.IntN(8)
		tp := make([]int64, n)
		var comps []completion
		now := int64(rng.IntN(1000))
		for i := range tp {
			now += int64(rng.IntN(500))
			tp[i] = now
			if i%mod == mod-1 || i == n-1 {
				comps = append(comps, completion{idx: i, t: now + 1 + int64(rng.IntN(3000))})
			}
		}
		for k := 1; k < len(comps); k++ { // completions in order
			comps[k].t = max(comps[k].t, comps[k-1].t)
		}
		want, got := brute(tp, comps), peakDelta(tp, comps)
		require.InEpsilon(t, want, got, 1e-9, "round %d: %d WRs, a completion every %d", round, n, mod)
	}
	n := 1_000_000
	tp := make([]int64, n)
	comps := make([]completion, 0, n/16)
	for i := range tp {
		tp[i] = int64(i) * 100
		if i%16 == 15 {
			comps = append(comps, completion{idx: i, t: tp[i] + 5000})
		}
	}
	// The best run is the longest: all but the first 15 posts wait 5 µs
	// for their completion, so a run of m posts takes 100(m-1)+5000 ns.
	require.InEpsilon(t, float64(100*(n-1)+5000)/float64(n), peakDelta(tp, comps), 1e-9)
}

func TestPrint(t *testing.T) {
	var b bytes.Buffer
	p, _, _ := Parse([]string{"write_bw"})
	pr := &printer{w: &b, p: p}
	pr.header()
	require.NoError(t, pr.row(Report{Kind: kindBW, Size: 65536, Iters: 5000, BWPeak: 1 << 30, BWAvg: 1 << 29, MsgRate: 8192}))
	require.Equal(t, resultLine+resultFmt+" 65536      5000             1024.00            512.00 \t\t     0.008192\n", b.String())

	b.Reset()
	p, _, _ = Parse([]string{"send_lat"})
	pr.p = p
	require.NoError(t, pr.row(Report{Kind: kindLat, Size: 2, Iters: 1000, TMin: 1, TMax: 2, TTypical: 1.5, TAvg: 1.25, TStdev: 0.5, P99: 1.75, P999: 2}))
	require.Equal(t, " 2       1000          1.00           2.00         1.50     \t       1.25        \t0.50   \t\t1.75    \t\t2.00   \n", b.String())

	require.Equal(t, "0000", cHex(0, 4))
	require.Equal(t, "0x01", cHex(1, 4))
	require.Equal(t, "0x12345678", cHex(0x12345678, 8))
	require.Equal(t, "0x00abcdef", cHex(0xabcdef, 10))
}

// TestQPError checks that a failed completion is reported with the QP's
// error: here the Terminate for an RDMA Read of a bad STag.
func TestQPError(t *testing.T) {
	p, _, _ := Parse([]string{"read_bw", "-n", "5"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, _ := endpointPair(ctx, t, p)
	q := cli.qps[0]
	q.remote = BufInfo{Addr: 64, RKey: 0x5a5a5a5a, Len: 1 << 20}
	_, err := cli.runBW(ctx, 1024, true, false, nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "completion error on QP 0")
	require.Contains(t, err.Error(), "Terminate")
	require.Contains(t, err.Error(), "RDMAP")
	t.Log(err)
}

// checkAtomics fails a run whose atomics did not all happen: here the
// client believes it did one fetch-and-add more than the target saw.
func TestCheckAtomics(t *testing.T) {
	for _, op := range []string{"FETCH_AND_ADD", "CMP_AND_SWAP"} {
		t.Run(op, func(t *testing.T) {
			p, _, err := Parse([]string{"atomic_bw", "-n", "40", "-A", op})
			require.NoError(t, err)
			require.True(t, connConfig(p, false).RFC7306)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cli, srv := endpointPair(ctx, t, p)
			require.NoError(t, cli.setRemote(srv.localInfo()))
			_, err = cli.runBW(ctx, sizeAtomic, true, false, nil)
			require.NoError(t, err)
			require.Equal(t, uint64(40), cli.qps[0].scnt)
			require.NoError(t, cli.checkAtomics(ctx), "the target saw every atomic")

			cli.qps[0].scnt++
			err = cli.checkAtomics(ctx)
			if op == "FETCH_AND_ADD" {
				require.ErrorContains(t, err, "the target word reads 40 after 41 FETCH_AND_ADD, want 41")
			} else {
				require.NoError(t, err, "compare-and-swap never changes the word")
			}
		})
	}
}

// endpointPair connects a client endpoint of p to a server endpoint over
// loopback, each QP 0 with the start-up configuration iwarp-perf uses.
func endpointPair(ctx context.Context, t *testing.T, p *Params) (cli, srv *endpoint) {
	t.Helper()
	dev, err := verbs.Open(verbs.DeviceAttr{})
	require.NoError(t, err)
	ln, err := dev.Listen(context.Background(), "tcp", "127.0.0.1:0", connConfig(p, false))
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	srv, err = newEndpoint(dev, p)
	require.NoError(t, err)
	t.Cleanup(srv.close)
	go func() {
		if req, err := ln.GetRequest(ctx); err == nil {
			req.Accept(ctx, srv.qps[0].qp, nil)
		}
	}()
	cli, err = newEndpoint(dev, p)
	require.NoError(t, err)
	t.Cleanup(cli.close)
	err = cli.qps[0].qp.Dial(ctx, "tcp", ln.Addr().String(), connConfig(p, true))
	require.NoError(t, err)
	return cli, srv
}

// --use-srq (perftest's spelling; --use_srq too): send tests run with one
// shared receive queue per side, many QPs drawing on it; other tests
// refuse it.
func TestUseSRQ(t *testing.T) {
	for _, args := range [][]string{
		{"send_bw", "--loopback", "--use-srq", "-q", "4", "-n", "500", "-s", "4096"},
		{"send_bw", "--loopback", "--use_srq", "-q", "2", "-n", "300", "-b"},
		{"send_lat", "--loopback", "--use-srq", "-n", "300"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			code := MainContext(ctx, args, &out, &errb)
			require.Equal(t, 0, code, "stderr: %s", errb.String())
			require.Contains(t, out.String(), "Using SRQ      : ON")
		})
	}
	var ue *UsageError
	for _, flag := range []string{"--use-srq", "--use_srq"} {
		_, _, err := Parse([]string{"write_bw", flag})
		require.ErrorAs(t, err, &ue, flag)
	}
}

// --perform_warm_up: the sender's QPs each carry tx-depth more WRs than
// the run's iterations (one FPDU each at 64 octets), the run's report is
// unchanged, and fetch-and-add's target word counts them (checkAtomics).
// The send tests ignore it, as perftest's.
func TestPerformWarmUp(t *testing.T) {
	sent := regexp.MustCompile(`iWARP qp (\d+): FPDUs sent (\d+)`)
	run := func(args ...string) (string, map[string]int) {
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.Equal(t, 0, MainContext(ctx, args, &out, &errb), "%v: stderr: %s", args, errb.String())
		fpdus := map[string]int{}
		for _, m := range sent.FindAllStringSubmatch(out.String(), -1) {
			n, _ := strconv.Atoi(m[2])
			fpdus[m[1]] = n
		}
		return out.String(), fpdus
	}
	for _, test := range []string{"write_bw", "read_bw", "atomic_bw"} {
		t.Run(test, func(t *testing.T) {
			args := []string{test, "--loopback", "-n", "100", "-s", "64", "-t", "16", "-q", "2"}
			if test == "atomic_bw" {
				args = []string{test, "--loopback", "-n", "100", "-t", "16"} // one QP, 8 octets
			}
			_, cold := run(args...)
			out, warm := run(append(args, "--perform_warm_up")...)
			require.NotEmpty(t, cold)
			require.Equal(t, len(cold), len(warm))
			for qp, n := range cold {
				require.Equal(t, n+16, warm[qp], "QP %s: FPDUs sent, warm against cold", qp)
			}
			require.Regexp(t, `(?m)^ (64 +200|8 +100) `, out, "the run's iterations, without the warm-up's")
		})
	}
	_, cold := run("send_bw", "--loopback", "-n", "100", "-s", "64")
	_, warm := run("send_bw", "--loopback", "-n", "100", "-s", "64", "--perform_warm_up")
	require.Equal(t, cold, warm, "send_bw: FPDUs sent")
}

// --bind_source_ip: every connection of the client, iWARP or TCP, with our
// exchange or perftest's, leaves from that address (127.0.0.2 and on are
// loopback addresses too); a name is refused.
func TestBindSourceIP(t *testing.T) {
	line := regexp.MustCompile(`(?m)^ (?:iWARP qp|TCP conn) \d+ ?:.*, (\S+):\d+ -> (\S+):\d+$`)
	for i, args := range [][]string{
		{"write_bw", "--loopback", "-n", "100", "-q", "2"},
		{"send_lat", "--loopback", "-n", "100", "-R"},
		{"tcp_bw", "--loopback", "-n", "100", "-q", "2"},
	} {
		src := "127.0.0." + strconv.Itoa(2+i)
		args = append(args, "--bind_source_ip", src)
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.Equal(t, 0, MainContext(ctx, args, &out, &errb), "stderr: %s", errb.String())
			ms := line.FindAllStringSubmatch(out.String(), -1)
			require.NotEmpty(t, ms, "%s", out.String())
			for _, m := range ms {
				require.Equal(t, src, m[1], "%s", m[0])
				require.Equal(t, "127.0.0.1", m[2], "%s", m[0])
			}
		})
	}
	var ue *UsageError
	_, _, err := Parse([]string{"write_bw", "--bind_source_ip", "localhost", "peer"})
	require.ErrorAs(t, err, &ue)
}
