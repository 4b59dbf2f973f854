package perf

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/goiwarp/iwarp/internal/perftest"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/verbs"
)

// ptRun runs one test with perftest's exchange between two iwarp-perf
// sides in this process: the server as "iwarp-perf TEST" (with -R if
// serverR) and the client with clientArgs. With perftestOnly the server
// behaves as perftest's does, taking any MPA Request as perftest's (so a
// client without -R meets a server it must recognise as perftest). It
// returns both sides' exchanges and what each printed.
func ptRun(t *testing.T, serverArgs, clientArgs []string, perftestOnly bool) (srv, cli *perftestExchange, sout, cout string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sp, _, err := Parse(serverArgs)
	require.NoError(t, err)
	cp, _, err := Parse(clientArgs)
	require.NoError(t, err)
	dev, err := verbs.Open(verbs.DeviceAttr{})
	require.NoError(t, err)
	ln, err := dev.Listen(context.Background(), "tcp", "127.0.0.1:0", connConfig(sp, false))
	require.NoError(t, err)
	defer ln.Close()
	cp.Server = "127.0.0.1"

	type result struct {
		x   Exchange
		err error
	}
	var sbuf, cbuf bytes.Buffer
	sres := make(chan result, 1)
	go func() {
		var x Exchange
		var err error
		if perftestOnly {
			var req *verbs.ConnRequest
			if req, err = ln.GetRequest(ctx); err == nil {
				x, err = acceptPerftest(ctx, req, ln, dev, sp)
			}
		} else {
			x, err = AcceptExchange(ctx, ln, dev, sp)
		}
		if err == nil {
			_, err = runRDMA(ctx, sp, &printer{w: &sbuf, p: sp}, dev, x, false)
			x.Close()
		}
		sres <- result{x, err}
	}()
	cdev, err := verbs.Open(verbs.DeviceAttr{})
	require.NoError(t, err)
	var x Exchange
	if cp.Perftest {
		x, err = DialPerftest(ctx, cdev, ln.Addr().String(), connConfig(cp, true), cp)
	} else {
		x, err = DialExchange(ctx, cdev, ln.Addr().String(), connConfig(cp, true), cp)
	}
	require.NoError(t, err)
	_, err = runRDMA(ctx, cp, &printer{w: &cbuf, p: cp}, cdev, x, true)
	x.Close()
	require.NoError(t, err, "client")
	r := <-sres
	require.NoError(t, r.err, "server")
	var ok bool
	srv, ok = r.x.(*perftestExchange)
	if !ok {
		return nil, nil, sbuf.String(), cbuf.String() // the native exchange
	}
	cli, ok = x.(*perftestExchange)
	require.True(t, ok, "the client spoke perftest's exchange")
	return srv, cli, sbuf.String(), cbuf.String()
}

// ptSizes is the size of every message each side sends in perftest's
// exchange for a test on q QPs (the sequence ptSizesOf models).
func ptSizes(test Test, q int) []int { return ptSizesOf(test, q, perftest.DestLen, 1, false) }

func ptSizesDest(test Test, q, dest int) []int { return ptSizesOf(test, q, dest, 1, false) }

// ptSizesOf models perftest 6.06's main loops (write_bw.c, send_bw.c, ...)
// for n sizes (n > 1: -a) and -b: set-up, the dests, then per test the hand
// shakes (one dest each) and reports (five 8-octet fields).
func ptSizesOf(test Test, q, dest, n int, bidir bool) []int {
	s := []int{perftest.VersionLen, perftest.SysDataLen, perftest.SysDataLen, perftest.MTULen, dest, dest}
	dests := func(k int) {
		for range k {
			s = append(s, dest)
		}
	}
	report := func() { s = append(s, 8, 8, 8, 8, 8) }
	switch test {
	case WriteBW, ReadBW:
		dests(2*q + 1) // the dests twice, the start
		if !bidir {
			dests(1) // the end of the test
			report()
			break
		}
		for range n {
			dests(1) // duplex start
			if n > 1 {
				dests(1) // duplex end
			}
			report()
		}
	case SendBW:
		dests(2*q + 1)
		for range n {
			dests(1) // start of the size
			if bidir {
				report()
			}
			if n > 1 {
				dests(1) // end of the size
			}
		}
	case SendLat:
		dests(2*q + 1 + n) // a start per size
	case ReadLat, WriteLat:
		dests(2*q + 2) // one start
	}
	if test != WriteLat {
		dests(1) // close
	}
	return s
}

