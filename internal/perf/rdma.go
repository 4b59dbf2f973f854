package perf

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/tcpx"
	"github.com/goiwarp/iwarp/verbs"
)

// WR IDs: the kind of WR in the top bits, the QP's index, the sequence
// number of a data WR within its run.
const (
	idData   uint64 = 0 << 62
	idCredit uint64 = 1 << 62
	idEnd    uint64 = 2 << 62
	idKind   uint64 = 3 << 62
	idQPShft        = 40
	idSeq    uint64 = 1<<idQPShft - 1
)

func wrID(kind uint64, qp int, seq uint64) uint64 { return kind | uint64(qp)<<idQPShft | seq }
func idQP(id uint64) int                          { return int((id &^ idKind) >> idQPShft) }

// recvReserve is how many receives beyond rx-depth a side of a send test
// posts for the peer's credit messages (see bw.go), and sqReserve the send
// queue slots beyond tx-depth for credit messages and end markers.
const (
	recvReserve = 8
	sqReserve   = 16
)

// endpoint is one side's RDMA resources: one CQ for every completion of
// every data QP, and per QP a memory region of two halves. The first half
// is the local buffer (the source of Writes and Sends, the sink of Reads);
// the second is what the peer may touch (the target of its Writes, the
// source of its Reads, where Sends land), advertised in the exchange.
type endpoint struct {
	p      *Params
	closed bool // close has run
	dev    *verbs.Device
	pd     *verbs.PD
	cq     *verbs.CQ
	srq    *verbs.SRQ           // --use-srq
	srqMR  *verbs.MR            // the SRQ's receive slots
	byQP   map[*verbs.QP]*qpEnd // with an SRQ: whose receive completed
	qps    []*qpEnd
	half   int // octets in each half
	wcs    []verbs.WC

	// send tests: credit messages come every batch receives.
	batch int

	// perftest's send_bw credits (-R): one little-endian 32-bit word per
	// QP, at offset 4*i, that the receiver RDMA Writes its cumulative
	// receive count into (see bw.go).
	credit *verbs.MR

	// onPeriod takes each row of a --run_infinitely run as it ends.
	onPeriod func(Report) error
}

// qpEnd is one data QP and its state.
type qpEnd struct {
	i      int
	qp     *verbs.QP
	mr     *verbs.MR
	local  []byte // first half
	target []byte // second half
	remote BufInfo

	// Per run, for the sender: WRs posted, completed, and to post.
	scnt, ccnt, limit uint64
	warmed            uint64 // --perform_warm_up's WRs before the run
	batch             []verbs.SendWR
	sge               verbs.SGE

	// perftest's send_bw credits: receives taken, and the count last
	// written to the peer and due to be (see bw.go).
	rcnt, credSent, credDue uint64
	credHigh                uint64 // the highest credit word seen (sender)

	// Send tests, kept across the runs of -a (see bw.go).
	credits   int  // Sends the peer can take now (its posted receives)
	grant     int  // receives we reposted and not yet granted
	endPosted bool // our end marker is posted...
	endDone   bool // ...and completed
	endSeen   bool // the peer's end marker arrived
	rwr       verbs.RecvWR
	reposts   []verbs.RecvWR
	seen      uint64 // the Writes of the peer counted so far (verbs.MR.Placed), by spinByte
}

// pollBatch is how many completions one Poll takes.
const pollBatch = 64

// postBatch is how many WRs one PostSend carries at most.
const postBatch = 32

