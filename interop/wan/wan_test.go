//go:build netns

package wan

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/tcpx"
	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// wanProfile is the path of the WAN test: 25 ms each way (50 ms RTT),
// 0.01 % loss, 1 Gbit/s.
var wanProfile = Impairment{Delay: 25 * time.Millisecond, Loss: 0.0001, Rate: 1e9}

// bdp is the path's bandwidth-delay product: 1 Gbit/s × 50 ms = 6.25 MB.
const bdp = 1e9 * 0.050 / 8

// raiseHostBufMax makes sure SO_SNDBUF and SO_RCVBUF can reach want.
//
// setsockopt caps both at net.core.wmem_max and net.core.rmem_max. On the
// kernel these tests were written on (6.18) the two exist in every network
// namespace but are read-only there (mode 0444) and show the initial
// namespace's values: only the host's setting counts, and it counts when
// the socket option is set. So the test raises the host's values for its
// own duration and puts them back after; WAN_HOST_SYSCTL=0 forbids that,
// and the buffers then stay at what the host allows (logged). On kernels
// where the namespace has writable copies, raise them there instead.
func raiseHostBufMax(t *testing.T, want int) {
	for _, key := range []string{"net.core.rmem_max", "net.core.wmem_max"} {
		s, err := HostSysctl(key)
		require.NoError(t, err)
		cur, err := strconv.Atoi(s)
		require.NoError(t, err)
		if cur >= want {
			continue
		}
		if envInt("WAN_HOST_SYSCTL", 1) == 0 {
			t.Logf("%s is %d, below the %d asked for: socket buffers will be capped (WAN_HOST_SYSCTL=0)", key, cur, want)
			continue
		}
		require.NoError(t, SetHostSysctl(key, strconv.Itoa(want)))
		t.Logf("raised host %s from %d to %d for this test", key, cur, want)
		t.Cleanup(func() { SetHostSysctl(key, s) })
	}
}

// fillRandom fills b with seeded pseudo-random octets.
func fillRandom(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	for ; i < len(b); i++ {
		b[i] = byte(r.Uint32())
	}
}

// cpuTime is this process's user plus system CPU time so far: both
// endpoints and, on a LinkTun, the emulator.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// run is one timed transfer.
type run struct {
	name    string
	octets  int
	elapsed time.Duration
	cpu     time.Duration
	retrans uint32 // segments the sender retransmitted (tcpStream only)
}

func (r run) mbits() float64 { return float64(r.octets) * 8 / r.elapsed.Seconds() / 1e6 }

func (r run) String() string {
	return r.name + ": " + mib(uint64(r.octets)) + " in " + r.elapsed.Round(time.Millisecond).String() +
		" = " + strconv.FormatFloat(r.mbits(), 'f', 1, 64) + " Mbit/s, process CPU " +
		strconv.FormatFloat(r.cpu.Seconds()/r.elapsed.Seconds()*100, 'f', 0, 64) + "% of one core"
}

// tcpStream sends data from namespace from to a listener in namespace to
// (at addr) over one plain TCP connection with the options of cfg, into
// sink; the time runs from the first write to the last octet read.
func tcpStream(t *testing.T, name string, from, to *NS, addr string, cfg tcpx.Config, data, sink []byte) run {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
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
			_, err = io.ReadFull(c, sink)
			c.Close()
		}
		got <- err
	}()
	var conn *net.TCPConn
	require.NoError(t, from.Do(func() (err error) {
		conn, err = tcpx.Dial(ctx, "tcp4", ln.Addr().String(), cfg)
		return err
	}))
	defer conn.Close()
	cpu0, t0 := cpuTime(), time.Now()
	_, err := conn.Write(data)
	require.NoError(t, err)
	require.NoError(t, <-got)
	r := run{name: name, octets: len(data), elapsed: time.Since(t0), cpu: cpuTime() - cpu0}
	if st, err := tcpx.Info(conn); err == nil {
		t.Logf("%s sender: %+v", name, st)
		r.retrans = st.Retransmits
	}
	return r
}

// postAll posts n RDMA operations of chunk octets (op at offset i×chunk of
// local and remote memory), all signaled, as fast as the send queue takes
// them, and waits for every completion.
func postAll(t *testing.T, e *end, op verbs.SendOpcode, local *verbs.MR, raddr uint64, rkey uint32, size, chunk int) {
	n := size / chunk
	posted, done := 0, 0
	wcs := make([]verbs.WC, 256)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for done < n {
		for posted < n {
			off := posted * chunk
			_, err := e.qp.PostSend(verbs.SendWR{ID: uint64(posted), Opcode: op, Flags: verbs.Signaled,
				SGL: []verbs.SGE{local.SGE(off, chunk)}, RemoteAddr: raddr + uint64(off), RKey: rkey})
			if err == verbs.ErrQueueFull {
				break
			}
			require.NoError(t, err)
			posted++
		}
		k := e.scq.Poll(wcs)
		for _, wc := range wcs[:k] {
			require.Equal(t, verbs.Success, wc.Status, "%v (QP: %v)", wc, e.qp.Err())
		}
		done += k
		if k == 0 {
			require.NoError(t, e.scq.Wait(ctx))
		}
	}
}

