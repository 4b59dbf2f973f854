//go:build netns

package wan

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/tcpx"
	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

// TestWANTable is a measurement, not a test: it runs only with
// WAN_TABLE=1 (it takes about WAN_TABLE_RUNS × 6 minutes) and prints the
// table of BENCHMARKS.md's WAN section. On the WAN path (25 ms each way,
// 1 Gbit/s) at 0 %, 0.01 %, 0.1 % and 1 % loss, for each of cubic and bbr
// chosen per connection (tcpx.Config.CongestionControl), it measures plain
// TCP each way (tcp_bw's pattern: one stream), one QP's RDMA Writes A→B and
// its RDMA Reads (data B→A), each on a fresh connection, one after the
// other in the same run.
//
// Each transfer streams for WAN_TABLE_WARM (3 s: slow start) plus
// WAN_TABLE_TIME (7 s), and its throughput is what the receiver
// acknowledged during the second part (tcpi_bytes_acked of the sending
// socket), in Mbit/s of payload: iWARP's figure is scaled down by its MPA
// framing (OctetsSent against the payload it carried). A fixed time rather
// than a fixed size gives every cell the same weight of loss events, which
// at 1 % loss come every few hundred packets and at 0.01 % every few
// seconds. Every Read completion's data is compared with the source.
// Socket buffers are 8 MiB (the path's BDP is 6.25 MB); Writes and Reads
// are 1 MiB each, with 32 Reads outstanding (ORD 32): see docs/wan.md.
func TestWANTable(t *testing.T) {
	if os.Getenv("WAN_TABLE") != "1" {
		t.Skip("a measurement of several minutes: set WAN_TABLE=1 to run it")
	}
	checkRoutines(t)
	bufSize := envSize("WAN_SOCKBUF", 8<<20)
	raiseHostBufMax(t, bufSize)
	n := impairedNet(t)
	tm := tableTiming{warm: envDuration("WAN_TABLE_WARM", 3*time.Second), measure: envDuration("WAN_TABLE_TIME", 7*time.Second), n: n}
	runs := envInt("WAN_TABLE_RUNS", 1)
	avail, err := tcpx.AvailableCongestionControl()
	require.NoError(t, err)

	const size, chunk = 64 << 20, 1 << 20
	o := qpOpts{cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64},
		ird: 32, ord: 32, cqe: 1024}
	cs, ss := newSide(), newSide()
	reg := func(sd *side, acc verbs.Access) *verbs.MR {
		mr, err := sd.pd.RegMR(make([]byte, size), acc)
		require.NoError(t, err)
		return mr
	}
	bufs := tableBufs{src: reg(cs, 0), sink: reg(cs, verbs.LocalWrite),
		dst: reg(ss, verbs.LocalWrite|verbs.RemoteWrite), rsrc: reg(ss, verbs.RemoteRead), chunk: chunk}
	fillRandom(bufs.src.Buf(), 5)
	fillRandom(bufs.rsrc.Buf(), 6)
	clear(bufs.dst.Buf())
	clear(bufs.sink.Buf())

	var rows []string
	for _, loss := range []float64{0, 0.0001, 0.001, 0.01} {
		require.NoError(t, n.Impair(Impairment{Delay: 25 * time.Millisecond, Loss: loss, Rate: 1e9}))
		for _, cc := range []string{"cubic", "bbr"} {
			if !slices.Contains(avail, cc) {
				t.Logf("%s: not in this kernel (%v), skipped", cc, avail)
				continue
			}
			cfg := tcpx.Config{SendBuffer: bufSize, RecvBuffer: bufSize, CongestionControl: cc}
			var m [4][]float64 // TCP A→B, Write, TCP B→A, Read
			var retrans [4]uint32
			for range runs {
				r := [4]tableResult{
					tm.tcp(t, n.A, n.B, n.AddrB, cfg, bufs.src.Buf()),
					tm.rdma(t, n, cs, ss, o, cfg, &bufs, verbs.OpRDMAWrite),
					tm.tcp(t, n.B, n.A, n.AddrA, cfg, bufs.rsrc.Buf()),
					tm.rdma(t, n, cs, ss, o, cfg, &bufs, verbs.OpRDMARead),
				}
				t.Logf("%g %% %s: TCP A->B %v; Write %v; TCP B->A %v; Read %v", loss*100, cc, r[0], r[1], r[2], r[3])
				for i := range r {
					m[i] = append(m[i], r[i].mbits)
					retrans[i] += r[i].retrans / uint32(runs)
				}
			}
			row := fmt.Sprintf("| %g %% | %s | %s | %s (%.2f) | %s | %s (%.2f) | %d / %d | %d / %d |",
				loss*100, cc, spread(m[0]), spread(m[1]), median(m[1])/median(m[0]),
				spread(m[2]), spread(m[3]), median(m[3])/median(m[2]), retrans[0], retrans[1], retrans[2], retrans[3])
			t.Logf("%s", row)
			rows = append(rows, row)
		}
	}
	t.Logf("link: %s", n.Stats())
	t.Logf("\n| loss | CC | TCP A→B | RDMA Write A→B (/TCP) | TCP B→A | RDMA Read, data B→A (/TCP) | retransmits A→B TCP / QP | retransmits B→A TCP / QP |\n|---|---|---|---|---|---|---|---|\n%s",
		strings.Join(rows, "\n"))
}