// Both sides of each test with perftest's exchange (-R): the messages and
// their order are perftest's, and each side prints what perftest's would.
func TestPerftestExchange(t *testing.T) {
	for _, c := range []struct {
		args []string
		q    int
	}{
		{[]string{"write_bw", "-s", "4096", "-n", "50"}, 1},
		{[]string{"write_bw", "-s", "64", "-n", "50", "-q", "2"}, 2},
		{[]string{"read_bw", "-s", "4096", "-n", "50"}, 1},
		{[]string{"read_bw", "-s", "100", "-n", "50", "-q", "3"}, 3},
		{[]string{"send_bw", "-s", "4096", "-n", "50"}, 1},
		// A small rx-depth, so that the sender waits for credits often.
		{[]string{"send_bw", "-s", "1000", "-n", "200", "-r", "6", "-q", "2"}, 2},
		{[]string{"write_lat", "-n", "300"}, 1}, // the counter octet wraps
		{[]string{"write_lat", "-s", "4096", "-n", "20"}, 1},
		{[]string{"read_lat", "-n", "20"}, 1},
		{[]string{"send_lat", "-s", "100", "-n", "20"}, 1},
	} {
		t.Run(c.args[0]+"-"+c.args[2]+"-q"+string(rune('0'+c.q)), func(t *testing.T) {
			args := append(append([]string(nil), c.args...), "-R", "--fpdu-delay", "0")
			srv, cli, sout, cout := ptRun(t, args, args, false)
			p := cli.p
			want := ptSizes(p.Test, c.q)
			require.Equal(t, want, cli.sent, "the client's messages")
			require.Equal(t, want, srv.sent, "the server's messages")
			require.Equal(t, "6.06", cli.version)
			require.Equal(t, perftest.PageSize, p.cycle)

			crow := table(t, cout)
			require.Len(t, crow, 1)
			require.Equal(t, float64(p.Size), crow[0][0])
			require.Positive(t, crow[0][1])
			if p.Test == ReadLat {
				require.NotContains(t, sout, "#bytes", "perftest's read_lat server shows no results")
				return
			}
			srow := table(t, sout)
			require.Len(t, srow, 1)
			require.Equal(t, float64(p.Size), srow[0][0])
			switch p.Test {
			case WriteBW, ReadBW:
				require.Equal(t, crow, srow, "the server shows the client's report")
			case SendBW:
				require.Zero(t, srow[0][2], "perftest's send_bw server has no peak")
				require.Positive(t, srow[0][3], "the server's own average")
			}
		})
	}
}

// perftest 6.29's 64-octet dest records; 6.28's negotiation and versions
// before 5.70 are refused.
func TestPerftestVersions(t *testing.T) {
	defer func(v string) { perftestVersion = v }(perftestVersion)
	perftestVersion = "6.29"
	args := []string{"send_bw", "-R", "-s", "64", "-n", "20", "-q", "2", "--fpdu-delay", "0"}
	srv, cli, _, _ := ptRun(t, args, args, false)
	require.Equal(t, "6.29", srv.version)
	require.Equal(t, ptSizesDest(SendBW, 2, perftest.DestLen629), cli.sent)
	require.Equal(t, ptSizesDest(SendBW, 2, perftest.DestLen629), srv.sent)

	for _, v := range []string{"6.28", "5.6"} {
		perftestVersion = v
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var out bytes.Buffer
		code := MainContext(ctx, []string{"write_bw", "-R", "--loopback", "-n", "5"}, io.Discard, &out)
		cancel()
		require.Equal(t, 1, code, v)
		require.Contains(t, out.String(), v, v)
		t.Logf("%s: %s", v, strings.TrimSpace(out.String()))
	}
}

