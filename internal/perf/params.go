package perf

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/goiwarp/iwarp/mpa"
)

// Test is one of the benchmarks iwarp-perf runs.
type Test uint8

// The tests, named as the perftest binaries without the ib_ prefix.
const (
	WriteBW Test = iota
	ReadBW
	SendBW
	WriteLat
	ReadLat
	SendLat
	TCPBW
	TCPLat
	AtomicBW  // RFC 7306 atomics, as perftest's ib_atomic_bw
	AtomicLat // as ib_atomic_lat
)

var testNames = [...]string{"write_bw", "read_bw", "send_bw", "write_lat", "read_lat", "send_lat", "tcp_bw", "tcp_lat",
	"atomic_bw", "atomic_lat"}

func (t Test) String() string {
	if int(t) < len(testNames) {
		return testNames[t]
	}
	return fmt.Sprintf("Test(%d)", uint8(t))
}

// ParseTest returns the test called name.
func ParseTest(name string) (Test, bool) {
	for i, n := range testNames {
		if n == name {
			return Test(i), true
		}
	}
	return 0, false
}

// BW reports whether t is a bandwidth test.
func (t Test) BW() bool {
	return t == WriteBW || t == ReadBW || t == SendBW || t == TCPBW || t == AtomicBW
}

// TCP reports whether t runs over plain TCP sockets instead of iWARP.
func (t Test) TCP() bool { return t == TCPBW || t == TCPLat }

// verb is the RDMA operation of a test.
type verb uint8

const (
	verbWrite verb = iota
	verbRead
	verbSend
	verbTCP
	verbAtomic
)

// oneSided reports whether the peer takes no part but answering: Reads and
// atomics, whose responses complete the requester's WRs.
func (v verb) oneSided() bool { return v == verbRead || v == verbAtomic }

func (t Test) verb() verb {
	switch t {
	case WriteBW, WriteLat:
		return verbWrite
	case ReadBW, ReadLat:
		return verbRead
	case SendBW, SendLat:
		return verbSend
	case AtomicBW, AtomicLat:
		return verbAtomic
	}
	return verbTCP
}

// title is the test's name in the banner, as perftest's testsStr.
func (t Test) title() string {
	switch t.verb() {
	case verbWrite:
		return "RDMA_Write"
	case verbRead:
		return "RDMA_Read"
	case verbSend:
		return "Send"
	case verbAtomic:
		return "Atomic"
	}
	return "TCP"
}

// AtomicOp is the operation of the atomic tests (perftest's -A,
// --atomic_type).
type AtomicOp uint8

// The atomic operations, named as perftest's atomicTypesStr.
const (
	FetchAndAdd AtomicOp = iota // perftest's default
	CmpAndSwap
)

func (a AtomicOp) String() string {
	if a == CmpAndSwap {
		return "CMP_AND_SWAP"
	}
	return "FETCH_AND_ADD"
}

// Output selects perftest's --output verbosity: one number instead of the
// banner and tables.
type Output uint8

// Output levels.
const (
	OutputFull Output = iota
	OutputBandwidth
	OutputMsgRate
	OutputLatency
)

// Markers says which directions carry MPA markers, seen from the client:
// tx is client to server.
type Markers uint8

// Marker settings.
const (
	MarkersNone Markers = iota
	MarkersTx
	MarkersRx
	MarkersBoth
)

var markerNames = [...]string{"none", "tx", "rx", "both"}

func (m Markers) String() string { return markerNames[m&3] }

