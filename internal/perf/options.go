package perf

import (
	"flag"
	"math"
	"net/netip"
	"strings"
	"time"

	"github.com/goiwarp/iwarp/mpa"
)

// An option is one command-line flag: perftest's short name ("" if it has
// none), its long name, which Params.set records whichever name was given,
// and the value it sets, with its default. Adding a flag is adding an entry
// here (and its line in Usage); a flag whose value needs converting or
// checking against the others adds a step to cmdlineSteps or a rule to
// rules.
type option struct {
	short, long string
	value       func(c *cmdline) flag.Value
	aliases     []string // other spellings taken, recorded as long
}

// cmdline is a command line being parsed: the Params it fills, and the raw
// values of flags that Params holds in another form (cmdlineSteps convert
// them).
type cmdline struct {
	p *Params

	seconds, mpaRev, fpduDelayMS                                       int
	output, crc, markers, p2p, atomicType, latWait, conn, exchangeTime string
	maxRegion                                                          string
	commCM, help, version                                              bool

	ignored  string // perftest's flags that name nothing over TCP
	ignoredB bool
}

// options are iwarp-perf's flags, grouped by the tests they serve.
var options = []option{
	// Every test: what to run, how long, on how many QPs.
	{"s", "size", func(c *cmdline) flag.Value { return sizeVal(&c.p.Size, DefSizeBW) }, nil},
	{"a", "all", func(c *cmdline) flag.Value { return (*boolValue)(&c.p.All) }, nil},
	{"n", "iters", func(c *cmdline) flag.Value { return intVal(&c.p.Iters, DefIters) }, nil},
	{"D", "duration", func(c *cmdline) flag.Value { return intVal(&c.seconds, 0) }, nil},
	{"f", "margin", func(c *cmdline) flag.Value { return intVal(&c.p.Margin, -1) }, nil},
	{"q", "qp", func(c *cmdline) flag.Value { return intVal(&c.p.QPs, 1) }, nil},
	{"t", "tx-depth", func(c *cmdline) flag.Value { return intVal(&c.p.TxDepth, DefTxBW) }, nil},
	{"p", "port", func(c *cmdline) flag.Value { return intVal(&c.p.Port, DefPort) }, nil},
	{"I", "inline_size", func(c *cmdline) flag.Value { return intVal(&c.p.Inline, -1) }, nil},
	{"o", "outs", func(c *cmdline) flag.Value { return intVal(&c.p.Outs, DefOuts) }, nil},
	{"Q", "cq-mod", func(c *cmdline) flag.Value { return intVal(&c.p.CQMod, DefCQMod) }, nil},
	{"e", "events", func(c *cmdline) flag.Value { return (*boolValue)(&c.p.Events) }, nil},
	{"", "perform_warm_up", func(c *cmdline) flag.Value { return (*boolValue)(&c.p.WarmUp) }, nil},

	// Reporting.
	{"", "report_gbits", func(c *cmdline) flag.Value { return (*boolValue)(&c.p.Gbits) }, nil},
	{"", "out_json", func(c *cmdline) flag.Value { return (*boolValue)(&c.p.JSON) }, nil},
	{"", "out_json_file", func(c *cmdline) flag.Value { return (*stringValue)(&c.p.JSONFile) }, nil},
	{"", "output", func(c *cmdline) flag.Value { return (*stringValue)(&c.output) }, nil},

	// Bandwidth tests.
	{"b", "bidirectional", func(c *cmdline) flag.Value { return (*boolValue)(&c.p.Bidir) }, nil},
	{"", "report-both", func(c *cmdline) flag.Value { return (*boolValue)(&c.p.ReportBoth) }, nil},
	{"", "cq-wake", func(c *cmdline) flag.Value { return intVal(&c.p.CQWake, 0) }, nil},
	{"N", "noPeak", func(c *cmdline) flag.Value { return (*boolValue)(&c.p.NoPeak) }, nil},
	{"l", "post_list", func(c *cmdline) flag.Value { return intVal(&c.p.PostList, 1) }, nil},
	{"", "run_infinitely", func(c *cmdline) flag.Value { return (*boolValue)(&c.p.Infinite) }, nil},
	{"w", "limit_bw", func(c *cmdline) flag.Value { return (*floatValue)(&c.p.LimitBW) }, nil},
	{"y", "limit_msgrate", func(c *cmdline) flag.Value { return (*floatValue)(&c.p.LimitMsgRate) }, nil},

	// Latency tests.
	{"", "latency_gap", func(c *cmdline) flag.Value { return intVal(&c.p.LatencyGap, 0) }, nil},
	{"H", "report-histogram", func(c *cmdline) flag.Value { return (*boolValue)(&c.p.Histogram) },
		[]string{"report-histogrm"}}, // perftest's own spelling
	{"U", "report-unsorted", func(c *cmdline) flag.Value { return (*boolValue)(&c.p.Unsorted) }, nil},
	{"", "lat-wait", func(c *cmdline) flag.Value { return strVal(&c.latWait, "handler") }, nil},

	// Send tests.
	{"r", "rx-depth", func(c *cmdline) flag.Value { return intVal(&c.p.RxDepth, DefRxSend) }, nil},
	{"", "use-srq", func(c *cmdline) flag.Value { return (*boolValue)(&c.p.UseSRQ) },
		[]string{"use_srq"}}, // iwarp-perf's first spelling

	// Atomic tests.
	{"A", "atomic_type", func(c *cmdline) flag.Value { return strVal(&c.atomicType, "FETCH_AND_ADD") }, nil},

	// tcp_bw.
	{"", "floor", func(c *cmdline) flag.Value { return (*boolValue)(&c.p.Floor) }, nil},

	// iWARP: MPA and the FPDUs.
	{"", "mpa-rev", func(c *cmdline) flag.Value { return intVal(&c.mpaRev, 2) }, nil},
	{"", "crc", func(c *cmdline) flag.Value { return strVal(&c.crc, "on") }, nil},
	{"", "markers", func(c *cmdline) flag.Value { return strVal(&c.markers, "none") }, nil},
	{"", "p2p", func(c *cmdline) flag.Value { return strVal(&c.p2p, "none") }, nil},
	{"", "fpdu", func(c *cmdline) flag.Value { return intVal(&c.p.MaxFPDU, 0) }, nil},
	{"", "fpdu-per-segment", func(c *cmdline) flag.Value { return (*boolValue)(&c.p.SegmentPerFPDU) }, nil},
	{"", "fpdu-delay", func(c *cmdline) flag.Value { return intVal(&c.fpduDelayMS, 0) }, nil},

	// TLS (tls.go).
	{"", "tls", func(c *cmdline) flag.Value { return (*boolValue)(&c.p.TLS.SelfSigned) }, nil},
	{"", "tls-cert", func(c *cmdline) flag.Value { return (*stringValue)(&c.p.TLS.Cert) }, nil},
	{"", "tls-key", func(c *cmdline) flag.Value { return (*stringValue)(&c.p.TLS.Key) }, nil},
	{"", "tls-ca", func(c *cmdline) flag.Value { return (*stringValue)(&c.p.TLS.CA) }, nil},

	// TCP under every connection (transport.go).
	{"", "cc", func(c *cmdline) flag.Value { return (*stringValue)(&c.p.Transport.CC) }, nil},
	{"", "mptcp", func(c *cmdline) flag.Value { return (*boolValue)(&c.p.Transport.MPTCP) }, nil},
	{"", "sockbuf", func(c *cmdline) flag.Value { return sizeVal(&c.p.Transport.SockBuf, 0) }, nil},

	// Where the sides meet, and perftest's exchange.
	{"", "loopback", func(c *cmdline) flag.Value { return (*boolValue)(&c.p.Loopback) }, nil},
	{"", "ipv6-addr", func(c *cmdline) flag.Value { return (*boolValue)(&c.p.IPv6) }, nil},
	{"", "bind_source_ip", func(c *cmdline) flag.Value { return (*stringValue)(&c.p.SourceIP) }, nil},
	{"R", "rdma_cm", func(c *cmdline) flag.Value { return (*boolValue)(&c.p.Perftest) }, nil},
	{"z", "comm_rdma_cm", func(c *cmdline) flag.Value { return (*boolValue)(&c.commCM) }, nil},
	{"c", "connection", func(c *cmdline) flag.Value { return strVal(&c.conn, "RC") }, nil},

	// Serving.
	{"", "runs", func(c *cmdline) flag.Value { return intVal(&c.p.Runs, 1) }, nil},
	{"", "exchange-timeout", func(c *cmdline) flag.Value { return (*stringValue)(&c.exchangeTime) }, nil},
	{"", "max-region", func(c *cmdline) flag.Value { return (*stringValue)(&c.maxRegion) }, nil},

	// Diagnostics and information.
	{"", "profile", func(c *cmdline) flag.Value { return (*stringValue)(&c.p.Profile) }, nil},
	{"V", "version", func(c *cmdline) flag.Value { return (*boolValue)(&c.version) }, nil},
	{"h", "help", func(c *cmdline) flag.Value { return (*boolValue)(&c.help) }, nil},

	// perftest's device, port, GID index and MTU and its CPU frequency
	// check name nothing here: taken, so that perftest command lines run.
	{"d", "ib-dev", ignore, nil},
	{"i", "ib-port", ignore, nil},
	{"x", "gid-index", ignore, nil},
	{"m", "mtu", ignore, nil},
	{"F", "CPU-freq", ignoreBool, nil},
	// And the InfiniBand fabric's service level, traffic class, hop limit,
	// QP timeout and retry count, which TCP has its own of, and its IPv6
	// GIDs: the fabric's addressing.
	{"S", "sl", ignore, nil},
	{"T", "tos", ignore, []string{"tclass"}},
	{"", "hop_limit", ignore, nil},
	{"u", "qp-timeout", ignore, nil},
	{"", "retry_count", ignore, nil},
	{"", "flow_label", ignore, nil},
	{"", "ipv6", ignoreBool, nil},
	// perftest prints CPU use with --cpu_util and registers a region per
	// QP with --mr_per_qp; iwarp-perf always does both.
	{"", "cpu_util", ignoreBool, nil},
	{"", "mr_per_qp", ignoreBool, nil},
}