// The MPA parameters of perftest's connections: no CRC, no private data,
// IRD/ORD 128 for the test QPs of read tests.
func TestPerftestDefaults(t *testing.T) {
	p, _, err := Parse([]string{"read_bw", "-R", "server"})
	require.NoError(t, err)
	require.True(t, p.Perftest)
	require.Equal(t, mpa.CRCOff, p.CRC)
	require.Equal(t, perftestOuts, p.Outs)
	require.Equal(t, perftestFPDUDelay, p.FPDUDelay)
	p2, _, err := Parse([]string{"write_bw", "-R", "server"})
	require.NoError(t, err)
	require.Equal(t, 1, p2.Outs, "perftest's out_reads for tests without Reads")
	require.Equal(t, perftestFPDUDelay, connConfig(p, true).FirstFPDUDelay)
	require.Zero(t, connConfig(p, false).FirstFPDUDelay)
	// -z with -R is -R: perftest's -R implies it.
	pz, _, err := Parse([]string{"read_bw", "-R", "-z", "server"})
	require.NoError(t, err)
	pz.set, p.set = nil, nil
	require.Equal(t, p, pz)

	p, _, err = Parse([]string{"read_bw", "-R", "--crc", "on", "-o", "8", "--fpdu-delay", "0", "server"})
	require.NoError(t, err)
	require.Equal(t, mpa.CRCOn, p.CRC)
	require.Equal(t, 8, p.Outs)
	require.Zero(t, p.FPDUDelay)

	p, _, err = Parse([]string{"write_bw", "--rdma_cm", "--loopback"})
	require.NoError(t, err)
	require.True(t, p.Perftest)
	require.Zero(t, p.FPDUDelay, "our own server needs no delay")

	for _, args := range [][]string{{"send_bw", "-R", "-D", "2"}, {"tcp_bw", "-R"}} {
		_, _, err := Parse(args)
		require.Error(t, err, "%v", args)
	}
	_, _, err = Parse([]string{"write_bw", "-R", "-D", "2"})
	require.NoError(t, err)
}

// A server without -R serves a perftest client with perftest's exchange
// (its MPA Request carries no iwarp-perf hello); a client without -R that
// finds a perftest server (no private data in the MPA Reply) goes on with
// perftest's exchange.
func TestPerftestDetect(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		srv, cli, sout, _ := ptRun(t, []string{"read_bw", "-s", "4096", "-n", "20"}, []string{"read_bw", "-R", "-s", "4096", "-n", "20", "--fpdu-delay", "20"}, false)
		require.Equal(t, perftestOuts, srv.p.Outs, "perftest's defaults once a perftest client is seen")
		require.Equal(t, ptSizes(ReadBW, 1), srv.sent)
		require.Equal(t, ptSizes(ReadBW, 1), cli.sent)
		require.Len(t, table(t, sout), 1)
	})
	t.Run("native", func(t *testing.T) {
		// A server with -R still serves an iwarp-perf client without.
		srv, _, sout, cout := ptRun(t, []string{"send_bw", "-R", "-s", "512", "-n", "30"}, []string{"send_bw", "-s", "512", "-n", "30"}, false)
		require.Nil(t, srv, "the native exchange")
		require.Len(t, table(t, sout), 1)
		require.Len(t, table(t, cout), 1)
	})
	t.Run("client", func(t *testing.T) {
		srv, cli, _, cout := ptRun(t, []string{"send_bw", "-R", "-s", "512", "-n", "30"}, []string{"send_bw", "-s", "512", "-n", "30", "--fpdu-delay", "1"}, true)
		require.Equal(t, ptSizes(SendBW, 1), srv.sent)
		require.Equal(t, ptSizes(SendBW, 1), cli.sent)
		require.Equal(t, time.Millisecond, cli.p.FPDUDelay)
		require.Len(t, table(t, cout), 1)
	})
}

// Through the command line: -R with --loopback, every RDMA test.
func TestPerftestLoopback(t *testing.T) {
	for _, test := range []string{"write_bw", "read_bw", "send_bw", "write_lat", "read_lat", "send_lat"} {
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		code := MainContext(ctx, []string{test, "-R", "--loopback", "-n", "20", "-s", "256"}, &out, &errb)
		cancel()
		require.Equal(t, 0, code, "%s: %s", test, errb.String())
		require.Contains(t, out.String(), "Data ex. method : rdma_cm")
		require.Len(t, table(t, out.String()), 1, test)
	}
}