// Defaults, from perftest_parameters.h.
const (
	DefPort    = 18515
	DefSizeBW  = 65536
	DefSizeLat = 2
	DefIters   = 1000
	DefItersWB = 5000 // write bandwidth
	DefTxBW    = 128
	DefTxLat   = 1
	DefRxSend  = 512
	DefCQMod   = 100
	// DefInfinitePeriod is --run_infinitely's reporting period without
	// -D (DEF_DURATION).
	DefInfinitePeriod = 5 * time.Second
	DefOuts           = 16
	DefOutsRead       = 128     // read and atomic tests: perftest's default, the device's max_qp_rd_atom (ours and siw's)
	sizeAtomic        = 8       // DEF_SIZE_ATOMIC: RFC 7306 atomics are 64-bit
	MaxSize           = 8 << 20 // -a runs 2 .. MaxSize
	MinIters          = 5
	MaxQPs            = 1024 // the 256-QP target and room above it
	maxDepth          = 8192
	defInlineWr       = 220 // DEF_INLINE_WRITE, latency tests
	defInlineSnd      = 236 // DEF_INLINE_SEND_RC_UC, latency tests
	// cqModSizeLimit: perftest turns CQ moderation off (signals every WR)
	// above this message size unless -Q is given (MSG_SIZE_CQ_MOD_LIMIT).
	cqModSizeLimit = 8192
	// defCQWake: bandwidth tests wake their loop once this many
	// completions have queued (--cq-wake; BENCHMARKS.md, "Reads and Sends").
	defCQWake = 16
	// noPeakIters: perftest does not compute the peak above this many
	// iterations (the search is quadratic).
	noPeakIters = 20000
	// maxIters is perftest's bound on -n; maxLatIters bounds a latency
	// test's time stamps (8 octets each) to 512 MiB.
	maxIters    = 1<<32 - 1
	maxLatIters = 1 << 26

	// DefExchangeTimeout bounds each wait on the peer (--exchange-timeout).
	DefExchangeTimeout = 15 * time.Second
	// DefMaxRegion bounds the memory a side registers for its test QPs
	// (--max-region): -a (16 MiB a QP) on up to 16 QPs, and 1024 QPs of
	// 64 KiB messages (128 MiB).
	DefMaxRegion = 256 << 20
)

// Params are a run's settings. Fields marked symmetric must be the same on
// both sides (perftest's "(SYMMETRIC)"); the exchange checks them.
type Params struct {
	Test     Test          // symmetric
	Size     int           // symmetric; message size in octets
	All      bool          // symmetric; -a: sizes 2 .. 2^23
	Iters    int           // symmetric in iteration mode
	Duration time.Duration // symmetric; 0: iteration mode
	// Margin (-f, --margin) is cut from each end of a -D run before it is
	// measured, in seconds; -1: a quarter of -D, perftest's default.
	// Symmetric when given.
	Margin  int
	QPs     int // symmetric
	TxDepth int
	RxDepth int // symmetric for send tests
	Port    int
	Bidir   bool // symmetric
	Inline  int  // max inline data; -1: the test's default
	Outs    int  // outstanding RDMA Reads and atomics (IRD/ORD)
	Atomic  AtomicOp
	CQMod   int  // signal every CQMod-th send WR
	Gbits   bool // --report_gbits
	NoPeak  bool // -N: no BW peak
	// ReportBoth: with -b, also a table of each side's own direction
	// (perftest's --report-both).
	ReportBoth bool
	// LatencyGap is perftest's --latency_gap: microseconds spun before
	// each post of a latency test; as perftest's, the latency reported
	// (from one post's time to the next) includes them.
	LatencyGap int
	Output     Output
	JSON       bool
	JSONFile   string

	// iWARP knobs.
	MPARev  uint8
	CRC     mpa.CRCPolicy
	Markers Markers
	P2P     mpa.RTR // RTRNone: peer-to-peer mode off
	MaxFPDU int
	// SegmentPerFPDU hands TCP one FPDU per write
	// (verbs.ConnConfig.SegmentPerFPDU).
	SegmentPerFPDU bool

	// Events (-e): wait for completions by blocking on the CQ
	// (CQ.Wait, libibverbs' completion channel) rather than spinning on
	// it first; latency tests then run from the test's goroutine.
	Events bool
	// PostList (-l): post send WRs in lists of this many, one PostSend
	// each (perftest's post_list; 0 or 1: as many as the queue takes, up
	// to postBatch).
	PostList int
	// Infinite (--run_infinitely, symmetric): a bandwidth test that runs
	// until interrupted, printing a row every Duration.
	Infinite bool
	// Histogram (-H) and Unsorted (-U): latency tests also print every
	// sample, sorted without the tail perftest drops, or in order.
	Histogram, Unsorted bool
	// LimitBW (-w) and LimitMsgRate (-y): bandwidth tests fail (exit 1)
	// unless a row's average reaches them, in the table's unit (MiB/s,
	// or Gb/s with --report_gbits) and in Mpps: perftest's verifier
	// limits, for scripts. 0: none.
	LimitBW, LimitMsgRate float64

	// Floor (--floor, tcp_bw only) adds to each side of tcp_bw the work
	// per octet that MPA over a socket cannot avoid (tcp_floor.go).
	Floor bool

	// IPv6 (--ipv6-addr, perftest's) reaches the server by its IPv6
	// address, and --loopback runs over ::1.
	IPv6 bool

	Profile  string
	Loopback bool
	// SourceIP (--bind_source_ip): the client's connections, the
	// exchange's and the test's, leave from this address of ours
	// (tcpx.Config.LocalAddr), as perftest's from its rdma_cm source
	// address. A server ignores it.
	SourceIP string
	// WarmUp (--perform_warm_up): the Write, Read and atomic bandwidth
	// tests' senders post tx-depth WRs on each QP, and wait for them,
	// before the clock starts (warmup.go); the other tests ignore it, as
	// perftest's.
	WarmUp bool
	// UseSRQ (--use-srq): the send tests' receives come from one shared
	// receive queue for all the QPs of a side, as perftest's.
	UseSRQ bool
	Server string // the server to connect to; "" listens

	// TLS runs every connection inside TLS 1.3 (tls.go).
	TLS TLSParams
	// Transport is the TCP under every connection (transport.go).
	Transport TransportParams

	// Perftest (-R, --rdma_cm) speaks perftest's own exchange (see
	// perftest_exchange.go) instead of iwarp-perf's, so that either side
	// can be Linux perftest's ib_*_* -R. A server understands both anyway.
	Perftest bool
	// FPDUDelay holds back our first FPDU after an MPA Reply when we dial
	// (verbs.ConnConfig.FirstFPDUDelay): siw as responder loses an FPDU
	// that arrives too soon. With -R it defaults to perftestFPDUDelay.
	FPDUDelay time.Duration
	// LatPoll makes the latency tests poll from their own goroutine
	// instead of stepping in the QP's receive handler (lat_handler.go).
	LatPoll bool
	// CQWake is the bandwidth tests' CQ moderation
	// (verbs.CQ.SetModeration): the loop waiting on the CQ is woken
	// once CQWake completions have queued. 0 before Check: defCQWake.
	CQWake int

	// Hostile peers (serve.go). ExchangeTimeout bounds every wait on the
	// peer: each step of the exchange, and the test itself while nothing
	// moves on its connections (0: DefExchangeTimeout). MaxRegion bounds
	// the memory registered for the test's QPs, whatever the peer says (0:
	// DefMaxRegion). A server serves clients one at a time until Runs runs
	// have completed (0: until its context ends), and reports each client
	// it drops to Log (nil: nowhere).
	ExchangeTimeout time.Duration
	MaxRegion       int64
	Runs            int
	Log             io.Writer
	// cycle is perftest's cycle_buffer as agreed with a perftest peer (the
	// larger page size): the span of the peer's address cycling. 0 without
	// perftest's exchange.
	cycle int

	// set records the flags given on the command line (by long name).
	set map[string]bool
}