func newEndpoint(dev *verbs.Device, p *Params) (*endpoint, error) {
	// A perftest peer cycles its Writes and Reads over
	// roundup64(max(size, cycle_buffer)) octets from our address.
	if need := p.regionBytes(p.cycle); need > p.maxRegion() {
		return nil, fmt.Errorf("the memory regions of %d QPs would take %s, more than --max-region %s",
			p.QPs, fmtSize(need), fmtSize(p.maxRegion()))
	}
	e := &endpoint{p: p, dev: dev, pd: dev.AllocPD(), half: int(p.halfLen(p.cycle)), wcs: make([]verbs.WC, pollBatch)}
	if p.Perftest {
		if p.Test == SendBW {
			mr, err := e.pd.RegMR(make([]byte, 4*p.QPs), verbs.LocalWrite|verbs.RemoteWrite)
			if err != nil {
				return nil, err
			}
			e.credit = mr
		}
	}
	e.batch = max(1, (p.RxDepth+3)/4)
	rq := e.recvDepth()
	cq, err := dev.CreateCQ(p.QPs*(p.TxDepth+sqReserve+rq+recvReserve) + 64)
	if err != nil {
		return nil, err
	}
	e.cq = cq
	if p.CQWake > 1 {
		if err := cq.SetModeration(p.CQWake); err != nil {
			return nil, err
		}
	}
	qrq := max(rq, 1)
	if p.UseSRQ {
		// Every receive on the SRQ lands in a slot of its own: any QP may
		// take any receive, and two QPs' receive loops must never write
		// one buffer at once.
		slots := max(p.QPs*rq, 1)
		if testPerftestSRQ {
			slots = max(rq, 1)
		}
		if need := int64(slots) * int64(e.half); need+p.regionBytes(p.cycle) > p.maxRegion() {
			return nil, fmt.Errorf("--use-srq: %d receive slots of %s would take %s, more than --max-region %s",
				slots, fmtSize(int64(e.half)), fmtSize(need), fmtSize(p.maxRegion()))
		}
		if e.srq, err = e.pd.CreateSRQ(slots, 1); err != nil {
			return nil, err
		}
		if e.srqMR, err = e.pd.RegMR(make([]byte, slots*e.half), verbs.LocalWrite); err != nil {
			return nil, err
		}
		qrq = 0
	}
	for i := range p.QPs {
		qp, err := e.pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, SRQ: e.srq, IRD: p.Outs, ORD: p.Outs,
			Cap: verbs.QPCap{MaxSendWR: p.TxDepth + sqReserve, MaxRecvWR: qrq, MaxInline: max(p.Inline, 8)}})
		if err != nil {
			e.close()
			return nil, err
		}
		mr, err := e.pd.RegMR(make([]byte, 2*e.half), verbs.LocalWrite|verbs.RemoteWrite|verbs.RemoteRead|verbs.RemoteAtomic)
		if err != nil {
			qp.Close()
			e.close()
			return nil, err
		}
		b := mr.Buf()
		q := &qpEnd{i: i, qp: qp, mr: mr, local: b[:e.half:e.half], target: b[e.half:], credits: p.RxDepth,
			batch: make([]verbs.SendWR, max(postBatch, p.PostList))}
		q.rwr = verbs.RecvWR{ID: wrID(idData, i, 0), SGL: []verbs.SGE{mr.SGE(e.half, e.half)}}
		e.qps = append(e.qps, q)
		if e.srq != nil {
			if e.byQP == nil {
				e.byQP = make(map[*verbs.QP]*qpEnd)
			}
			e.byQP[qp] = q
		}
	}
	return e, nil
}

// recvDepth is how many receives each QP of this side keeps posted.
func (e *endpoint) recvDepth() int {
	p := e.p
	switch p.Test {
	case SendBW:
		if p.Perftest {
			// perftest's credits come as RDMA Writes: the receiver needs
			// no receive beyond rx-depth, and the sender none.
			if !p.Client() || p.Bidir {
				return p.RxDepth
			}
			return 0
		}
		if !p.Client() || p.Bidir {
			return p.RxDepth + recvReserve
		}
		return recvReserve // credit messages only
	case SendLat:
		return p.RxDepth
	}
	return 0
}

// postRecvs posts the receives before the connection (iWARP has no
// receiver-not-ready retry: a Send that finds none kills the connection).
func (e *endpoint) postRecvs() error {
	n := e.recvDepth()
	if e.srq != nil && testPerftestSRQ {
		n /= len(e.qps)
	}
	for i, q := range e.qps {
		for k := range n {
			wr := q.rwr
			if e.srq != nil {
				wr = e.srqWR(i*n + k)
			}
			if _, err := e.postRecv(q, wr); err != nil {
				return err
			}
		}
	}
	return nil
}

// testPerftestSRQ, set by tests only, sizes an SRQ as perftest's server
// does: rx-depth receives shared by all QPs rather than rx-depth each.
var testPerftestSRQ bool

// srqWR is the receive of SRQ slot k; its ID carries the slot.
func (e *endpoint) srqWR(k int) verbs.RecvWR {
	return verbs.RecvWR{ID: wrID(idData, 0, uint64(k)), SGL: []verbs.SGE{e.srqMR.SGE(k*e.half, e.half)}}
}

