package perf

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/goiwarp/iwarp/mpa"
)

// errHelp is returned by Parse for -h: print the usage and exit 0;
// errVersion for -V: print the version and exit 0.
var (
	errHelp    = errors.New("help requested")
	errVersion = errors.New("version requested")
)

// UsageError is a bad command line: exit status 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, a ...any) error { return &UsageError{fmt.Sprintf(format, a...)} }

// Parse reads the command line: [TEST] [flags] [SERVER], flags and
// arguments in any order as getopt permutes them. With no TEST it returns
// Params for the demo (Test is WriteBW and demo is true).
func Parse(args []string) (p *Params, demo bool, err error) {
	p = &Params{Inline: -1, set: map[string]bool{}}
	fs := flag.NewFlagSet("iwarp-perf", flag.ContinueOnError)
	fs.SetOutput(io.Discard)

	// Each flag has perftest's short and long name; set records the long.
	intVar := func(dst *int, short, long string, def int) {
		*dst = def
		v := (*intValue)(dst)
		if short != "" {
			fs.Var(v, short, "")
		}
		fs.Var(v, long, "")
	}
	boolVar := func(dst *bool, short, long string) {
		v := (*boolValue)(dst)
		if short != "" {
			fs.Var(v, short, "")
		}
		fs.Var(v, long, "")
	}
	var dur int
	p.Size = DefSizeBW
	fs.Var((*sizeValue)(&p.Size), "s", "")
	fs.Var((*sizeValue)(&p.Size), "size", "")
	boolVar(&p.All, "a", "all")
	intVar(&p.Iters, "n", "iters", DefIters)
	intVar(&dur, "D", "duration", 0)
	intVar(&p.Margin, "f", "margin", -1)
	intVar(&p.QPs, "q", "qp", 1)
	intVar(&p.TxDepth, "t", "tx-depth", DefTxBW)
	intVar(&p.RxDepth, "r", "rx-depth", DefRxSend)
	intVar(&p.Port, "p", "port", DefPort)
	boolVar(&p.Bidir, "b", "bidirectional")
	boolVar(&p.ReportBoth, "", "report-both")
	intVar(&p.LatencyGap, "", "latency_gap", 0)
	intVar(&p.Inline, "I", "inline_size", -1)
	intVar(&p.Outs, "o", "outs", DefOuts)
	intVar(&p.CQMod, "Q", "cq-mod", DefCQMod)
	intVar(&p.CQWake, "", "cq-wake", 0)
	boolVar(&p.Gbits, "", "report_gbits")
	boolVar(&p.JSON, "", "out_json")
	fs.StringVar(&p.JSONFile, "out_json_file", "", "")
	var output, crc, markers, p2p, atomicType string
	fs.StringVar(&atomicType, "A", "FETCH_AND_ADD", "")
	fs.StringVar(&atomicType, "atomic_type", "FETCH_AND_ADD", "")
	fs.StringVar(&output, "output", "", "")
	var rev int
	intVar(&rev, "", "mpa-rev", 2)
	fs.StringVar(&crc, "crc", "on", "")
	fs.StringVar(&markers, "markers", "none", "")
	fs.StringVar(&p2p, "p2p", "none", "")
	intVar(&p.MaxFPDU, "", "fpdu", 0)
	boolVar(&p.SegmentPerFPDU, "", "fpdu-per-segment")
	fs.StringVar(&p.Profile, "profile", "", "")
	boolVar(&p.Loopback, "", "loopback")
	boolVar(&p.UseSRQ, "", "use-srq")
	fs.Var((*boolValue)(&p.UseSRQ), "use_srq", "") // iwarp-perf's first spelling
	boolVar(&p.Floor, "", "floor")
	boolVar(&p.WarmUp, "", "perform_warm_up")
	fs.StringVar(&p.SourceIP, "bind_source_ip", "", "")
	boolVar(&p.IPv6, "", "ipv6-addr")
	boolVar(&p.Perftest, "R", "rdma_cm")
	var commCM bool
	boolVar(&commCM, "z", "comm_rdma_cm")
	var fpduDelay int
	intVar(&fpduDelay, "", "fpdu-delay", 0)
	var latWait string
	fs.StringVar(&latWait, "lat-wait", "handler", "")
	var exchangeTimeout, maxRegion string
	fs.StringVar(&exchangeTimeout, "exchange-timeout", "", "")
	fs.StringVar(&maxRegion, "max-region", "", "")
	intVar(&p.Runs, "", "runs", 1)
	boolVar(&p.Events, "e", "events")
	intVar(&p.PostList, "l", "post_list", 1)
	boolVar(&p.Infinite, "", "run_infinitely")
	boolVar(&p.Histogram, "H", "report-histogram")
	fs.Var((*boolValue)(&p.Histogram), "report-histogrm", "") // perftest's own spelling
	boolVar(&p.Unsorted, "U", "report-unsorted")
	fs.Float64Var(&p.LimitBW, "w", 0, "")
	fs.Float64Var(&p.LimitBW, "limit_bw", 0, "")
	fs.Float64Var(&p.LimitMsgRate, "y", 0, "")
	fs.Float64Var(&p.LimitMsgRate, "limit_msgrate", 0, "")
	version := false
	boolVar(&version, "V", "version")
	help := false
	boolVar(&help, "h", "help")
	boolVar(&p.NoPeak, "N", "noPeak")
	// perftest's device, port, GID index and MTU and its CPU frequency
	// check name nothing here: taken, so that perftest command lines run.
	var ignored string
	for _, name := range []string{"d", "ib-dev", "i", "ib-port", "x", "gid-index", "m", "mtu"} {
		fs.StringVar(&ignored, name, "", "")
	}
	// And the InfiniBand fabric's service level, traffic class, hop
	// limit, QP timeout and retry count, which TCP has its own of.
	for _, name := range []string{"S", "sl", "T", "tos", "tclass", "hop_limit", "u", "qp-timeout", "retry_count", "flow_label"} {
		fs.StringVar(&ignored, name, "", "")
	}
	var ignoredB bool
	boolVar(&ignoredB, "F", "CPU-freq")
	boolVar(&ignoredB, "", "ipv6") // an IPv6 GID: the fabric's addressing
	// perftest prints CPU use with --cpu_util; iwarp-perf always does.
	boolVar(&ignoredB, "", "cpu_util")
	// perftest's --mr_per_qp registers a region per QP; iwarp-perf always does.
	boolVar(&ignoredB, "", "mr_per_qp")
	var conn string
	fs.StringVar(&conn, "c", "RC", "")
	fs.StringVar(&conn, "connection", "RC", "")

	var pos []string
	rest := splitShort(fs, args)
	for {
		if err := fs.Parse(rest); err != nil {
			return nil, false, usagef("%v", err)
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		if rest[0] == "--" {
			pos = append(pos, rest[1:]...)
			break
		}
		pos = append(pos, rest[0])
		rest = rest[1:]
	}
	if help {
		return nil, false, errHelp
	}
	if version {
		return nil, false, errVersion
	}
	short := map[string]string{"A": "atomic_type", "s": "size", "a": "all", "n": "iters", "D": "duration", "f": "margin", "q": "qp", "t": "tx-depth",
		"r": "rx-depth", "p": "port", "b": "bidirectional", "I": "inline_size", "o": "outs", "Q": "cq-mod",
		"R": "rdma_cm", "z": "comm_rdma_cm", "e": "events", "l": "post_list", "H": "report-histogram", "report-histogrm": "report-histogram",
		"U": "report-unsorted", "use_srq": "use-srq"}
	fs.Visit(func(f *flag.Flag) {
		name := f.Name
		if l, ok := short[name]; ok {
			name = l
		}
		p.set[name] = true
	})
	// perftest's -z exchanges the parameters over rdma_cm and, without
	// -R, connects the test QPs by hand (ibv_modify_qp with the peer's QPN
	// and PSN), which iWARP has no way to do: an iWARP QP connects only
	// through rdma_cm. -R implies -z in perftest, so -R -z is -R.
	if commCM && !p.Perftest {
		return nil, false, usagef("-z (--comm_rdma_cm) without -R connects the test's QPs without rdma_cm, which iWARP cannot: use -R, whose exchange is over rdma_cm already")
	}
	if p.isSet("out_json_file") {
		p.JSON = true
	}
	if p.SourceIP != "" {
		// A literal, as tcpx.Config.LocalAddr takes: the source is an
		// interface of this host, not a name to resolve.
		if _, err := netip.ParseAddr(p.SourceIP); err != nil {
			return nil, false, usagef("invalid --bind_source_ip=%s: an IP address of this host", p.SourceIP)
		}
	}
	if rev != 1 && rev != 2 {
		return nil, false, usagef("--mpa-rev %d: 1 or 2", rev)
	}
	p.MPARev = uint8(rev)
	if fpduDelay < 0 {
		return nil, false, usagef("--fpdu-delay %d: not negative", fpduDelay)
	}
	p.FPDUDelay = time.Duration(fpduDelay) * time.Millisecond
	if exchangeTimeout != "" {
		d, err := parseSeconds(exchangeTimeout)
		if err != nil || d <= 0 {
			return nil, false, usagef("invalid --exchange-timeout=%s: a positive number of seconds or a duration such as 500ms", exchangeTimeout)
		}
		p.ExchangeTimeout = d
	}
	if maxRegion != "" {
		n, err := parseSize(maxRegion)
		if err != nil || n <= 0 {
			return nil, false, usagef("invalid --max-region=%s: a positive size such as 64MiB or 1GiB", maxRegion)
		}
		p.MaxRegion = n
	}
	if p.Runs < 0 {
		return nil, false, usagef("--runs %d: not negative (0: serve until interrupted)", p.Runs)
	}
	switch latWait {
	case "handler":
	case "poll":
		p.LatPoll = true
	default:
		return nil, false, usagef("invalid --lat-wait=%s: use handler or poll", latWait)
	}
	if !strings.EqualFold(conn, "RC") {
		return nil, false, usagef("-c %s: iWARP has RC only", conn)
	}
	if int64(dur) > math.MaxInt64/int64(time.Second) {
		return nil, false, usagef("-D %d: too long", dur)
	}
	p.Duration = time.Duration(dur) * time.Second
	switch output {
	case "":
	case "bandwidth":
		p.Output = OutputBandwidth
	case "message_rate":
		p.Output = OutputMsgRate
	case "latency":
		p.Output = OutputLatency
	default:
		return nil, false, usagef("invalid --output=%s: use bandwidth, message_rate or latency", output)
	}
	switch crc {
	case "on":
		p.CRC = mpa.CRCOn
	case "off":
		p.CRC = mpa.CRCOff
	case "required":
		p.CRC = mpa.CRCRequired
	case "strict":
		p.CRC = mpa.CRCStrict
	default:
		return nil, false, usagef("invalid --crc=%s: use on, off, required or strict", crc)
	}
	switch markers {
	case "none":
		p.Markers = MarkersNone
	case "tx":
		p.Markers = MarkersTx
	case "rx":
		p.Markers = MarkersRx
	case "both":
		p.Markers = MarkersBoth
	default:
		return nil, false, usagef("invalid --markers=%s: use none, tx, rx or both", markers)
	}
	switch p2p {
	case "none":
		p.P2P = mpa.RTRNone
	case "send":
		p.P2P = mpa.RTRSend
	case "write":
		p.P2P = mpa.RTRWrite
	case "read":
		p.P2P = mpa.RTRRead
	default:
		return nil, false, usagef("invalid --p2p=%s: use none, send, write or read", p2p)
	}
	switch atomicType {
	case "FETCH_AND_ADD":
		p.Atomic = FetchAndAdd
	case "CMP_AND_SWAP":
		p.Atomic = CmpAndSwap
	default:
		return nil, false, usagef("invalid atomic type %q: choose from {CMP_AND_SWAP,FETCH_AND_ADD}", atomicType)
	}
	switch p.Profile {
	case "", "cpu", "mem", "mutex", "block", "trace":
	default:
		return nil, false, usagef("invalid --profile=%s: use cpu, mem, mutex, block or trace", p.Profile)
	}

	if len(pos) == 0 {
		// The demo: RDMA Write bandwidth over loopback, then raw TCP.
		demo = true
		p.Test = WriteBW
		p.Loopback = true
		if !p.isSet("duration") && !p.isSet("iters") {
			p.Duration = 3 * time.Second
		}
		if p.All {
			return nil, false, usagef("the demo runs one size: give a TEST to use -a")
		}
		if p.LimitBW != 0 || p.LimitMsgRate != 0 {
			return nil, false, usagef("the demo compares with TCP: give a TEST to use -w or -y")
		}
		if err := p.finish(); err != nil {
			return nil, false, usagef("%v", err)
		}
		return p, true, nil
	}
	t, ok := ParseTest(pos[0])
	if !ok {
		return nil, false, usagef("unknown test %q: use one of %s", pos[0], strings.Join(testNames[:], ", "))
	}
	p.Test = t
	switch len(pos) {
	case 1:
	case 2:
		p.Server = pos[1]
	default:
		return nil, false, usagef("too many arguments: %s", strings.Join(pos[2:], " "))
	}
	if err := p.finish(); err != nil {
		return nil, false, usagef("%v", err)
	}
	return p, false, nil
}

// intValue and boolValue let two flag names share one variable.
type intValue int

func (v *intValue) String() string { return strconv.Itoa(int(*v)) }
func (v *intValue) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, strconv.IntSize) // an int's range: 32 bits on 32-bit ports
	if err != nil {
		return fmt.Errorf("%q is not a number of this range", s)
	}
	*v = intValue(n)
	return nil
}

