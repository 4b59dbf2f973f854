package perf

import (
	"fmt"
	"time"

	"github.com/goiwarp/iwarp/internal/perftest"
	"github.com/goiwarp/iwarp/mpa"
)

// A rule fills the defaults that depend on the test and on other flags, or
// checks a combination, as perftest's force_dependecies does. finish applies
// the rules in order; the first error is the one reported, and a rule may
// rely on the defaults the rules before it filled.
type rule func(p *Params) error

// rules, grouped by the tests they concern.
var rules = []rule{
	// Defaults by kind of test.
	atomicSize,
	testDefaults,

	// Flags that belong to one kind of test.
	ruleInfinite,   // RDMA bandwidth
	ruleFloor,      // tcp_bw
	ruleLatencyGap, // RDMA latency
	rulePostList,   // bandwidth
	ruleEvents,     // all but write_lat
	ruleLimits,     // bandwidth
	ruleSamples,    // latency, with iterations

	// Every test: ranges, then the queues sized to the run.
	ruleRanges,
	ruleOutput,
	ruleDepths,
	ruleSend,
	ruleModeration,
	ruleInline,
	ruleRegions,
	func(p *Params) error {
		if p.JSONFile == "" {
			p.JSONFile = "perftest_out.json"
		}
		return nil
	},

	// perftest's exchange (-R).
	rulePerftest,

	// TLS, once the test, the side and -R are known.
	func(p *Params) error { return p.TLS.setup(p) },
}

// finish applies the rules.
func (p *Params) finish() error {
	for _, r := range rules {
		if err := r(p); err != nil {
			return err
		}
	}
	return nil
}

// lat reports whether p's test is a latency test.
func (p *Params) lat() bool { return !p.Test.BW() }

func atomicSize(p *Params) error {
	if p.Test.verb() != verbAtomic {
		if p.isSet("atomic_type") {
			return fmt.Errorf("-A is for the atomic tests (atomic_bw, atomic_lat)")
		}
		return nil
	}
	// perftest: "Message size cannot be changed for Atomic tests".
	if p.isSet("size") && p.Size != sizeAtomic || p.All {
		return fmt.Errorf("message size cannot be changed for atomic tests (always %d)", sizeAtomic)
	}
	p.Size = sizeAtomic
	p.set["size"] = true
	return nil
}

// testDefaults: perftest's defaults for bandwidth and latency tests.
func testDefaults(p *Params) error {
	t, lat := p.Test, p.lat()
	if !p.isSet("size") {
		p.Size = DefSizeBW
		if lat {
			p.Size = DefSizeLat
		}
	}
	if !p.isSet("iters") {
		p.Iters = DefIters
		if t == WriteBW {
			p.Iters = DefItersWB
		}
	}
	if !p.isSet("outs") && (t.verb() == verbRead || t.verb() == verbAtomic) {
		p.Outs = DefOutsRead
	}
	if !p.isSet("tx-depth") {
		p.TxDepth = DefTxBW
		if lat {
			p.TxDepth = DefTxLat
		}
	}
	return nil
}

func ruleInfinite(p *Params) error {
	if !p.Infinite {
		return nil
	}
	// perftest: a BW test, one row every -D seconds (default 5), no peak.
	if p.lat() || p.Test.TCP() {
		return fmt.Errorf("--run_infinitely exists only in the RDMA BW tests")
	}
	if p.All || p.isSet("iters") {
		return fmt.Errorf("--run_infinitely runs one size until interrupted: no -a or -n")
	}
	if p.Duration == 0 {
		p.Duration = DefInfinitePeriod
	}
	p.NoPeak = true
	return nil
}

func ruleFloor(p *Params) error {
	if p.Floor && p.Test != TCPBW {
		return fmt.Errorf("--floor is for tcp_bw")
	}
	return nil
}

func ruleLatencyGap(p *Params) error {
	switch {
	case p.LatencyGap < 0:
		return fmt.Errorf("--latency_gap %d: not negative", p.LatencyGap)
	case p.LatencyGap > 0 && (!p.lat() || p.Test.TCP()):
		return fmt.Errorf("latency gap feature is only for the RDMA latency tests")
	}
	return nil
}

// rulePostList: perftest's rules for post lists (-l).
func rulePostList(p *Params) error {
	if p.PostList <= 1 {
		return nil
	}
	switch {
	case p.lat():
		return fmt.Errorf("post list (-l) is supported in BW tests only")
	case p.PostList > maxDepth || p.PostList > p.TxDepth:
		return fmt.Errorf("post list %d: at most the tx depth (%d)", p.PostList, p.TxDepth)
	case p.Duration == 0 && p.Iters%p.PostList != 0:
		return fmt.Errorf("number of iterations (%d) must be a multiple of the post list size (%d)", p.Iters, p.PostList)
	case !p.isSet("cq-mod"):
		p.CQMod = p.PostList
	case p.PostList%p.CQMod != 0:
		return fmt.Errorf("post list size (%d) must be a multiple of CQ moderation (%d)", p.PostList, p.CQMod)
	}
	return nil
}

