package perf

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// Report is one measurement: a row of perftest's BW or LAT table. It goes to
// the peer in the exchange, so its fields are exported.
type Report struct {
	Kind  string `json:"kind"` // "bw", "lat" or "lat_dur"
	Size  int    `json:"size"`
	Iters uint64 `json:"iters"`

	// Bandwidth: octets per second, and messages per second.
	BWPeak  float64 `json:"bw_peak,omitempty"`
	BWAvg   float64 `json:"bw_avg,omitempty"`
	MsgRate float64 `json:"msg_rate,omitempty"`

	// Latency, microseconds (already divided by the round-trip factor).
	TMin     float64 `json:"t_min,omitempty"`
	TMax     float64 `json:"t_max,omitempty"`
	TTypical float64 `json:"t_typical,omitempty"`
	TAvg     float64 `json:"t_avg,omitempty"`
	TStdev   float64 `json:"t_stdev,omitempty"`
	P99      float64 `json:"p99,omitempty"`
	P999     float64 `json:"p999,omitempty"`
	TPS      float64 `json:"tps,omitempty"` // duration mode: transactions per second

	// samples are a latency test's samples in order, µs, kept for -H and
	// -U (this side's only: not exchanged).
	samples []float64
}

// withSamples keeps the samples of a latency row for -H and -U: the gaps
// between successive posts, divided by rttFactor, as latReport takes them.
func (r Report) withSamples(p *Params, tposted []int64, rttFactor float64) Report {
	if !p.Histogram && !p.Unsorted || len(tposted) < MinIters {
		return r
	}
	r.samples = make([]float64, len(tposted)-1)
	for i := range r.samples {
		r.samples[i] = float64(tposted[i+1]-tposted[i]) / 1e3 / rttFactor
	}
	return r
}

// printSamples is perftest's -U and -H output ahead of a latency row:
// the samples in order, then sorted without the tail the row leaves out,
// then the table's header again.
func (pr *printer) printSamples(r Report) {
	w := pr.w
	if pr.p.Unsorted {
		fmt.Fprintf(w, "#, usec\n")
		for i, v := range r.samples {
			fmt.Fprintf(w, "%d, %g\n", i+1, v)
		}
	}
	if pr.p.Histogram {
		sorted := slices.Sorted(slices.Values(r.samples))
		fmt.Fprintf(w, "#, usec\n")
		for i, v := range sorted[:len(sorted)-latMeasureTail] {
			fmt.Fprintf(w, "%d, %g\n", i+1, v)
		}
	}
	fmt.Fprint(w, resultLine+resultFmtLat)
}

const (
	kindBW     = "bw"
	kindLat    = "lat"
	kindLatDur = "lat_dur"
)

// add sums two bandwidth reports, as perftest's print_full_bw_report does
// for bidirectional tests (the iteration count stays ours).
func (r Report) add(o Report) Report {
	r.BWPeak += o.BWPeak
	r.BWAvg += o.BWAvg
	r.MsgRate += o.MsgRate
	return r
}

// completion is a signaled completion seen at time t (ns) that completed
// every WR up to index idx (over all QPs, in posting order).
type completion struct {
	idx int
	t   int64
}

// bwReport computes a BW row in iteration mode for n messages from post
// times tposted (one per WR) and completions, as perftest's
// print_report_bw. With peak false, only tposted[0] and the last
// completion matter.
func bwReport(size, n int, tposted []int64, comps []completion, peak bool) Report {
	r := Report{Kind: kindBW, Size: size, Iters: uint64(n)}
	if n == 0 || len(tposted) == 0 || len(comps) == 0 {
		return r
	}
	total := float64(comps[len(comps)-1].t - tposted[0])
	if total <= 0 {
		total = 1
	}
	r.BWAvg = float64(size) * float64(n) * 1e9 / total
	r.MsgRate = float64(n) * 1e9 / total
	if peak {
		if best := peakDelta(tposted, comps); best > 0 {
			r.BWPeak = float64(size) * 1e9 / best
		}
	}
	return r
}