// table returns the rows of the results table in out, each split into
// numbers.
func table(t *testing.T, out string) [][]float64 {
	t.Helper()
	lines := strings.Split(out, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, " #bytes") })
	require.GreaterOrEqual(t, start, 0, "no table header in:\n%s", out)
	var rows [][]float64
	for _, l := range lines[start+1:] {
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
	return rows
}

// -a with perftest's exchange, as perftest's write_bw and read_bw do it: one
// start sync, the client runs every size from 2 to 2^23, and the one report
// at the end is the last size's, which the server shows.
func TestPerftestExchangeAllSizes(t *testing.T) {
	for _, test := range []string{"write_bw", "read_bw"} {
		t.Run(test, func(t *testing.T) {
			args := []string{test, "-a", "-n", "5", "-R", "--fpdu-delay", "0"}
			srv, cli, sout, cout := ptRun(t, args, args, false)
			want := ptSizes(cli.p.Test, 1)
			require.Equal(t, want, cli.sent, "the client's messages: the same as for one size")
			require.Equal(t, want, srv.sent, "the server's messages")
			crows := table(t, cout)
			require.Len(t, crows, 23)
			for i, r := range crows {
				require.Equal(t, float64(int(2)<<i), r[0], "row %d", i)
			}
			srows := table(t, sout)
			require.Len(t, srows, 1)
			require.Equal(t, crows[22], srows[0], "the server shows the client's last report")
		})
	}
}

// -a and -b with perftest's exchange for every other test, as perftest's
// loops run them: the hand shakes and report exchanges per size, and the
// rows each side shows.
func TestPerftestExchangeAllAndBidir(t *testing.T) {
	for _, c := range []struct {
		args  []string
		q     int
		all   bool
		bidir bool
	}{
		{[]string{"send_bw", "-a", "-n", "8", "-r", "4"}, 1, true, false},
		{[]string{"send_lat", "-a", "-n", "5"}, 1, true, false},
		{[]string{"write_lat", "-a", "-n", "5"}, 1, true, false},
		{[]string{"read_lat", "-a", "-n", "5"}, 1, true, false},
		{[]string{"write_bw", "-b", "-s", "4096", "-n", "50"}, 1, false, true},
		{[]string{"read_bw", "-b", "-s", "4096", "-n", "50", "-q", "2"}, 2, false, true},
		{[]string{"send_bw", "-b", "-s", "1000", "-n", "200", "-r", "6", "-q", "2"}, 2, false, true},
		{[]string{"write_bw", "-a", "-b", "-n", "5"}, 1, true, true},
		{[]string{"read_bw", "-a", "-b", "-n", "5"}, 1, true, true},
		{[]string{"send_bw", "-a", "-b", "-n", "8", "-r", "4"}, 1, true, true},
	} {
		t.Run(strings.Join(c.args, ""), func(t *testing.T) {
			args := append(append([]string(nil), c.args...), "-R", "--fpdu-delay", "0")
			srv, cli, sout, cout := ptRun(t, args, args, false)
			p := cli.p
			n := 1
			if c.all {
				n = 23
			}
			want := ptSizesOf(p.Test, c.q, perftest.DestLen, n, c.bidir)
			require.Equal(t, want, cli.sent, "the client's messages")
			require.Equal(t, want, srv.sent, "the server's messages")
			crows := table(t, cout)
			require.Len(t, crows, n)
			for i, r := range crows {
				if c.all {
					require.Equal(t, float64(int(2)<<i), r[0], "row %d", i)
				}
				require.Positive(t, r[1], "row %d iterations", i)
			}
			if p.Test == ReadLat {
				require.NotContains(t, sout, "#bytes", "perftest's read_lat server shows no results")
				return
			}
			srows := table(t, sout)
			require.Len(t, srows, n)
			if c.bidir {
				// Both show the sum of both directions: the same averages.
				for i := range crows {
					require.InDelta(t, crows[i][3], srows[i][3], 0.01*crows[i][3]+0.02, "row %d BW average", i)
					if crows[i][0] >= 1024 {
						// Smaller rows may print 0.00 MiB/s on a loaded
						// machine: 8 messages of 2 octets in 10 ms.
						require.Positive(t, crows[i][3], "row %d BW average", i)
					}
				}
			}
		})
	}
}