// recvWR is the receive to post again after wc's completed.
func (e *endpoint) recvWR(q *qpEnd, wc *verbs.WC) verbs.RecvWR {
	if e.srq != nil {
		return e.srqWR(int(wc.ID & idSeq))
	}
	return q.rwr
}

// qpOf returns the QP a completion belongs to: the one its ID names,
// except for a receive taken from the SRQ, which any QP may have used.
func (e *endpoint) qpOf(wc *verbs.WC) *qpEnd {
	if e.srq != nil && wc.Opcode == verbs.WCRecv {
		if q, ok := e.byQP[wc.QP]; ok {
			return q
		}
	}
	return e.qps[idQP(wc.ID)]
}

// postRecv posts receives for q: on its own receive queue, or on the
// endpoint's SRQ (--use-srq), where any of the QPs may take them.
func (e *endpoint) postRecv(q *qpEnd, wrs ...verbs.RecvWR) (int, error) {
	if e.srq != nil {
		return e.srq.PostRecv(wrs...)
	}
	return q.qp.PostRecv(wrs...)
}

func (e *endpoint) verbsQPs() []*verbs.QP {
	qps := make([]*verbs.QP, len(e.qps))
	for i, q := range e.qps {
		qps[i] = q.qp
	}
	return qps
}

// localInfo describes, per QP, what the peer may access: the second half.
// It is valid once the QPs are connected (QPN is the local TCP port).
func (e *endpoint) localInfo() []BufInfo {
	bi := make([]BufInfo, len(e.qps))
	for i, q := range e.qps {
		bi[i] = BufInfo{Addr: q.mr.Addr() + uint64(e.half), RKey: q.mr.RKey(), Len: uint32(e.half), Outs: e.p.Outs}
		if e.credit != nil {
			// perftest's send_bw advertises the credit word instead.
			bi[i].Addr, bi[i].RKey, bi[i].Len = e.credit.Addr()+uint64(4*i), e.credit.RKey(), 4
		}
		if a, ok := q.qp.LocalAddr().(*net.TCPAddr); ok {
			bi[i].QPN = uint32(a.Port)
		}
	}
	return bi
}

func (e *endpoint) setRemote(remote []BufInfo) error {
	for i, q := range e.qps {
		if int(remote[i].Len) < e.p.MaxMsg() {
			return fmt.Errorf("peer's buffer for QP %d has %d octets, the test needs %d", i, remote[i].Len, e.p.MaxMsg())
		}
		q.remote = remote[i]
	}
	return nil
}

// bannerInfo describes the connection for the banner.
func (e *endpoint) bannerInfo(local, remote []BufInfo) bannerInfo {
	qp := e.qps[0].qp
	mp := qp.Params()
	onoff := func(b bool) string {
		if b {
			return "ON"
		}
		return "OFF"
	}
	p2p := "OFF"
	if mp.P2P {
		p2p = "ON (RTR " + mp.RTR.String() + ")"
	}
	b := bannerInfo{mtu: qp.MULPDU(),
		mpa: fmt.Sprintf("rev %d, CRC %s, markers tx %s rx %s, P2P %s, IRD/ORD %d/%d",
			mp.Rev, onoff(mp.CRC), onoff(mp.MarkersTx), onoff(mp.MarkersRx), p2p, mp.IRD, mp.ORD),
		tls: tlsLine(qp)}
	for i := range e.qps {
		b.qpLines = append(b.qpLines, addrLine("local", e.p, local[i]))
		b.qpLines = append(b.qpLines, addrLine("remote", e.p, remote[i]))
	}
	return b
}

// qpStats takes each QP's counters (verbs.QP.Stats) and TCP_INFO.
func (e *endpoint) qpStats() []verbs.QPStats {
	out := make([]verbs.QPStats, len(e.qps))
	for i, q := range e.qps {
		if q.qp.LocalAddr() != nil {
			out[i] = q.qp.Stats()
		}
	}
	return out
}