func ignore(c *cmdline) flag.Value     { return (*stringValue)(&c.ignored) }
func ignoreBool(c *cmdline) flag.Value { return (*boolValue)(&c.ignoredB) }

// cmdlineSteps turn the raw values into Params and check each flag on its
// own, in this order (the first error is the one reported); rules then
// check the flags against the test and each other.
var cmdlineSteps = []func(c *cmdline) error{
	func(c *cmdline) error {
		// perftest's -z exchanges the parameters over rdma_cm and, without
		// -R, connects the test QPs by hand (ibv_modify_qp with the peer's
		// QPN and PSN), which iWARP has no way to do: an iWARP QP connects
		// only through rdma_cm. -R implies -z in perftest, so -R -z is -R.
		if c.commCM && !c.p.Perftest {
			return usagef("-z (--comm_rdma_cm) without -R connects the test's QPs without rdma_cm, which iWARP cannot: use -R, whose exchange is over rdma_cm already")
		}
		return nil
	},
	func(c *cmdline) error {
		if c.p.isSet("out_json_file") {
			c.p.JSON = true
		}
		return nil
	},
	func(c *cmdline) error {
		// A literal, as tcpx.Config.LocalAddr takes: the source is an
		// interface of this host, not a name to resolve.
		if ip := c.p.SourceIP; ip != "" {
			if _, err := netip.ParseAddr(ip); err != nil {
				return usagef("invalid --bind_source_ip=%s: an IP address of this host", ip)
			}
		}
		return nil
	},
	func(c *cmdline) error { return checkCC(c.p.Transport.CC) },
	func(c *cmdline) error { return checkSockBuf(c.p.Transport.SockBuf) },
	func(c *cmdline) error {
		if c.mpaRev != 1 && c.mpaRev != 2 {
			return usagef("--mpa-rev %d: 1 or 2", c.mpaRev)
		}
		c.p.MPARev = uint8(c.mpaRev)
		return nil
	},
	func(c *cmdline) error {
		if c.fpduDelayMS < 0 {
			return usagef("--fpdu-delay %d: not negative", c.fpduDelayMS)
		}
		c.p.FPDUDelay = time.Duration(c.fpduDelayMS) * time.Millisecond
		return nil
	},
	func(c *cmdline) error {
		if c.exchangeTime != "" {
			d, err := parseSeconds(c.exchangeTime)
			if err != nil || d <= 0 {
				return usagef("invalid --exchange-timeout=%s: a positive number of seconds or a duration such as 500ms", c.exchangeTime)
			}
			c.p.ExchangeTimeout = d
		}
		return nil
	},
	func(c *cmdline) error {
		if c.maxRegion != "" {
			n, err := parseSize(c.maxRegion)
			if err != nil || n <= 0 {
				return usagef("invalid --max-region=%s: a positive size such as 64MiB or 1GiB", c.maxRegion)
			}
			c.p.MaxRegion = n
		}
		return nil
	},
	func(c *cmdline) error {
		if c.p.Runs < 0 {
			return usagef("--runs %d: not negative (0: serve until interrupted)", c.p.Runs)
		}
		return nil
	},
	func(c *cmdline) (err error) {
		c.p.LatPoll, err = choose("lat-wait", c.latWait, []choice[bool]{{"handler", false}, {"poll", true}})
		return err
	},
	func(c *cmdline) error {
		if !strings.EqualFold(c.conn, "RC") {
			return usagef("-c %s: iWARP has RC only", c.conn)
		}
		return nil
	},
	func(c *cmdline) error {
		if int64(c.seconds) > math.MaxInt64/int64(time.Second) {
			return usagef("-D %d: too long", c.seconds)
		}
		c.p.Duration = time.Duration(c.seconds) * time.Second
		return nil
	},
	func(c *cmdline) (err error) {
		if c.output != "" {
			c.p.Output, err = choose("output", c.output, []choice[Output]{
				{"bandwidth", OutputBandwidth}, {"message_rate", OutputMsgRate}, {"latency", OutputLatency}})
		}
		return err
	},
	func(c *cmdline) (err error) {
		c.p.CRC, err = choose("crc", c.crc, []choice[mpa.CRCPolicy]{
			{"on", mpa.CRCOn}, {"off", mpa.CRCOff}, {"required", mpa.CRCRequired}, {"strict", mpa.CRCStrict}})
		return err
	},
	func(c *cmdline) (err error) {
		c.p.Markers, err = choose("markers", c.markers, []choice[Markers]{
			{"none", MarkersNone}, {"tx", MarkersTx}, {"rx", MarkersRx}, {"both", MarkersBoth}})
		return err
	},
	func(c *cmdline) (err error) {
		c.p.P2P, err = choose("p2p", c.p2p, []choice[mpa.RTR]{
			{"none", mpa.RTRNone}, {"send", mpa.RTRSend}, {"write", mpa.RTRWrite}, {"read", mpa.RTRRead}})
		return err
	},
	func(c *cmdline) error {
		switch c.atomicType {
		case "FETCH_AND_ADD":
			c.p.Atomic = FetchAndAdd
		case "CMP_AND_SWAP":
			c.p.Atomic = CmpAndSwap
		default:
			return usagef("invalid atomic type %q: choose from {CMP_AND_SWAP,FETCH_AND_ADD}", c.atomicType)
		}
		return nil
	},
	func(c *cmdline) error {
		if c.p.Profile != "" {
			_, err := choose("profile", c.p.Profile, []choice[string]{
				{"cpu", ""}, {"mem", ""}, {"mutex", ""}, {"block", ""}, {"trace", ""}})
			return err
		}
		return nil
	},
}

// A choice is one value a flag takes by name.
type choice[T any] struct {
	name string
	v    T
}

// choose returns the value named s, or a usage error that lists the names.
func choose[T any](flagName, s string, choices []choice[T]) (T, error) {
	names := make([]string, len(choices))
	for i, c := range choices {
		if c.name == s {
			return c.v, nil
		}
		names[i] = c.name
	}
	var zero T
	last := len(names) - 1
	return zero, usagef("invalid --%s=%s: use %s or %s", flagName, s, strings.Join(names[:last], ", "), names[last])
}