func ruleEvents(p *Params) error {
	if p.Events && p.Test == WriteLat {
		// Its wait is on memory the peer writes, not on a completion.
		return fmt.Errorf("events (-e) are not available in write_lat, which polls memory")
	}
	return nil
}

func ruleLimits(p *Params) error {
	if (p.LimitBW != 0 || p.LimitMsgRate != 0) && (p.lat() || p.LimitBW < 0 || p.LimitMsgRate < 0) {
		return fmt.Errorf("-w and -y take a positive limit, in bandwidth tests")
	}
	return nil
}

func ruleSamples(p *Params) error {
	if (p.Histogram || p.Unsorted) && (!p.lat() || p.Duration > 0) {
		return fmt.Errorf("-H and -U are available only in latency tests, with iterations (-n)")
	}
	return nil
}

func ruleRanges(p *Params) error {
	lat := p.lat()
	switch {
	case p.PostList < 0:
		return fmt.Errorf("post list %d: not negative", p.PostList)
	case p.Size < 1 || p.Size > MaxSize:
		return fmt.Errorf("size %d out of range 1..%d", p.Size, MaxSize)
	case p.Iters < MinIters:
		return fmt.Errorf("iterations %d: at least %d", p.Iters, MinIters)
	case int64(p.Iters) > maxIters:
		return fmt.Errorf("iterations %d: at most %d", p.Iters, int64(maxIters))
	case lat && p.Iters > maxLatIters:
		return fmt.Errorf("iterations %d: a latency test keeps a time stamp for each, at most %d", p.Iters, maxLatIters)
	case p.Duration < 0:
		return fmt.Errorf("negative duration")
	case p.Duration > 0 && p.Duration < time.Second:
		return fmt.Errorf("duration must be at least 1 second")
	case p.Duration > 0 && p.isSet("iters"):
		return fmt.Errorf("-n and -D exclude each other")
	case p.Duration > 0 && p.All:
		return fmt.Errorf("duration mode doesn't support running on all sizes (-a)")
	case p.Margin < -1:
		return fmt.Errorf("margin (-f) %d: not negative", p.Margin)
	case p.Duration > 0 && p.Margin >= 0 && int64(p.Duration/time.Second) <= 2*int64(p.Margin):
		return fmt.Errorf("please check that DURATION > 2*MARGIN (-D %d, -f %d)", int64(p.Duration/time.Second), p.Margin)
	case p.QPs < 1 || p.QPs > MaxQPs:
		return fmt.Errorf("number of QPs %d out of range 1..%d", p.QPs, MaxQPs)
	case lat && p.QPs != 1:
		return fmt.Errorf("latency tests use one QP")
	case lat && p.Bidir:
		return fmt.Errorf("-b is for bandwidth tests")
	case p.TxDepth < 1 || p.TxDepth > maxDepth:
		return fmt.Errorf("tx depth %d out of range 1..%d", p.TxDepth, maxDepth)
	case p.RxDepth < 1 || p.RxDepth > maxDepth:
		return fmt.Errorf("rx depth %d out of range 1..%d", p.RxDepth, maxDepth)
	case p.CQMod < 1 || p.CQMod > 1024:
		return fmt.Errorf("CQ moderation %d out of range 1..1024", p.CQMod)
	case p.Outs < 1 || p.Outs > mpa.MaxIRDORD:
		return fmt.Errorf("outstanding reads %d out of range 1..%d", p.Outs, mpa.MaxIRDORD)
	case p.Port < 0 || p.Port > 65535:
		return fmt.Errorf("port %d out of range", p.Port)
	case p.Inline > 256:
		return fmt.Errorf("inline size %d: the device takes at most 256", p.Inline)
	case p.MaxFPDU != 0 && p.MaxFPDU < 128:
		return fmt.Errorf("--fpdu %d: at least 128", p.MaxFPDU)
	case p.Loopback && p.Server != "":
		return fmt.Errorf("--loopback runs both sides: give no SERVER")
	}
	return nil
}

func ruleOutput(p *Params) error {
	switch p.Output {
	case OutputBandwidth, OutputMsgRate:
		if p.lat() {
			return fmt.Errorf("output verbosity level for LAT can be: latency")
		}
	case OutputLatency:
		if !p.lat() {
			return fmt.Errorf("output verbosity level for BW can be: bandwidth, message_rate")
		}
	}
	return nil
}

// ruleDepths: in iteration mode, no queue deeper than the run.
func ruleDepths(p *Params) error {
	if p.Duration == 0 {
		p.TxDepth = min(p.TxDepth, p.Iters)
		if p.Test.verb() == verbSend {
			p.RxDepth = min(p.RxDepth, p.Iters)
		}
	}
	return nil
}

