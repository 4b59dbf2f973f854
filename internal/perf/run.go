package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"

	"github.com/pkg/profile"

	"github.com/goiwarp/iwarp/tcpx"
	"github.com/goiwarp/iwarp/verbs"
)

// Main runs iwarp-perf with the given arguments and returns its exit
// status: 0, 1 when the test fails, 2 for a bad command line. An interrupt
// stops the test.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return MainContext(ctx, args, stdout, stderr)
}

// MainContext is Main without the signal handling.
func MainContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	p, demo, err := Parse(args)
	if errors.Is(err, errHelp) {
		fmt.Fprint(stdout, Usage)
		return 0
	}
	if errors.Is(err, errVersion) {
		fmt.Fprintf(stdout, "Version: %s\n", version())
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "iwarp-perf: %v\nRun 'iwarp-perf -h' for usage.\n", err)
		return 2
	}
	p.Log = stderr
	if p.Profile != "" {
		mode := map[string]func(*profile.Profile){"cpu": profile.CPUProfile, "mem": profile.MemProfile,
			"mutex": profile.MutexProfile, "block": profile.BlockProfile, "trace": profile.TraceProfile}[p.Profile]
		defer profile.Start(mode, profile.ProfilePath("."), profile.NoShutdownHook).Stop()
	}
	var rows []Report
	if demo {
		err = Demo(ctx, p, stdout)
	} else {
		rows, err = Run(ctx, p, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "iwarp-perf: %v\n", err)
		return 1
	}
	if msg := p.belowLimits(rows); msg != "" {
		fmt.Fprintln(stderr, msg)
		return 1
	}
	return 0
}

// belowLimits is perftest's verdict on -w and -y: passed if any row's
// average reaches the limit (with -a, any size), else its error line.
func (p *Params) belowLimits(rows []Report) string {
	pr := &printer{p: p}
	bw, rate := p.LimitBW == 0, p.LimitMsgRate == 0
	for _, r := range rows {
		bw = bw || pr.bwUnit(r.BWAvg) >= p.LimitBW
		rate = rate || r.MsgRate/1e6 >= p.LimitMsgRate
	}
	switch {
	case !bw:
		return "Error: BW result is below bw limit"
	case !rate:
		return "Error: Msg rate  is below msg_rate limit" // perftest's, two spaces and all
	}
	return ""
}

// Run runs one test as p says: as the server, the client, or both
// (--loopback), printing to w. It returns the rows it printed.
func Run(ctx context.Context, p *Params, w io.Writer) ([]Report, error) {
	if p.Loopback {
		return runLoopback(ctx, p, w)
	}
	if p.Client() {
		host := p.Server
		if p.IPv6 {
			// perftest's --ipv6-addr: the server's IPv6 address (with
			// its zone: a link-local address needs one).
			h, err := ipv6Of(ctx, host)
			if err != nil {
				return nil, fmt.Errorf("--ipv6-addr: %w", err)
			}
			host = h
		}
		return runClient(ctx, p, w, net.JoinHostPort(host, strconv.Itoa(p.Port)))
	}
	pr := &printer{w: w, p: p}
	if p.Test.TCP() {
		ln, err := listenTCP(ctx, p, net.JoinHostPort("", strconv.Itoa(p.Port)))
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		pr.waiting()
		return serveTCP(ctx, p, pr, ln, true)
	}
	dev, err := verbs.Open(deviceAttr(p))
	if err != nil {
		return nil, err
	}
	ln, err := dev.Listen(ctx, "tcp", net.JoinHostPort("", strconv.Itoa(p.Port)), connConfig(p, false))
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	pr.waiting()
	return serveRDMA(ctx, p, pr, dev, ln, true)
}

// ipv6Of returns the first IPv6 address of host, a name or a literal
// (kept as given, zone and all).
func ipv6Of(ctx context.Context, host string) (string, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		if !a.Is6() || a.Is4In6() {
			return "", fmt.Errorf("%s is not an IPv6 address", host)
		}
		return host, nil
	}
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if a.IP.To4() == nil {
			return a.String(), nil
		}
	}
	return "", fmt.Errorf("%s has no IPv6 address", host)
}