// tcpStats formats the counters of the last of snaps (qpStats, taken in
// turn), with the TCP_INFO of the last that has one: the socket may have
// closed in between.
func (e *endpoint) tcpStats(snaps ...[]verbs.QPStats) []string {
	var out []string
	for i, q := range e.qps {
		if q.qp.LocalAddr() == nil {
			continue
		}
		last := len(snaps) - 1
		st, from := snaps[last][i], last
		for k := last; k >= 0 && st.TCPErr != nil; k-- {
			st.TCP, st.TCPErr, from = snaps[k][i].TCP, snaps[k][i].TCPErr, k
		}
		inTLS := ""
		if st.TLS {
			inTLS = ", inside TLS"
		}
		out = append(out, fmt.Sprintf(" iWARP qp %d: FPDUs sent %d received %d, stream octets sent %d, %v -> %v%s",
			q.i, st.FPDUsSent, st.FPDUsReceived, st.OctetsSent, q.qp.LocalAddr(), q.qp.RemoteAddr(), inTLS))
		if st.TCPErr != nil {
			out = append(out, fmt.Sprintf(" TCP qp %d: %v", q.i, st.TCPErr))
			continue
		}
		who := fmt.Sprintf("qp %d", q.i)
		if from != last {
			// The socket had closed: these figures are from an earlier
			// look (the first is at the start of the test).
			who += fmt.Sprintf(" (as of look %d of %d: the socket closed before the last)", from+1, last+1)
		}
		out = append(out, fmtTCPStats(who, st.TCP))
	}
	return out
}

func fmtTCPStats(who string, s tcpx.Stats) string {
	mp := ""
	if s.Multipath {
		mp = fmt.Sprintf(", multipath (%d subflows; path figures the first's)", s.Subflows)
	}
	return fmt.Sprintf(" TCP %-6s: rtt %v (min %v) retransmits %d lost %d cwnd %d mss %d sent %d rwnd-limited %v sndbuf-limited %v%s",
		who, s.RTT, s.MinRTT, s.Retransmits, s.Lost, s.SndCwnd, s.SndMSS, s.BytesSent, s.RwndLimited, s.SndbufLimited, mp)
}

// close tears the QPs down: orderly where it can (the peer has every
// octet we sent), abortive after a short wait.
func (e *endpoint) close() {
	if e.closed {
		return
	}
	e.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, q := range e.qps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if q.qp.State() == verbs.StateRTS {
				q.qp.Disconnect(ctx)
			}
			q.qp.Close()
			q.mr.Dereg()
		}()
	}
	wg.Wait()
	if e.srqMR != nil {
		e.srqMR.Dereg()
	}
	if e.credit != nil {
		e.credit.Dereg()
	}
}

// connConfig is the start-up and transport configuration of one side.
func connConfig(p *Params, client bool) verbs.ConnConfig {
	m := mpa.Config{Rev: p.MPARev, CRC: p.CRC}
	c2s := p.Markers == MarkersTx || p.Markers == MarkersBoth
	s2c := p.Markers == MarkersRx || p.Markers == MarkersBoth
	if client {
		m.MarkersRx = s2c // we ask the server to send markers
	} else {
		m.MarkersRx = c2s
	}
	if p.P2P != mpa.RTRNone {
		m.P2P, m.RTRs = mpa.P2POn, p.P2P
	}
	c := verbs.ConnConfig{MPA: m, MaxFPDU: p.MaxFPDU, SegmentPerFPDU: p.SegmentPerFPDU,
		RFC7306: p.Test.verb() == verbAtomic, TLS: p.TLS.config(client), TCP: p.tcpConfig(client)}
	if client {
		c.FirstFPDUDelay = p.FPDUDelay
	}
	// The MPA start-up is a step of the exchange too: --exchange-timeout
	// shortens its timeouts (verbs: request 5 s, reply 10 s), never lengthens
	// them.
	if t := p.exchangeTimeout(); t < 5*time.Second {
		c.RequestTimeout, c.ReplyTimeout = t, t
	} else if t < 10*time.Second {
		c.ReplyTimeout = t
	}
	return c
}

// check turns a failed completion into the QP's error.
func (e *endpoint) check(wc *verbs.WC) error {
	if wc.Status == verbs.Success {
		return nil
	}
	err := fmt.Errorf("completion error on QP %d: %v", idQP(wc.ID), *wc)
	if wc.QP != nil {
		return qpFailure(wc.QP, err)
	}
	return err
}

// withPD returns cfg with private data pd.
func withPD(cfg verbs.ConnConfig, pd []byte) verbs.ConnConfig {
	cfg.PrivateData = pd
	return cfg
}

// deviceAttr are the device limits a run needs: -o above the default
// IRD/ORD limit raises it (verbs refuses a QP beyond its device's).
func deviceAttr(p *Params) verbs.DeviceAttr {
	n := max(p.Outs, verbs.DefaultDeviceAttr.MaxIRD)
	return verbs.DeviceAttr{MaxIRD: n, MaxORD: n}
}