// sizeValue is a message size, with perftest's K and M suffixes (and G,
// KiB ...: parseSize).
type sizeValue int

func (v *sizeValue) String() string { return strconv.Itoa(int(*v)) }
func (v *sizeValue) Set(s string) error {
	n, err := parseSize(s)
	if err != nil || n > math.MaxInt {
		return fmt.Errorf("%q is not a size (a number, or with K, M or G)", s)
	}
	*v = sizeValue(n)
	return nil
}

// splitShort rewrites getopt's short forms, which Go's flag package does
// not take, as perftest command lines use them: "-n100" as "-n 100" and
// "-ab" as "-a -b". An argument that names a flag as it is ("-size") is
// left alone.
func splitShort(fs *flag.FlagSet, args []string) []string {
	isBool := func(f *flag.Flag) bool {
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		return ok && b.IsBoolFlag()
	}
	var out []string
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) < 3 || a[0] != '-' || a[1] == '-' || strings.Contains(a, "=") || fs.Lookup(a[1:]) != nil {
			out = append(out, a)
			continue
		}
		f := fs.Lookup(a[1:2])
		switch {
		case f == nil:
			out = append(out, a) // flag reports it
		case !isBool(f):
			out = append(out, a[:2], a[2:])
		default:
			all := true
			for _, c := range a[1:] {
				if g := fs.Lookup(string(c)); g == nil || !isBool(g) {
					all = false
				}
			}
			if !all {
				out = append(out, a)
				continue
			}
			for _, c := range a[1:] {
				out = append(out, "-"+string(c))
			}
		}
	}
	return out
}