// waiting is perftest's server greeting, and how we serve.
func (pr *printer) waiting() {
	pr.printf("\n************************************\n* Waiting for client to connect... *\n************************************\n")
	if pr.p.Test.TCP() {
		pr.printf(" One client at a time: others wait until its test is over\n")
	} else {
		pr.printf(" One client at a time: others are refused as busy until its test is over\n")
	}
}

// runLoopback runs the server in a goroutine and the client here, over
// 127.0.0.1 (::1 with --ipv6-addr; an ephemeral port unless -p is given).
// Only the client prints.
func runLoopback(ctx context.Context, p *Params, w io.Writer) ([]Report, error) {
	port := 0
	if p.isSet("port") {
		port = p.Port
	}
	host := "127.0.0.1"
	if p.IPv6 {
		host = "::1"
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	sp := *p
	sp.Output, sp.JSON = OutputFull, false
	spr := &printer{w: io.Discard, p: &sp}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	if p.Test.TCP() {
		ln, err := listenTCP(ctx, p, addr)
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		addr = ln.Addr().String()
		go func() { _, err := serveTCP(sctx, &sp, spr, ln, false); errc <- err }()
	} else {
		dev, err := verbs.Open(deviceAttr(p))
		if err != nil {
			return nil, err
		}
		ln, err := dev.Listen(ctx, "tcp", addr, connConfig(p, false))
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		addr = ln.Addr().String()
		go func() { _, err := serveRDMA(sctx, &sp, spr, dev, ln, false); errc <- err }()
	}
	cp := *p
	cp.Server = "127.0.0.1"
	reps, err := runClient(ctx, &cp, w, addr)
	if err != nil {
		cancel()
		<-errc
		return nil, err
	}
	if serr := <-errc; serr != nil {
		return nil, fmt.Errorf("server: %w", serr)
	}
	return reps, nil
}

func runClient(ctx context.Context, p *Params, w io.Writer, addr string) ([]Report, error) {
	pr := &printer{w: w, p: p}
	if p.Test.TCP() {
		s, err := dialTCPSide(ctx, p, addr)
		if err != nil {
			return nil, err
		}
		defer s.close()
		return s.run(ctx, pr, true)
	}
	dev, err := verbs.Open(deviceAttr(p))
	if err != nil {
		return nil, err
	}
	var x Exchange
	if p.Perftest {
		x, err = DialPerftest(ctx, dev, addr, connConfig(p, true), p)
	} else {
		x, err = DialExchange(ctx, dev, addr, connConfig(p, true), p)
	}
	if err != nil {
		return nil, err
	}
	defer x.Close()
	return runRDMA(ctx, p, pr, dev, x, true)
}

func serveTCP(ctx context.Context, p *Params, pr *printer, ln *tcpx.Listener, keep bool) ([]Report, error) {
	tl := &tcpListener{Listener: ln}
	defer tl.closeHeld()
	return serveLoop(ctx, p, pr, keep, func() ([]Report, error) {
		s, err := acceptTCPSide(ctx, p, tl)
		if err != nil {
			return nil, err
		}
		defer s.close()
		rows, err := s.run(ctx, pr, false)
		if err != nil && ctx.Err() == nil {
			err = &ClientError{Addr: s.ctl.conn.RemoteAddr(), Err: err}
		}
		return rows, err
	})
}

// roles says what a side does in a measurement: sends the test's
// operations (and measures), receives Sends, or only serves (and shows the
// peer's numbers).
func roles(p *Params, client bool) (sender, receiver bool) {
	switch p.Test {
	case WriteBW, ReadBW, AtomicBW:
		return client || p.Bidir, false // the target of Writes, Reads and atomics does nothing
	case SendBW, TCPBW:
		return client || p.Bidir, !client || p.Bidir
	case ReadLat, AtomicLat:
		return client, false
	}
	return true, true // ping-pong
}

// pick is the row a side shows: its own measurement, the sum of both for
// bidirectional tests, or the peer's when it only served.
func pick(p *Params, client bool, mine, peer Report) Report {
	sender, _ := roles(p, client)
	switch {
	case p.Test.BW() && p.Bidir:
		return mine.add(peer)
	case !sender:
		return peer
	}
	return mine
}

// runRDMA is a side's part of an RDMA test once the exchange is open.
func runRDMA(ctx context.Context, p *Params, pr *printer, dev *verbs.Device, x Exchange, client bool) ([]Report, error) {
	return runRDMAOver(ctx, p, pr, dev, x, client, nil)
}

// runRDMAOver is runRDMA that calls over, if not nil, once the last
// report has been exchanged and shown: the test is over, the clean-up
// still to come.
func runRDMAOver(ctx context.Context, p *Params, pr *printer, dev *verbs.Device, x Exchange, client bool,
	over func()) ([]Report, error) {
	switch x := x.(type) {
	case *perftestExchange:
		p = x.p // perftest's defaults, and what the exchange agreed
		pr = &printer{w: pr.w, p: p}
	case *nativeExchange:
		if p.Perftest { // a server with -R, and an iwarp-perf client without
			q := *p
			q.Perftest = false
			p = &q
			pr = &printer{w: pr.w, p: p}
		}
	}
	// The run ends as soon as the control QP fails; and no wait on the peer
	// outlasts --exchange-timeout (serve.go).
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var ctl *ctlQP
	switch x := x.(type) {
	case *perftestExchange:
		ctl = x.ctl
	case *nativeExchange:
		ctl = x.ctl
	}
	if ctl != nil {
		defer watchQP(ctx, cancel, ctl.qp, "control QP")()
	}
	rows, err := runTest(ctx, p, pr, dev, x, ctl, cancel, client, over)
	return rows, causeOf(ctx, err)
}

// runTest is runRDMA once the run's context is set up.
func runTest(ctx context.Context, p *Params, pr *printer, dev *verbs.Device, x Exchange, ctl *ctlQP,
	cancel context.CancelCauseFunc, client bool, over func()) ([]Report, error) {
	e, err := newEndpoint(dev, p)
	if err != nil {
		return nil, &localError{err}
	}
	defer e.close()
	if err := e.postRecvs(); err != nil {
		return nil, err
	}
	if err := x.Connect(ctx, e.verbsQPs()); err != nil {
		return nil, err
	}
	local := e.localInfo()
	remote, err := x.SwapBufs(ctx, local)
	if err != nil {
		return nil, err
	}
	if err := e.setRemote(remote); err != nil {
		return nil, err
	}
	pr.banner(e.bannerInfo(local, remote))
	if p.Duration > 0 && p.Test.BW() && p.isSet("duration") {
		pr.printf(" WARNING: BW peak won't be measured in this run.\n")
	}
	if !(p.Perftest && p.Test == ReadLat && !client) { // perftest's read_lat server shows no results
		pr.header()
	}
	sender, receiver := roles(p, client)
	var rows []Report
	var both [][2]Report // --report-both: each size's own and the peer's
	var early, mid []verbs.QPStats
	var cost cpuCost // the last size's, for the CPU line
	conns := make([]tcpInfoer, 0, 1+len(e.qps))
	if ctl != nil {
		conns = append(conns, ctl.qp)
	}
	for _, q := range e.qps {
		conns = append(conns, q.qp)
	}
	defer watchProgress(ctx, cancel, p.exchangeTimeout(), "the test", conns)()
	if p.Infinite {
		return runInfinite(ctx, p, pr, e, x, sender, receiver, client)
	}
	sizes := p.Sizes()
	px, _ := x.(*perftestExchange)
	if px != nil {
		sizes = px.plan()
	}
	for i, size := range sizes {
		// Without a barrier before each size, as in perftest's latency
		// tests with -a, the peer may already be at this size: the polled
		// octet of a larger size has never been written, so it is zero.
		if i == 0 || px == nil {
			e.prepareLat(size)
		}
		if err := x.Sync(ctx); err != nil {
			return rows, err
		}
		prog := startProgress(pr, size)
		var mine Report
		if p.Test.BW() {
			mine, cost, err = measureCPU(p, func() (Report, error) { return e.runBW(ctx, size, sender, receiver, prog) })
		} else {
			mine, err = e.runLat(ctx, size, client, latFirst(p, client), prog)
		}
		prog.done()
		if err == nil && p.Test.verb() == verbAtomic && sender {
			err = e.checkAtomics(ctx)
		}
		if err != nil {
			return rows, err
		}
		if i == len(sizes)-1 {
			// TCP_INFO now: once the peer has our last report it may close.
			early = e.qpStats()
		}
		peer, err := x.Report(ctx, mine)
		if err != nil {
			return rows, err
		}
		if early != nil {
			mid = e.qpStats() // and again: the peer's work is done
		}
		r := pick(p, client, mine, peer)
		if p.ReportBoth && p.Bidir && r.Kind == kindBW {
			both = append(both, [2]Report{mine, peer})
		}
		if r.Kind == kindBW {
			// Until the peer's report: a receiver of Writes or a responder
			// to Reads does its work while it waits for it, not in runBW.
			cost.finish()
			cost.bytes = float64(r.Iters) * float64(r.Size) // what the table reports moved, seen from either side
		}
		if r.Kind == "" {
			continue // nothing to show: the server of perftest's read_lat
		}
		if err := pr.row(r); err != nil {
			return rows, &localError{err}
		}
		rows = append(rows, r)
	}
	pr.printf("%s", resultLine)
	if len(both) > 0 && pr.full() {
		if err := pr.reportBoth(both); err != nil {
			return rows, &localError{err}
		}
	}
	// The FPDU counters once the connections have ended: the receiver of
	// Writes and the responder to Reads count until the peer's FIN, for
	// their work goes on after their own loop has returned.
	e.close()
	if early != nil {
		for _, l := range e.tcpStats(early, mid, e.qpStats()) {
			pr.printf("%s\n", l)
		}
	}
	if p.Test.BW() && cost.bytes > 0 {
		pr.printf("%s\n", cpuLine(cost, p.Loopback))
		if client {
			lastCPU.Store(&cost) // the demo compares the clients: the sender of its write_bw and tcp_bw
		}
	}
	if over != nil {
		over()
	}
	return rows, nil
}

// latFirst says whether this side sends first in a ping-pong: the client,
// but in perftest's write_lat the server.
func latFirst(p *Params, client bool) bool {
	if p.Perftest && p.Test == WriteLat {
		return !client
	}
	return client
}

// run is a side's part of a TCP test. Each step waits on the peer for
// --exchange-timeout at most, and the measurement while nothing moves on
// the connections.
func (s *tcpSide) run(ctx context.Context, pr *printer, client bool) ([]Report, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	rows, err := s.runSizes(ctx, cancel, pr, client)
	return rows, causeOf(ctx, err)
}

func (s *tcpSide) runSizes(ctx context.Context, cancel context.CancelCauseFunc, pr *printer, client bool) ([]Report, error) {
	p := s.p
	pr.printf("%s", resultLine)
	pr.printf("                    TCP %sTest\n", map[bool]string{true: "BW ", false: "Latency "}[p.Test.BW()])
	if p.Test.BW() && p.Bidir {
		pr.printf("                    (bidirectional)\n")
	}
	pr.printf(" Number of conns : %d\t\tTransport type : TCP\n", p.QPs)
	if p.Floor {
		what := "CRC32c of each FPDU payload (EMSS - 20 octets) on both sides, the receiver's copy"
		if !p.floorCRC() {
			what = "the receiver's copy of each FPDU payload (EMSS - 20 octets), no CRC"
		}
		pr.printf(" MPA floor       : %s\n", what)
	}
	pr.printf(" Control         : %v -> %v\n", s.ctl.conn.LocalAddr(), s.ctl.conn.RemoteAddr())
	pr.printf("%s", resultLine)
	if p.Duration > 0 && p.Test.BW() && p.isSet("duration") {
		pr.printf(" WARNING: BW peak won't be measured in this run.\n")
	}
	pr.header()
	sender, receiver := roles(p, client)
	var rows []Report
	var stats []string
	var cost cpuCost // the last size's, for the CPU line
	for _, size := range p.Sizes() {
		conns, err := s.connect(ctx)
		if err != nil {
			return rows, err
		}
		watched := []tcpInfoer{tcpConn{s.ctl.conn}}
		for _, c := range conns {
			watched = append(watched, tcpConn{c})
		}
		stopWatch := watchProgress(ctx, cancel, p.exchangeTimeout(), "the test", watched)
		mine, err := func() (Report, error) {
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			if err := swap(ctx, s.ctl, msgSync, struct{}{}, nil); err != nil {
				return Report{}, err
			}
			prog := startProgress(pr, size)
			defer prog.done()
			var r Report
			var err error
			if p.Test.BW() {
				r, cost, err = measureCPU(p, func() (Report, error) { return s.runTCPBW(ctx, conns, size, sender, receiver, prog) })
			} else {
				r, err = s.runTCPLat(ctx, conns, size, client, prog)
			}
			stats = s.tcpStats(conns)
			return r, err
		}()
		if err != nil {
			stopWatch()
			return rows, err
		}
		var peer Report
		err = swap(ctx, s.ctl, msgReport, mine, &peer)
		stopWatch()
		if err != nil {
			return rows, err
		}
		r := pick(p, client, mine, peer)
		if r.Kind == kindBW {
			cost.bytes = float64(r.Iters) * float64(r.Size) // what the table reports moved, seen from either side
		}
		if err := pr.row(r); err != nil {
			return rows, &localError{err}
		}
		rows = append(rows, r)
	}
	pr.printf("%s", resultLine)
	for _, l := range stats {
		pr.printf("%s\n", l)
	}
	if p.Test.BW() && cost.bytes > 0 {
		pr.printf("%s\n", cpuLine(cost, p.Loopback))
		if client {
			lastCPU.Store(&cost) // the demo compares the clients: the sender of its write_bw and tcp_bw
		}
	}
	return rows, nil
}

// Demo is iwarp-perf with no test: RDMA Write bandwidth over loopback with
// the banner and table, then the same over plain TCP, and one line
// comparing them.
func Demo(ctx context.Context, p *Params, w io.Writer) error {
	rows, err := Run(ctx, p, w)
	if err != nil {
		return err
	}
	if p.Output != OutputFull {
		return nil
	}
	rdmaCPU := lastCPU.Load()
	tp := *p
	tp.Test, tp.JSON = TCPBW, false
	trows, err := Run(ctx, &tp, io.Discard)
	if err != nil {
		return fmt.Errorf("raw TCP: %w", err)
	}
	pr := &printer{w: w, p: p}
	unit := "MiB/s"
	if p.Gbits {
		unit = "Gb/s"
	}
	rb, tb := pr.bwUnit(rows[0].BWAvg), pr.bwUnit(trows[0].BWAvg)
	ratio := 0.0
	if tb > 0 {
		ratio = rb / tb
	}
	fmt.Fprintf(w, "RDMA Write %s: %.1f %s = %.2f × raw TCP (%.1f %s)\n", sizeName(p.Size), rb, unit, ratio, tb, unit)
	if rc, tc := rdmaCPU, lastCPU.Load(); rc != nil && tc != nil && rc.ratioOK() && tc.ratioOK() && tc.perGiB() > 0 {
		fmt.Fprintf(w, "CPU per GiB, both sides: %.3f s = %.2f × raw TCP (%.3f s); user %.3f s against %.3f, sys %.3f s against %.3f\n",
			rc.perGiB(), rc.perGiB()/tc.perGiB(), tc.perGiB(), rc.perGiBOf(rc.cpu.user), tc.perGiBOf(tc.cpu.user), rc.perGiBOf(rc.cpu.sys), tc.perGiBOf(tc.cpu.sys))
	}
	return nil
}

// sizeName writes n as "64 KiB", "2 MiB" or "100 B".
func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