// ruleSend: the send tests' receive queue.
func ruleSend(p *Params) error {
	send := p.Test.verb() == verbSend
	if p.UseSRQ && !send {
		return fmt.Errorf("--use-srq is for the send tests")
	}
	if !send {
		return nil
	}
	if p.RxDepth%2 == 1 && !p.All {
		p.RxDepth++ // perftest: "WA for a bug when rx_depth is odd in SEND", but for -a
	}
	if p.PostList > 1 {
		// A whole list waits for as many credits, and the receiver holds
		// up to a batch of them back (bw.go): iwarp-perf's credits come
		// every ceil(rx/4) receives, perftest's (-R) at points rx/3 apart.
		// A server takes either kind of client: it keeps to the stricter.
		limit := p.RxDepth - (p.RxDepth+3)/4
		if p.Perftest || p.Server == "" && !p.Loopback {
			limit = min(limit, p.RxDepth-p.RxDepth/3)
		}
		if p.PostList > limit {
			return fmt.Errorf("post list %d: at most %d with rx depth %d in send tests (the credits come in batches)",
				p.PostList, max(limit, 1), p.RxDepth)
		}
	}
	if p.Perftest && p.UseSRQ {
		// perftest's receiver shares rx-depth receives among the QPs and
		// credits each QP every rx-depth/3 of its own: the sender keeps
		// the sum below rx-depth (bw.go's window). With many QPs each can
		// stop short of its next credit point while the sum is spent, and
		// nothing moves again.
		c, list := max(p.RxDepth/3, 1), max(p.PostList, 1)
		stalls := func(qps int) bool { return c > 1 && qps*(c-1)+list >= p.RxDepth/qps*qps }
		if stalls(p.QPs) {
			most := p.QPs - 1
			for most > 1 && stalls(most) {
				most--
			}
			return fmt.Errorf("--use-srq with perftest's exchange (-R): %d QPs could stall with rx depth %d "+
				"(the SRQ holds %d receives, each QP is credited every %d of its own); at most %d QPs",
				p.QPs, p.RxDepth, srqShare(p), c, most)
		}
	}
	return nil
}

// ruleModeration: how often a send WR is signalled (-Q) and how many
// completions wake the loop (--cq-wake).
func ruleModeration(p *Params) error {
	if p.Size > cqModSizeLimit && !p.All && !p.isSet("cq-mod") {
		p.CQMod = 1
	}
	p.CQMod = min(p.CQMod, p.TxDepth)
	switch {
	case p.CQWake < 0 || p.CQWake > maxDepth:
		return fmt.Errorf("--cq-wake %d out of range 1..%d", p.CQWake, maxDepth)
	case p.lat():
		p.CQWake = 1
	case p.CQWake == 0:
		// A wake-up per defCQWake completions, but never fewer than
		// eight wake-ups a round of the send or receive queue.
		d := p.TxDepth
		if p.Test.verb() == verbSend {
			d = min(d, p.RxDepth)
		}
		p.CQWake = max(1, min(defCQWake, d/8))
	}
	return nil
}

// ruleInline: the latency tests' default inline sizes; one-sided and TCP
// tests send nothing inline.
func ruleInline(p *Params) error {
	t := p.Test
	if p.Inline < 0 {
		p.Inline = 0
		switch t {
		case WriteLat:
			p.Inline = defInlineWr
		case SendLat:
			p.Inline = defInlineSnd
		}
	}
	if t.verb().oneSided() || t.TCP() {
		p.Inline = 0
	}
	return nil
}

// ruleRegions keeps our own regions within --max-region, as a server that
// meets a perftest client sizes them (at least a page each half).
func ruleRegions(p *Params) error {
	if p.Test.TCP() {
		return nil
	}
	q := *p
	q.Perftest = true
	if need := q.regionBytes(perftest.PageSize); need > p.maxRegion() {
		return fmt.Errorf("the memory regions of %d QPs take %s (2 × %s each), more than --max-region %s",
			p.QPs, fmtSize(need), fmtSize(q.halfLen(perftest.PageSize)), fmtSize(p.maxRegion()))
	}
	return nil
}

// rulePerftest: what perftest's exchange supports, and its defaults.
func rulePerftest(p *Params) error {
	if !p.Perftest {
		return nil
	}
	switch {
	case p.Infinite && (p.Test != WriteBW && p.Test != ReadBW || p.Bidir):
		// perftest's send_bw and bidirectional servers never end an
		// infinite run: they loop until their connection fails.
		return fmt.Errorf("--run_infinitely is supported with -R for write_bw and read_bw, one direction")
	case p.Duration > 0 && p.Test != WriteBW && p.Test != ReadBW:
		return fmt.Errorf("-D is supported with -R for write_bw and read_bw only")
	case p.Test.TCP():
		return fmt.Errorf("-R is for the RDMA tests")
	case p.Test.verb() == verbAtomic:
		// perftest's atomics over rdma_cm would need RFC 7306 on both
		// sides; siw has none, and perftest does not negotiate it.
		return fmt.Errorf("-R is not supported for the atomic tests (they need RFC 7306 on both sides)")
	}
	if !p.isSet("crc") {
		p.CRC = mpa.CRCOff // what siw and perftest use
	}
	if !p.isSet("fpdu-delay") && !p.Loopback {
		p.FPDUDelay = perftestFPDUDelay
	}
	*p = *p.asPerftest()
	return nil
}