// parseSeconds reads a duration: a number of seconds ("15", "0.5") or Go's
// form ("500ms", "2m").
func parseSeconds(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f > float64(math.MaxInt64/int64(time.Second)) {
			return 0, fmt.Errorf("%s seconds is too long", s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	return time.ParseDuration(s)
}

// parseSize reads a size in octets: a number, optionally with a binary
// unit (K, KiB, M, MiB, G, GiB; KB, MB and GB count as binary too).
func parseSize(s string) (int64, error) {
	num := s[:len(s)-len(strings.TrimLeft(s, "0123456789"))]
	unit := strings.ToUpper(strings.TrimSpace(s[len(num):]))
	shift, ok := map[string]uint{"": 0, "B": 0, "K": 10, "KB": 10, "KIB": 10, "M": 20, "MB": 20, "MIB": 20,
		"G": 30, "GB": 30, "GIB": 30}[unit]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q", unit)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, err
	}
	if n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("%s is too large", s)
	}
	return n << shift, nil
}

type boolValue bool

func (v *boolValue) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }
func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*v = boolValue(b)
	return nil
}

// Usage is the help text.
const Usage = `Usage: iwarp-perf [TEST] [options] [SERVER]

perftest-style benchmarks for the goiwarp iWARP stack. Without SERVER the
test listens and serves clients one at a time until one run has completed
(--runs); with SERVER it connects to one; --loopback runs both sides in this
process over 127.0.0.1. With no TEST it
runs the demo: RDMA Write bandwidth at 64 KiB over loopback for 3 seconds,
then the same over plain TCP sockets, and compares them. Either side may be
Linux perftest's ib_TEST -R (see "With Linux perftest" below).

Tests: write_bw read_bw send_bw write_lat read_lat send_lat tcp_bw tcp_lat
       atomic_bw atomic_lat (RFC 7306 atomics: 8 octets; both sides enable RFC 7306)

Options (perftest's meanings; SYMMETRIC ones must match on both sides):
  -s, --size=N          message size (default 65536 for BW, 2 for LAT) (SYMMETRIC)
                        (K, M: KiB, MiB, as perftest)
  -a, --all             run sizes 2 .. 2^23 (SYMMETRIC)
  -n, --iters=N         iterations (default 5000 write_bw, 1000 others) (SYMMETRIC)
  -D, --duration=SEC    run for SEC seconds instead of -n (SYMMETRIC)
  -f, --margin=SEC      with -D, measure only after SEC seconds and until SEC before the
                        end (default a quarter of -D) (SYMMETRIC)
  -q, --qp=N            number of QPs (connections for tcp_*) (SYMMETRIC)
  -t, --tx-depth=N      send queue depth (default 128 BW, 1 LAT)
  -r, --rx-depth=N      receive queue depth for send tests (default 512) (SYMMETRIC)
  -p, --port=N          TCP port to listen on or connect to (default 18515)
  -b, --bidirectional   measure both directions at once (SYMMETRIC)
      --report-both     with -b, BW tests: also a table of this side's and one of the peer's results
  -I, --inline_size=N   largest message sent inline (default 220 write_lat, 236 send_lat, 0 otherwise)
  -A, --atomic_type=T   CMP_AND_SWAP or FETCH_AND_ADD (default), atomic tests (SYMMETRIC)
  -o, --outs=N          outstanding RDMA Reads and atomics: the QP's IRD and ORD (default 128 for
                        read and atomic tests, as perftest: the device's maximum; 16 otherwise, and 1
                        with -R)
  -Q, --cq-mod=N        signal every N-th send WR (default 100; 1 above 8 KiB unless given)
      --cq-wake=N       bandwidth tests: wake the test's loop once N completions have queued,
                        or when its QPs' receive side runs out of data (CQ moderation,
                        verbs.CQ.SetModeration; default 16, at most tx-depth/8; 1: every one)
  -N, --noPeak          no BW peak (it is not computed above 20000 iterations anyway)
  -l, --post_list=N     BW tests: post send WRs in lists of N, one PostSend each (-Q
                        defaults to N; -n a multiple of N)
      --run_infinitely  BW tests: run until the client is interrupted, a row every -D
                        seconds (default 5) (SYMMETRIC; with -R: write_bw and read_bw)
  -e, --events          wait for completions by blocking on the CQ, never spinning on it
                        (not in write_lat, which waits on memory)
  -H, --report-histogram  latency tests: also print every sample, sorted
      --latency_gap=US  latency tests: spin US microseconds before each post (as perftest,
                        the latency reported includes the gaps)
  -U, --report-unsorted   latency tests: also print every sample in order
  -V, --version         print the version
  -w, --limit_bw=F, -y, --limit_msgrate=F  BW tests: exit 1 ("Error: BW result is below bw
                        limit") unless a row's average reaches F (MiB/s, or Gb/s with
                        --report_gbits; Mpps), for scripts
      --report_gbits    report Gb/s instead of MiB/s
      --output=WHAT     print only one number: bandwidth, message_rate or latency
      --out_json        also write the results as JSON to perftest_out.json
      --out_json_file=F write the JSON to F (implies --out_json)
      --loopback        run server and client in this process over 127.0.0.1
      --ipv6-addr       reach the server by its IPv6 address (--loopback: over ::1)
      --perform_warm_up write/read/atomic BW: tx-depth WRs on each QP, completed, before
                        the clock starts (other tests: ignored, as perftest)
      --bind_source_ip=IP  client: connect from this address of ours
      --use-srq         send tests: the receives of all QPs come from one shared receive queue
                        (also --use_srq)
      --floor           tcp_bw: each side also does the work per octet that MPA over a
                        socket cannot avoid (the sender the CRC32c of every FPDU's
                        payload, the receiver the copy of each out of its read buffer,
                        with its CRC32c; the copy alone with --crc=off): the least
                        user time a user-space iWARP stack can spend over TCP
  -R, --rdma_cm         speak perftest's -R exchange (wire-compatible with ib_TEST -R)
  -z, --comm_rdma_cm    with -R, which implies it: taken (perftest's exchange over
                        rdma_cm); without -R refused, as iWARP QPs connect only
                        through rdma_cm
  -d, -i, -x, -m, -F    perftest's device, port, GID index, MTU and CPU frequency check:
                        taken and ignored (the stack runs over TCP, its FPDUs sized by
                        TCP's MSS: see --fpdu); -c takes RC only; so are the fabric's
                        -S, -T, -u, --tclass, --hop_limit, --retry_count, --flow_label, --ipv6,
                        --cpu_util (the CPU line is always printed) and --mr_per_qp
                        (each QP always has its own region)
  Short options may be joined as getopt's: -n100, -ab.
      --lat-wait=handler|poll  latency tests: take each step on the QP's receive
                        goroutine as data lands (default), or poll memory and the CQ
                        from the test's own goroutine, as perftest does
iWARP options (both sides alike):
      --mpa-rev=1|2     MPA revision (default 2)
      --crc=on|off|required|strict   MPA CRC policy (default on; off with -R)
      --markers=none|tx|rx|both      MPA markers; tx is client to server (default none)
      --p2p=none|send|write|read     peer-to-peer mode with that RTR message (default none)
      --fpdu=N          cap the FPDU size at N octets (default: the TCP segment)
      --fpdu-per-segment  hand TCP one FPDU per write, so that each segment starts an
                        FPDU (for analyzers that assume it: Wireshark with markers)
      --fpdu-delay=MS   when connecting, hold our first FPDU back MS ms after the MPA
                        Reply (default 0; 200 with -R): siw as responder loses one
                        that comes too soon
Serving (see "A server and its clients" below):
      --runs=N          server: exit after N completed runs (default 1, as perftest; 0: serve
                        until interrupted)
      --exchange-timeout=T  the longest wait on the peer (default 15s; seconds or 500ms, 2m):
                        each message and QP of the exchange, and the test while nothing
                        moves on its connections; also shortens the MPA start-up's timeouts
      --max-region=SIZE most memory registered for the test's QPs, whatever the peer asks
                        (default 256MiB; K, M, G: KiB, MiB, GiB)
Diagnostics:
      --profile=cpu|mem|mutex|block|trace   write cpu.pprof, mem.pprof, ... in the working
                        directory (github.com/pkg/profile)
  -h, --help            this text

With Linux perftest (5.70 to 6.27, and 6.29 untested; tested: 6.06 on siw):
  iwarp-perf TEST -R [options] HOST   runs against "ib_TEST -R [options]" on HOST
  iwarp-perf TEST [options]           serves "ib_TEST -R [options] OURHOST" as well
                                      as iwarp-perf clients: a server tells them apart
                                      by their MPA Request
  A client without -R that finds a perftest server goes on with perftest's
  exchange too. perftest checks no parameter: give both sides the same -s, -n
  and -q (and -r for send_bw), as between two perftests. With perftest's
  exchange, send_bw uses perftest's credits (the receiver RDMA Writes its
  receive count to the sender), write_lat's server writes first, the
  write_bw/read_bw server shows the client's numbers, a send_bw server its
  own, and read_lat's server none. -a and -b work as in perftest (with -a a
  write_bw/read_bw server shows the last size); -D only for write_bw/read_bw.

A server and its clients:
  A server runs one test at a time. Whoever reaches its port can connect:
  iWARP has no authentication. A client that fails is dropped, with the
  reason on stderr ("iwarp-perf: client ADDR: ...; dropped"), and the server
  waits for the next: one that sends nothing for --exchange-timeout, closes
  or sends what the exchange does not expect, asks for other parameters
  (rejected with the differences), or whose perftest page size would make
  the regions larger than --max-region. A client that comes while another
  is served waits a second at most, in case that test ends, and is then
  rejected as busy (tcp_* clients wait, up to their --exchange-timeout).
  The server exits 0 once --runs runs have completed, and 1 if interrupted
  first.
`