// tableTiming is how long each of TestWANTable's transfers runs before and
// while it is measured.
type tableTiming struct {
	warm, measure time.Duration
	n             *Net
}

// tableResult is one transfer of TestWANTable: its payload rate while
// measured, the segments its sender retransmitted, and the emulator's
// count of the packets that carried it.
type tableResult struct {
	mbits   float64
	retrans uint32
	wire    LinkCounters
}

func (r tableResult) String() string {
	return fmt.Sprintf("%.0f Mbit/s, %d retransmits, %v", r.mbits, r.retrans, r.wire)
}

type tableBufs struct {
	src, sink, dst, rsrc *verbs.MR
	chunk                int
}

// sample waits until at, then returns fn's acknowledged octets.
func sample(t *testing.T, at time.Time, fn func() (tcpx.Stats, error)) tcpx.Stats {
	time.Sleep(time.Until(at))
	st, err := fn()
	require.NoError(t, err)
	return st
}

// tcp streams data over one plain TCP connection from namespace from to a
// listener in to, for warm+measure, and measures the second part.
func (tm tableTiming) tcp(t *testing.T, from, to *NS, addr string, cfg tcpx.Config, data []byte) tableResult {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ln *tcpx.Listener
	require.NoError(t, to.Do(func() (err error) {
		ln, err = tcpx.Listen(ctx, "tcp4", addr+":0", cfg)
		return err
	}))
	defer ln.Close()
	got := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, err = io.Copy(io.Discard, c)
			c.Close()
		}
		got <- err
	}()
	var conn *net.TCPConn
	require.NoError(t, from.Do(func() (err error) {
		conn, err = tcpx.Dial(ctx, "tcp4", ln.Addr().String(), cfg)
		return err
	}))
	cc, err := tcpx.CongestionControl(conn)
	require.NoError(t, err)
	require.Equal(t, cfg.CongestionControl, cc)
	wrote := make(chan error, 1)
	go func() {
		for {
			if _, err := conn.Write(data); err != nil {
				wrote <- err
				return
			}
		}
	}()
	t0 := time.Now()
	info := func() (tcpx.Stats, error) { return tcpx.Info(conn) }
	s0 := sample(t, t0.Add(tm.warm), info)
	w0 := tm.counters(from)
	s1 := sample(t, t0.Add(tm.warm+tm.measure), info)
	w1 := tm.counters(from)
	conn.Close() // ends the writer (net.ErrClosed) and, with an RST, the reader
	<-wrote
	<-got
	return tableResult{
		mbits:   float64(s1.BytesAcked-s0.BytesAcked) * 8 / tm.measure.Seconds() / 1e6,
		retrans: s1.Retransmits,
		wire:    w1.Sub(w0),
	}
}

// counters snapshots the emulator's counters of the direction whose
// sender is in namespace from.
func (tm tableTiming) counters(from *NS) LinkCounters {
	ab, ba, _ := tm.n.Counters()
	if from == tm.n.A {
		return ab
	}
	return ba
}