// exchangeTimeout is ExchangeTimeout or its default.
func (p *Params) exchangeTimeout() time.Duration {
	if p.ExchangeTimeout > 0 {
		return p.ExchangeTimeout
	}
	return DefExchangeTimeout
}

// maxRegion is MaxRegion or its default.
func (p *Params) maxRegion() int64 {
	if p.MaxRegion > 0 {
		return p.MaxRegion
	}
	return DefMaxRegion
}

// halfLen is the length of each half of a QP's memory region (rdma.go):
// the largest message, or with perftest's exchange the span over which the
// peer cycles its addresses from ours, roundup64(max(message, cycle)),
// where cycle is the larger page size of the two sides (the peer's word).
func (p *Params) halfLen(cycle int) int64 {
	if p.Perftest {
		return (max(int64(p.MaxMsg()), int64(cycle), 64) + 63) &^ 63
	}
	return int64(max(p.MaxMsg(), 64))
}

// regionBytes is the memory a side registers for its test QPs: a region of
// two halves each.
func (p *Params) regionBytes(cycle int) int64 { return int64(p.QPs) * 2 * p.halfLen(cycle) }

// Sizes returns the message sizes to run: Size, or 2 .. 2^23 with -a.
func (p *Params) Sizes() []int {
	if !p.All {
		return []int{p.Size}
	}
	var s []int
	for n := 2; n <= MaxSize; n <<= 1 {
		s = append(s, n)
	}
	return s
}

// MaxMsg is the largest message of the run.
func (p *Params) MaxMsg() int {
	if p.All {
		return MaxSize
	}
	return p.Size
}

// Client reports whether this side connects to a server.
func (p *Params) Client() bool { return p.Server != "" }

// margin is perftest's warm-up and cool-down in duration mode (-f; by
// default a quarter of the duration, in whole seconds).
func (p *Params) margin() time.Duration {
	if p.Margin >= 0 {
		return time.Duration(p.Margin) * time.Second
	}
	return time.Duration(int64(p.Duration/time.Second)/4) * time.Second
}