// peakDelta is the shortest average time per message over any run of
// messages from a post to a completion, perftest's peak: the least
// (c.t - tposted[i]) / (c.idx-i+1) over completions c and posts i <= c.idx;
// 0 if some run took no time. perftest tries every pair, which is
// quadratic (seconds, past 10^5 messages, while the peer's watchdog runs);
// here the answer is searched for: r is at least the least ratio iff some
// pair has c.t - r(c.idx+1) <= tposted[i] - r·i, one pass with a running
// maximum of the right side.
func peakDelta(tposted []int64, comps []completion) float64 {
	reaches := func(r float64) bool {
		best, i := math.Inf(-1), 0
		for _, c := range comps {
			for ; i <= c.idx && i < len(tposted); i++ {
				best = max(best, float64(tposted[i])-r*float64(i))
			}
			if float64(c.t)-r*float64(c.idx+1) <= best {
				return true
			}
		}
		return false
	}
	last := comps[len(comps)-1]
	hi := float64(last.t-tposted[0]) / float64(last.idx+1) // one run: all of them
	if hi <= 0 || reaches(0) {
		return 0
	}
	lo := 0.0
	for range 64 {
		if mid := (lo + hi) / 2; reaches(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// bwDurReport is a BW row in duration mode: iters messages completed in
// the sample window (perftest reports no peak then).
func bwDurReport(size int, iters uint64, window time.Duration) Report {
	r := Report{Kind: kindBW, Size: size, Iters: iters}
	if window > 0 {
		r.BWAvg = float64(size) * float64(iters) / window.Seconds()
		r.MsgRate = float64(iters) / window.Seconds()
	}
	return r
}

// latMeasureTail is how many of the largest samples perftest drops.
const latMeasureTail = 2

// latReport computes a LAT row from post times, as perftest's
// print_report_lat: the samples are the gaps between successive posts
// (one round trip each), divided by rttFactor (2 for ping-pong tests,
// which report half the round trip; 1 for reads).
func latReport(size int, tposted []int64, rttFactor float64) Report {
	iters := len(tposted)
	r := Report{Kind: kindLat, Size: size, Iters: uint64(iters)}
	if iters < MinIters {
		return r
	}
	delta := make([]float64, iters-1)
	for i := range delta {
		delta[i] = float64(tposted[i+1]-tposted[i]) / 1e3 / rttFactor // µs
	}
	slices.Sort(delta)
	cnt := len(delta) - latMeasureTail
	var median float64
	if (cnt-1)%2 != 0 {
		median = (delta[cnt/2] + delta[cnt/2-1]) / 2
	} else {
		median = delta[cnt/2]
	}
	var sum float64
	for _, d := range delta[:cnt] {
		sum += d
	}
	avg := sum / float64(cnt)
	var vs float64
	for _, d := range delta[:cnt] {
		vs += (avg - d) * (avg - d)
	}
	// perftest's indices: t_max is the first dropped sample, and the
	// percentiles index the sorted array by ceil(cnt × q).
	i99 := min(int(math.Ceil(float64(cnt)*0.99)), len(delta)-1)
	i999 := min(int(math.Ceil(float64(cnt)*0.999)), len(delta)-1)
	r.TMin, r.TMax, r.TTypical, r.TAvg = delta[0], delta[cnt], median, avg
	r.TStdev = math.Sqrt(vs / float64(cnt))
	r.P99, r.P999 = delta[i99], delta[i999]
	return r
}

// latDurReport is perftest's print_report_lat_duration.
func latDurReport(size int, iters uint64, window time.Duration, rttFactor float64) Report {
	r := Report{Kind: kindLatDur, Size: size, Iters: iters}
	if iters > 0 && window > 0 {
		r.TAvg = float64(window.Microseconds()) / rttFactor / float64(iters)
		r.TPS = float64(iters) / window.Seconds()
	}
	return r
}

// Perftest's table formats (perftest_parameters.h).
const (
	resultLine   = "---------------------------------------------------------------------------------------\n"
	resultFmt    = " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n"
	resultFmtG   = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
	resultFmtLat = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"
	resultFmtDur = " #bytes        #iterations       t_avg[usec]    tps average\n"
)

// printer writes what a side shows: perftest's banner and tables, or the
// single number of --output, and the JSON file.
type printer struct {
	w io.Writer
	p *Params
}

func (pr *printer) full() bool { return pr.p.Output == OutputFull }

func (pr *printer) printf(format string, a ...any) {
	if pr.full() {
		fmt.Fprintf(pr.w, format, a...)
	}
}

// bwUnit converts octets per second to the report's unit: MiB/s (2^20,
// perftest's format_factor 0x100000) or Gb/s (125000000 octets).
func (pr *printer) bwUnit(v float64) float64 {
	if pr.p.Gbits {
		return v / 125e6
	}
	return v / (1 << 20)
}

// header prints the results table's header.
func (pr *printer) header() {
	pr.printf("%s", resultLine)
	switch {
	case pr.p.Test.BW() && pr.p.Gbits:
		pr.printf("%s", resultFmtG)
	case pr.p.Test.BW():
		pr.printf("%s", resultFmt)
	case pr.p.Duration > 0:
		pr.printf("%s", resultFmtDur)
	default:
		pr.printf("%s", resultFmtLat)
	}
}

// reportBoth prints, after a bidirectional test's table, perftest's
// --report-both tables: this side's results, then the peer's.
func (pr *printer) reportBoth(both [][2]Report) error {
	for i, title := range []string{"Local", "Remote"} {
		pr.printf("\n %s results: \n", title)
		pr.header()
		for _, rs := range both {
			if err := pr.row(rs[i]); err != nil {
				return err
			}
		}
		pr.printf("%s", resultLine)
	}
	return nil
}

// row prints one result row (or the --output number) and writes the JSON
// file if asked.
func (pr *printer) row(r Report) error {
	w := pr.w
	switch pr.p.Output {
	case OutputBandwidth:
		fmt.Fprintf(w, "%f\n", pr.bwUnit(r.BWAvg))
	case OutputMsgRate:
		fmt.Fprintf(w, "%f\n", r.MsgRate/1e6)
	case OutputLatency:
		fmt.Fprintf(w, "%f\n", r.TAvg)
	default:
		switch r.Kind {
		case kindBW:
			peak, avg := pr.bwUnit(r.BWPeak), pr.bwUnit(r.BWAvg)
			if avg < 0.1 && pr.p.Gbits {
				fmt.Fprintf(w, " %-7d    %d           %-7.6f            %-7.6f            %-7.6f\n", r.Size, r.Iters, peak, avg, r.MsgRate/1e6)
			} else {
				fmt.Fprintf(w, " %-7d    %-10d       %-7.2f            %-7.2f\t\t     %-7.6f\n", r.Size, r.Iters, peak, avg, r.MsgRate/1e6)
			}
		case kindLat:
			if r.samples != nil {
				pr.printSamples(r)
			}
			fmt.Fprintf(w, " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
				r.Size, r.Iters, r.TMin, r.TMax, r.TTypical, r.TAvg, r.TStdev, r.P99, r.P999)
		case kindLatDur:
			fmt.Fprintf(w, " %-7d       %d            %-7.2f        %-7.2f\n", r.Size, r.Iters, r.TAvg, r.TPS)
		}
	}
	if pr.p.JSON {
		return pr.writeJSON(r)
	}
	return nil
}

// writeJSON writes perftest's --out_json file: test_info and results, with
// perftest's keys. Like perftest it is rewritten for every size of -a.
func (pr *printer) writeJSON(r Report) error {
	p := pr.p
	type kv struct {
		k string
		v any
	}
	info := []kv{{"test", p.jsonTestName()}, {"Dual_port", "OFF"}, {"Device", deviceName},
		{"Number_of_qps", p.QPs}, {"Transport_type", p.transport()}, {"Connection_type", "RC"}, {"Using_SRQ", onOff(p.UseSRQ)}}
	if p.Client() || p.Bidir || p.Loopback {
		info = append(info, kv{"TX_depth", p.TxDepth})
	}
	if p.Test.verb() == verbSend && (!p.Client() || p.Bidir) {
		info = append(info, kv{"RX_depth", p.RxDepth})
	}
	if p.Test.BW() {
		info = append(info, kv{"CQ_Moderation", p.CQMod})
	}
	info = append(info, kv{"Link_type", "Ethernet"})
	if p.Test.verb().oneSided() {
		info = append(info, kv{"Outstand_reads", p.Outs})
	} else {
		info = append(info, kv{"Max_inline_data", p.Inline})
	}
	info = append(info, kv{"rdma_cm_QPs", "ON"}, kv{"Data_ex_method", "rdma_cm"})

	var res []kv
	r2 := func(v float64) float64 { return math.Round(v*100) / 100 }
	r6 := func(v float64) float64 { return math.Round(v*1e6) / 1e6 }
	switch {
	case p.Output == OutputBandwidth:
		res = []kv{{"bw_avg", r6(pr.bwUnit(r.BWAvg))}}
	case p.Output == OutputMsgRate:
		res = []kv{{"msgRate_avg", r6(r.MsgRate / 1e6)}}
	case p.Output == OutputLatency && r.Kind == kindLatDur:
		res = []kv{{"t_avg", r6(r.TAvg)}}
	case p.Output == OutputLatency:
		res = []kv{{"avg_lat", r6(r.TAvg)}}
	case r.Kind == kindBW:
		res = []kv{{"MsgSize", r.Size}, {"n_iterations", r.Iters}, {"BW_peak", r2(pr.bwUnit(r.BWPeak))},
			{"BW_average", r2(pr.bwUnit(r.BWAvg))}, {"MsgRate", r6(r.MsgRate / 1e6)}}
	case r.Kind == kindLat:
		res = []kv{{"MsgSize", r.Size}, {"n_iterations", r.Iters}, {"t_min", r2(r.TMin)}, {"t_max", r2(r.TMax)},
			{"t_typical", r2(r.TTypical)}, {"t_avg", r2(r.TAvg)}, {"t_stdev", r2(r.TStdev)},
			{"percentile_99", r2(r.P99)}, {"percentile_99.9", r2(r.P999)}}
	default:
		res = []kv{{"MsgSize", r.Size}, {"n_iterations", r.Iters}, {"t_avg", r2(r.TAvg)}, {"tps_average", r2(r.TPS)}}
	}
	obj := func(kvs []kv) string {
		var b strings.Builder
		b.WriteString("{\n")
		for i, e := range kvs {
			k, _ := json.Marshal(e.k)
			v, err := json.Marshal(e.v)
			if err != nil {
				v = []byte("null") // NaN or infinity, from a peer's report
			}
			fmt.Fprintf(&b, "%s: %s", k, v)
			if i < len(kvs)-1 {
				b.WriteString(",")
			}
			b.WriteString("\n")
		}
		b.WriteString("}")
		return b.String()
	}
	doc := "{\n\"test_info\": " + obj(info) + ",\n\"results\": " + obj(res) + "\n}\n"
	if err := os.WriteFile(p.JSONFile, []byte(doc), 0o644); err != nil {
		return fmt.Errorf("failed to open %s: %w", p.JSONFile, err)
	}
	return nil
}

// deviceName is what the banner shows as the device.
const deviceName = "goiwarp"

func (p *Params) transport() string {
	if p.Test.TCP() {
		return "TCP"
	}
	return "IW"
}

// jsonTestName is perftest's "test" key, e.g. "RDMA_Write_BW_Test".
func (p *Params) jsonTestName() string {
	s := p.Test.title() + "_"
	if p.Test.verb() == verbAtomic {
		s += p.Atomic.String() + "_"
	}
	if p.Test.BW() {
		if p.Bidir {
			s += "Bidirectional_"
		}
		s += "BW_"
	} else {
		s += "Latency_"
	}
	return s + "Test"
}

// bannerInfo is what the banner shows about the connection.
type bannerInfo struct {
	mtu     int    // the QP's MULPDU
	mpa     string // negotiated MPA parameters
	tls     string // negotiated TLS, "" in cleartext
	qpLines []string
}

// banner prints perftest's ctx_print_test_info block and the address lines.
func (pr *printer) banner(b bannerInfo) {
	p := pr.p
	kind := "BW "
	if p.Test.BW() && p.Bidir {
		kind = "Bidirectional BW "
	} else if !p.Test.BW() {
		kind = "Latency "
	}
	pr.printf("%s", resultLine)
	title := p.Test.title()
	if p.Test.verb() == verbAtomic {
		title += " " + p.Atomic.String() // perftest prints atomicTypesStr after "Atomic"
	}
	pr.printf("                    %s %sTest\n", title, kind)
	pr.printf(" Dual-port       : OFF\t\tDevice         : %s\n", deviceName)
	pr.printf(" Number of qps   : %d\t\tTransport type : %s\n", p.QPs, p.transport())
	pr.printf(" Connection type : RC\t\tUsing SRQ      : %s\n", onOff(p.UseSRQ))
	pr.printf(" PCIe relax order: Unsupported\t\tLock-free      : Unsupported\n")
	pr.printf(" ibv_wr* API     : OFF\t\tUsing Enhanced Reorder      : OFF\n")
	if p.Client() || p.Bidir || p.Loopback {
		pr.printf(" TX depth        : %d\n", p.TxDepth)
	}
	if p.Test.verb() == verbSend && (!p.Client() || p.Bidir) {
		pr.printf(" RX depth        : %d\n", p.RxDepth)
	}
	if p.Test.BW() {
		pr.printf(" CQ Moderation   : %d\n", p.CQMod)
		pr.printf(" CQE Poll Batch  : %d\n", pollBatch)
	}
	pr.printf(" Mtu             : %d[B]\n", b.mtu)
	pr.printf(" Link type       : Ethernet\n")
	if p.Test.verb().oneSided() {
		pr.printf(" Outstand reads  : %d\n", p.Outs)
	} else {
		pr.printf(" Max inline data : %d[B]\n", p.Inline)
	}
	if !p.Test.TCP() {
		pr.printf(" rdma_cm QPs\t : ON\n")
		pr.printf(" Data ex. method : rdma_cm\n")
		pr.printf(" MPA             : %s\n", b.mpa)
		if b.tls != "" {
			pr.printf(" TLS             : %s\n", b.tls)
		}
	} else {
		pr.printf(" Data ex. method : Ethernet\n")
	}
	pr.printf("%s", resultLine)
	for _, l := range b.qpLines {
		pr.printf("%s\n", l)
	}
}

// addrLine is perftest's BASIC_ADDR_FMT (+ READ_FMT + RDMA_FMT) line.
func addrLine(side string, p *Params, b BufInfo) string {
	s := fmt.Sprintf(" %s address: LID %s QPN %s PSN %s", side, cHex(0, 4), cHex(uint64(b.QPN), 6), cHex(0, 6))
	switch p.Test.verb() {
	case verbRead, verbAtomic:
		s += fmt.Sprintf(" OUT %s", cHex(uint64(b.Outs), 4))
		fallthrough
	case verbWrite:
		s += fmt.Sprintf(" RKey %s VAddr %s", cHex(uint64(b.RKey), 8), cHex(b.Addr, 16))
	}
	return s
}

// cHex formats v as C's printf("%#0<width>x"): 0 has no 0x prefix.
func cHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*d", width, 0)
	}
	return fmt.Sprintf("0x%0*x", width-2, v)
}

func onOff(b bool) string {
	if b {
		return "ON"
	}
	return "OFF"
}