// rdma streams RDMA Writes of src into dst, or RDMA Reads of rsrc into
// sink, over one fresh QP for warm+measure, and measures the second part
// on the socket that sends the data.
func (tm tableTiming) rdma(t *testing.T, n *Net, cs, ss *side, o qpOpts, cfg tcpx.Config, b *tableBufs, op verbs.SendOpcode) tableResult {
	ccfg := verbs.ConnConfig{TCP: cfg}
	c, s := cs.newEnd(t, o), ss.newEnd(t, o)
	ln := listen(t, n, ss, ccfg)
	var sock *net.TCPConn // the QP's socket, to read its algorithm back
	dcfg := ccfg
	dcfg.DialContext = func(ctx context.Context, network, addr string) (*net.TCPConn, error) {
		var err error
		sock, err = tcpx.Dial(ctx, network, addr, cfg)
		return sock, err
	}
	connect(t, n, ln, c, s, dcfg, nil)
	require.NoError(t, ln.Close())
	cc, err := tcpx.CongestionControl(sock)
	require.NoError(t, err)
	require.Equal(t, cfg.CongestionControl, cc)
	defer c.qp.Close()
	defer s.qp.Close()

	sender, from := c, n.A
	local, remote := b.src, b.dst
	if op == verbs.OpRDMARead {
		sender, from = s, n.B
		local, remote = b.sink, b.rsrc
	}
	nchunks := local.Len() / b.chunk
	var posted, done int
	wcs := make([]verbs.WC, 64)
	t0 := time.Now()
	measureAt, end := t0.Add(tm.warm), t0.Add(tm.warm+tm.measure)
	var s0 tcpx.Stats
	var w0 LinkCounters
	sampled := false
	for time.Now().Before(end) {
		for posted-done < o.ord {
			off := posted % nchunks * b.chunk
			_, err := c.qp.PostSend(verbs.SendWR{ID: uint64(off), Opcode: op, Flags: verbs.Signaled,
				SGL: []verbs.SGE{local.SGE(off, b.chunk)}, RemoteAddr: remote.Addr() + uint64(off), RKey: remote.RKey()})
			if err == verbs.ErrQueueFull {
				break
			}
			require.NoError(t, err)
			posted++
		}
		k := c.scq.Poll(wcs)
		for _, wc := range wcs[:k] {
			require.Equal(t, verbs.Success, wc.Status, "%v (QP: %v)", wc, c.qp.Err())
			if op == verbs.OpRDMARead {
				off := int(wc.ID)
				require.True(t, bytes.Equal(b.rsrc.Buf()[off:off+b.chunk], b.sink.Buf()[off:off+b.chunk]),
					"RDMA Read at %d: the sink differs from the remote source", off)
			}
		}
		done += k
		if !sampled && !time.Now().Before(measureAt) {
			st, err := sender.qp.TCPInfo()
			require.NoError(t, err)
			s0, w0, sampled = st, tm.counters(from), true
		}
		if k == 0 {
			deadline := end
			if !sampled {
				deadline = measureAt
			}
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			c.scq.Wait(ctx) // its deadline is no error: the clock moves the loop on
			cancel()
		}
	}
	s1, err := sender.qp.TCPInfo()
	require.NoError(t, err)
	w1 := tm.counters(from)
	require.True(t, sampled)
	// The sender's octets are FPDUs of one segment each: scale them to
	// payload. Write and Read Response FPDUs carry the same framing: MPA's
	// length and CRC and the tagged DDP/RDMAP header, 20 octets (and up to
	// 3 of pad, left out here).
	mss, err := tcpx.EMSS(sock)
	require.NoError(t, err)
	ratio := float64(mss-20) / float64(mss)
	return tableResult{
		mbits:   float64(s1.BytesAcked-s0.BytesAcked) * ratio * 8 / tm.measure.Seconds() / 1e6,
		retrans: s1.Retransmits,
		wire:    w1.Sub(w0),
	}
}

// spread is "median (min–max)" of v, in whole units, or the one value.
func spread(v []float64) string {
	if len(v) == 1 {
		return fmt.Sprintf("%.0f", v[0])
	}
	return fmt.Sprintf("%.0f (%.0f–%.0f)", median(v), slices.Min(v), slices.Max(v))
}