// peak reports whether the BW peak is computed (perftest's !noPeak).
func (p *Params) peak() bool {
	return p.Duration == 0 && p.Iters <= noPeakIters && !p.NoPeak
}

// isSet reports whether the flag with the given long name was given.
func (p *Params) isSet(name string) bool { return p.set[name] }

// asPerftest returns p for a run with perftest's exchange (-R, or a
// perftest client that came to a server without -R): perftest's defaults
// where they differ from ours.
func (p *Params) asPerftest() *Params {
	q := *p
	q.Perftest = true
	if !q.isSet("outs") {
		// perftest: the device's max_qp_rd_atom (128 on siw) for read tests,
		// 1 otherwise. (perftest asks MPA for IRD = ORD = 0 then; verbs
		// cannot, but the responder's Reply comes out 0/0 either way.)
		q.Outs = 1
		if q.Test.verb() == verbRead {
			q.Outs = perftestOuts
		}
	}
	return &q
}

// symmetric is the part of Params both sides must agree on; the client
// sends it and the server compares.
type symmetric struct {
	Test     string `json:"test"`
	Size     int    `json:"size"`
	All      bool   `json:"all,omitempty"`
	Iters    int    `json:"iters"`
	Duration int    `json:"duration,omitempty"` // seconds
	QPs      int    `json:"qps"`
	RxDepth  int    `json:"rx_depth,omitempty"`
	Bidir    bool   `json:"bidir,omitempty"`
	Atomic   string `json:"atomic,omitempty"`
	Infinite bool   `json:"run_infinitely,omitempty"`
	Floor    string `json:"floor,omitempty"`  // tcp_bw --floor: "crc" or "copy" (with --crc=off)
	Margin   string `json:"margin,omitempty"` // -f, in seconds, when not the default
}

func (p *Params) symmetric() symmetric {
	s := symmetric{Test: p.Test.String(), Size: p.Size, All: p.All, Iters: p.Iters,
		Duration: int(p.Duration / time.Second), QPs: p.QPs, Bidir: p.Bidir, Infinite: p.Infinite}
	if p.Duration > 0 {
		s.Iters = 0
	}
	if p.Test.verb() == verbSend {
		s.RxDepth = p.RxDepth
	}
	if p.Test.verb() == verbAtomic {
		s.Atomic = p.Atomic.String()
	}
	// The margin when it is not the default, so that a peer that gives
	// the default with -f, or no -f (an older iwarp-perf, which cannot
	// check it), compares equal.
	if m, def := p.margin(), (&Params{Duration: p.Duration, Margin: -1}).margin(); p.Duration > 0 && m != def {
		s.Margin = strconv.Itoa(int(m / time.Second))
	}
	if p.Floor {
		s.Floor = "copy"
		if p.floorCRC() {
			s.Floor = "crc"
		}
	}
	return s
}

// mismatch describes how the peer's symmetric parameters differ from ours,
// or returns "".
func (s symmetric) mismatch(peer symmetric) string {
	var d []string
	add := func(name string, mine, theirs any) {
		if mine != theirs {
			d = append(d, fmt.Sprintf("%s mismatch: local=%v, remote=%v", name, mine, theirs))
		}
	}
	add("test", s.Test, peer.Test)
	add("size (-s)", s.Size, peer.Size)
	add("all sizes (-a)", s.All, peer.All)
	add("iterations (-n)", s.Iters, peer.Iters)
	add("duration (-D)", s.Duration, peer.Duration)
	add("number of QPs (-q)", s.QPs, peer.QPs)
	add("rx depth (-r)", s.RxDepth, peer.RxDepth)
	add("bidirectional (-b)", s.Bidir, peer.Bidir)
	add("atomic type (-A)", s.Atomic, peer.Atomic)
	add("run infinitely (--run_infinitely)", s.Infinite, peer.Infinite)
	add("MPA floor (--floor, --crc)", s.Floor, peer.Floor)
	add("margin (-f)", s.Margin, peer.Margin)
	return strings.Join(d, "; ")
}

// fmtSize writes n octets as "256 MiB", "1 GiB" or "1.5 GiB".
func fmtSize(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift {
			if n%(1<<u.shift) == 0 {
				return fmt.Sprintf("%d %s", n>>u.shift, u.name)
			}
			return fmt.Sprintf("%.1f %s", float64(n)/float64(int64(1)<<u.shift), u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}