// Test 4: RDMA Writes and then RDMA Reads of WAN_BYTES (default 1 GiB)
// over a 50 ms, 1 Gbit/s path with 0.01 % loss, checked with SHA-256, and
// plain TCP on the same path with the same socket options for comparison.
//
// Socket buffers: a window must hold the bandwidth-delay product, 6.25 MB
// here, or the window and not the link sets the pace. A user sets them
// with ConnConfig.TCP.SendBuffer and RecvBuffer (on both the Dial and the
// Listen ConnConfig: accepted sockets inherit the listener's, and the
// receive buffer must be set before the SYN, which fixes the window
// scale); the kernel caps them at net.core.wmem_max and rmem_max, which
// the test raises (see raiseHostBufMax). WAN_SOCKBUF sets the size
// (default 8 MiB, BDP plus a margin for the queue the rate limiter adds).
// Linux doubles the value for its bookkeeping; getsockopt shows the
// doubled figure, which the test checks.
//
// The iWARP time of the Writes runs from the first post to the arrival of
// a Send posted after the last Write (Writes complete when handed to TCP,
// so their completions come too early to time); that of the Reads from
// the first post to the last completion. TCP's runs from the first write
// to the last octet read.
//
// The ratio iWARP/TCP must reach WAN_MIN_RATIO (default 0.9) in at least
// one of wanAttempts pairs of runs per direction (TCP, then iWARP, fresh
// each time). Measured here it is 0.95–1.14, median 0.99; but with random
// loss on a 50 ms path one loss event more or less moves a single figure
// by several per cent, so a single pair is not a fair verdict. All
// attempts are logged; see README.md for the figures.
func TestWAN(t *testing.T) {
	checkRoutines(t)
	const chunk = 4 << 20
	size := envSize("WAN_BYTES", 1<<30) / chunk * chunk
	require.Positive(t, size)
	bufSize := envSize("WAN_SOCKBUF", 8<<20)
	raiseHostBufMax(t, bufSize)
	n := impairedNet(t)
	require.NoError(t, n.Impair(wanProfile))
	t.Logf("%s", n.Describe())
	cc, _ := n.A.ReadSysctl("net.ipv4.tcp_congestion_control")
	t.Logf("congestion control %s, socket buffers %s asked (BDP %.2f MB)", cc, mib(uint64(bufSize)), bdp/1e6)

	tcpCfg := tcpx.Config{SendBuffer: bufSize, RecvBuffer: bufSize}
	cfg := verbs.ConnConfig{TCP: tcpCfg}
	// The dialling side's socket, to read back its options: DialContext
	// makes it, and Dial applies cfg.TCP to it as to its own.
	var sock *net.TCPConn
	ccfg := cfg
	ccfg.DialContext = func(ctx context.Context, network, addr string) (*net.TCPConn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		sock = c.(*net.TCPConn)
		return sock, nil
	}
	o := qpOpts{cap: verbs.QPCap{MaxSendWR: 512, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64},
		ird: 32, ord: 32, cqe: 4096}
	c, s := pair(t, n, o, ccfg, cfg)
	{
		snd := sockInt(t, sock, unix.SOL_SOCKET, unix.SO_SNDBUF)
		rcv := sockInt(t, sock, unix.SOL_SOCKET, unix.SO_RCVBUF)
		t.Logf("QP socket %v: SO_SNDBUF %d, SO_RCVBUF %d (Linux reports twice the value set)", c.qp.LocalAddr(), snd, rcv)
		if envInt("WAN_HOST_SYSCTL", 1) != 0 {
			require.Equal(t, 2*bufSize, snd, "SO_SNDBUF did not reach the socket")
			require.Equal(t, 2*bufSize, rcv, "SO_RCVBUF did not reach the socket")
		}
	}

	src := c.regMR(t, size, 0)
	sink := c.regMR(t, size, verbs.LocalWrite)
	dst := s.regMR(t, size, verbs.LocalWrite|verbs.RemoteWrite)
	rsrc := s.regMR(t, size, verbs.RemoteRead)
	fillRandom(src.Buf(), 1)
	fillRandom(rsrc.Buf(), 2)
	// Touch the receiving buffers once, so that no run pays the page
	// faults of fresh memory (the first TCP run did: a quarter million
	// faults per GiB).
	clear(dst.Buf())
	clear(sink.Buf())
	wantW, wantR := sha256.Sum256(src.Buf()), sha256.Sum256(rsrc.Buf())

	minRatio := envFloat("WAN_MIN_RATIO", 0.9)
	var runs []run
	best := map[string]float64{}
	for attempt := 1; attempt <= wanAttempts; attempt++ {
		// Plain TCP, A to B, into the Writes' target (cleared afterwards,
		// so that the Writes' checksum proves the Writes).
		tcp := tcpStream(t, "TCP A->B", n.A, n.B, n.AddrB, tcpCfg, src.Buf(), dst.Buf())
		require.Equal(t, wantW, sha256.Sum256(dst.Buf()), "TCP delivered wrong data")
		clear(dst.Buf())

		// RDMA Writes, A to B.
		mark := s.regMR(t, 8, verbs.LocalWrite)
		_, err := s.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{mark.SGE(0, 8)}})
		require.NoError(t, err)
		cpu0, t0 := cpuTime(), time.Now()
		postAll(t, c, verbs.OpRDMAWrite, src, dst.Addr(), dst.RKey(), size, chunk)
		_, err = c.qp.PostSend(verbs.SendWR{ID: 1 << 32, Opcode: verbs.OpSend, Flags: verbs.Signaled | verbs.Inline, InlineData: []byte("done")})
		require.NoError(t, err)
		waitOK(t, s.rcq, verbs.WCRecv, 5*time.Minute)
		wr := run{name: "iWARP RDMA Write A->B", octets: size, elapsed: time.Since(t0), cpu: cpuTime() - cpu0}
		waitOK(t, c.scq, verbs.WCSend, time.Minute)
		require.Equal(t, wantW, sha256.Sum256(dst.Buf()), "RDMA Write target differs from the source")
		clear(dst.Buf())
		runs = append(runs, tcp, wr)
		r := wr.mbits() / tcp.mbits()
		t.Logf("attempt %d: %v; %v; ratio %.3f", attempt, tcp, wr, r)
		best["Write"] = max(best["Write"], r)
		if r >= minRatio {
			break
		}
	}
	for attempt := 1; attempt <= wanAttempts; attempt++ {
		// Plain TCP, B to A, into the Reads' sink (cleared afterwards).
		tcp := tcpStream(t, "TCP B->A", n.B, n.A, n.AddrA, tcpCfg, rsrc.Buf(), sink.Buf())
		require.Equal(t, wantR, sha256.Sum256(sink.Buf()), "TCP delivered wrong data")
		clear(sink.Buf())

		// RDMA Reads: A reads B's memory; the data flows B to A.
		cpu0, t0 := cpuTime(), time.Now()
		postAll(t, c, verbs.OpRDMARead, sink, rsrc.Addr(), rsrc.RKey(), size, chunk)
		rd := run{name: "iWARP RDMA Read (data B->A)", octets: size, elapsed: time.Since(t0), cpu: cpuTime() - cpu0}
		require.Equal(t, wantR, sha256.Sum256(sink.Buf()), "RDMA Read sink differs from the remote source")
		clear(sink.Buf())
		runs = append(runs, tcp, rd)
		r := rd.mbits() / tcp.mbits()
		t.Logf("attempt %d: %v; %v; ratio %.3f", attempt, tcp, rd, r)
		best["Read"] = max(best["Read"], r)
		if r >= minRatio {
			break
		}
	}

	for _, e := range []*end{c, s} {
		if st, err := e.qp.TCPInfo(); err == nil {
			t.Logf("QP socket %v: %+v", e.qp.LocalAddr(), st)
		}
	}
	t.Logf("link: %s", n.Stats())
	t.Logf("ratio iWARP/TCP (best attempt): Write %.3f, Read %.3f", best["Write"], best["Read"])
	if minRatio <= 0 || size < 256<<20 {
		t.Logf("throughput not asserted (WAN_MIN_RATIO=%g, %s: slow start dominates below 256 MiB)", minRatio, mib(uint64(size)))
		return
	}
	// Each must at least use a quarter of the link: a window or buffer
	// mistake, or a stall, shows as a small fraction of it.
	for _, r := range runs {
		require.Greater(t, r.mbits(), 0.25*wanProfile.Rate/1e6, "%v: far below the link rate", r)
	}
	for _, dir := range []string{"Write", "Read"} {
		require.GreaterOrEqual(t, best[dir], minRatio, "iWARP %s below %.2f of TCP in %d attempts", dir, minRatio, wanAttempts)
	}
}

// wanAttempts bounds the measurements per direction. One run's figure
// moves by up to about 12 % with the loss events it happens to draw (TCP
// alone measured 790–915 Mbit/s here); a systematic shortfall shows in
// every attempt, a random one rarely in two.
const wanAttempts = 3

func envFloat(name string, def float64) float64 {
	if s := os.Getenv(name); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			panic(name + ": " + err.Error())
		}
		return v
	}
	return def
}
