//go:build netns

package wan

import (
	"context"
	"crypto/sha256"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/tcpx"
	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

// newTwoPath makes a TwoPath that is removed when the test ends.
func newTwoPath(t *testing.T) *TwoPath {
	t.Helper()
	requireNetns(t)
	p, err := NewTwoPath()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

// pair connects a client end in A to a server end in B, closed when the
// test ends. B listens on all its addresses, and until the test ends: a
// subflow joins the connection with a SYN to the address B announced,
// which the kernel answers only where a listener is (a listener bound to
// path 0's address alone, or one already closed, gets the join an RST).
// The connection starts on path 0.
func (p *TwoPath) pair(t *testing.T, o qpOpts, ccfg, scfg verbs.ConnConfig) (c, s *end) {
	c, s = newSide().newEnd(t, o), newSide().newEnd(t, o)
	var ln *verbs.Listener
	require.NoError(t, p.B.Do(func() (err error) {
		ln, err = s.dev.Listen(context.Background(), "tcp4", "0.0.0.0:0", scfg)
		return err
	}))
	_, port, err := net.SplitHostPort(ln.Addr().String())
	require.NoError(t, err)
	connectTo(t, p.A, ln, net.JoinHostPort(p.AddrB[0], port), c, s, ccfg, nil)
	// The listener stays open: the kernel finds the listening socket for
	// a joining subflow's SYN, and answers an RST where there is none.
	t.Cleanup(func() {
		c.qp.Close()
		s.qp.Close()
		ln.Close()
	})
	return c, s
}

// mpSubflows is how many subflows a TwoPath connection runs: the first, on
// path 0, and two that A's path manager joins over path 1, one from its
// subflow endpoint and one to the address B announces (TwoPath). `ip mptcp
// limits set subflows 2` on both sides bounds it.
const mpSubflows = 3

// mpConfig is the ConnConfig of both sides of the multipath tests.
var mpConfig = verbs.ConnConfig{TCP: tcpx.Config{MultipathTCP: true}}

// waitSubflows waits for the QP's connection to run n subflows. The path
// managers join them from kernel workers, which a loaded machine runs
// late; the wait ends as soon as they are there, so its bound (1 minute)
// costs nothing.
func waitSubflows(t *testing.T, qp *verbs.QP, n int) tcpx.Stats {
	t.Helper()
	var st tcpx.Stats
	deadline := time.Now().Add(time.Minute)
	for {
		var err error
		st, err = qp.TCPInfo()
		require.NoError(t, err)
		if st.Subflows == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.True(t, st.Multipath, "%v", st)
	require.Equal(t, n, st.Subflows, "subflows of the QP's connection: %v", st)
	return st
}

// mpBuffers are the regions of a transfer both ways: c writes src into
// s's dst and reads s's rsrc into its sink.
type mpBuffers struct {
	src, sink, dst, rsrc *verbs.MR
	wantW, wantR         [32]byte
}

func newMPBuffers(t *testing.T, c, s *end, size int) *mpBuffers {
	b := &mpBuffers{
		src:  c.regMR(t, size, 0),
		sink: c.regMR(t, size, verbs.LocalWrite),
		dst:  s.regMR(t, size, verbs.LocalWrite|verbs.RemoteWrite),
		rsrc: s.regMR(t, size, verbs.RemoteRead),
	}
	fillRandom(b.src.Buf(), 3)
	fillRandom(b.rsrc.Buf(), 4)
	b.wantW, b.wantR = sha256.Sum256(b.src.Buf()), sha256.Sum256(b.rsrc.Buf())
	return b
}

// transfer moves size octets each way over c's QP: RDMA Writes of src into
// dst and RDMA Reads of rsrc into sink, posted alternately in chunks, then
// a Send that s receives once every Write before it has been placed. It
// calls fault (if not nil) once a quarter of the WRs have completed, and
// requires every completion to be a success: nothing flushed, no error.
func transfer(t *testing.T, c, s *end, b *mpBuffers, size, chunk int, fault func()) time.Duration {
	t.Helper()
	n := size / chunk
	mark := s.regMR(t, 8, verbs.LocalWrite)
	_, err := s.qp.PostRecv(verbs.RecvWR{ID: 7, SGL: []verbs.SGE{mark.SGE(0, 8)}})
	require.NoError(t, err)
	total := 2 * n
	posted, done := 0, 0
	wcs := make([]verbs.WC, 64)
	t0 := time.Now()
	for done < total {
		for posted < total {
			off := posted / 2 * chunk
			wr := verbs.SendWR{ID: uint64(posted), Opcode: verbs.OpRDMAWrite, Flags: verbs.Signaled,
				SGL: []verbs.SGE{b.src.SGE(off, chunk)}, RemoteAddr: b.dst.Addr() + uint64(off), RKey: b.dst.RKey()}
			if posted%2 == 1 {
				wr = verbs.SendWR{ID: uint64(posted), Opcode: verbs.OpRDMARead, Flags: verbs.Signaled,
					SGL: []verbs.SGE{b.sink.SGE(off, chunk)}, RemoteAddr: b.rsrc.Addr() + uint64(off), RKey: b.rsrc.RKey()}
			}
			_, err := c.qp.PostSend(wr)
			if err == verbs.ErrQueueFull {
				break
			}
			require.NoError(t, err)
			posted++
		}
		k := c.scq.Poll(wcs)
		for _, wc := range wcs[:k] {
			require.Equal(t, verbs.Success, wc.Status, "%v (QP: %v)", wc, c.qp.Err())
		}
		done += k
		if fault != nil && done >= total/4 {
			fault()
			fault = nil
		}
		if k == 0 {
			waitCQ(t, c.scq, 2*time.Minute)
		}
	}
	_, err = c.qp.PostSend(verbs.SendWR{ID: 1 << 32, Opcode: verbs.OpSend, Flags: verbs.Signaled | verbs.Inline, InlineData: []byte("done")})
	require.NoError(t, err)
	waitOK(t, s.rcq, verbs.WCRecv, 2*time.Minute)
	el := time.Since(t0)
	waitOK(t, c.scq, verbs.WCSend, time.Minute)
	require.Equal(t, b.wantW, sha256.Sum256(b.dst.Buf()), "RDMA Write target differs from the source")
	require.Equal(t, b.wantR, sha256.Sum256(b.sink.Buf()), "RDMA Read sink differs from the remote source")
	for _, e := range []*end{c, s} {
		require.NoError(t, e.qp.Err())
		require.Equal(t, verbs.StateRTS, e.qp.State())
	}
	requireEmpty(t, c.scq, c.rcq, s.scq, s.rcq)
	return el
}

// waitCQ waits up to d for cq to have something.
func waitCQ(t *testing.T, cq *verbs.CQ, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	require.NoError(t, cq.Wait(ctx))
}

// TestMultipathFailover: one QP over Multipath TCP on two paths (200 Mbit/s
// each) moves 64 MiB each way (RDMA Writes A→B and RDMA Reads B→A,
// interleaved); a quarter of the way in, path 0, the one the connection
// started on, fails. The transfer must finish on path 1 with both SHA-256
// sums intact, every WR a success (none flushed) and both QPs still in RTS
// without error.
//
// LinkDown takes path 0's device down in A. Blackhole leaves everything up
// and makes path 0 drop every frame without a trace (see
// TwoPath.Blackhole): TCP on it learns only from missing ACKs, and MPTCP
// moves the data to the other subflow once path 0 is judged stale
// (net.mptcp.stale_loss_cnt retransmission timeouts without progress).
func TestMultipathFailover(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(p *TwoPath) error
	}{
		{"LinkDown", func(p *TwoPath) error { return p.Down(0) }},
		{"Blackhole", func(p *TwoPath) error { return p.Blackhole(0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkRoutines(t)
			p := newTwoPath(t)
			for i := range 2 {
				require.NoError(t, p.RateLimit(i, 200e6))
			}
			o := qpOpts{cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64},
				ird: 16, ord: 16, cqe: 1024}
			c, s := p.pair(t, o, mpConfig, mpConfig)
			waitSubflows(t, c.qp, mpSubflows)
			waitSubflows(t, s.qp, mpSubflows)
			flows, err := p.Subflows()
			require.NoError(t, err)
			t.Logf("subflows in A: %s", strings.Join(flows, ", "))
			require.Len(t, flows, mpSubflows, "%v", flows)
			require.True(t, hasFlow(flows, p.AddrA[0], p.AddrB[0]), "no first subflow on path 0: %v", flows)
			require.True(t, hasFlow(flows, p.AddrA[1]+"%wan1", p.AddrB[0]), "no subflow from A's subflow endpoint on path 1: %v", flows)
			require.True(t, hasFlow(flows, p.AddrA[1], p.AddrB[1]), "no subflow to B's announced address on path 1: %v", flows)

			const size, chunk = 64 << 20, 1 << 20
			b := newMPBuffers(t, c, s, size)
			var faultAt time.Time
			el := transfer(t, c, s, b, size, chunk, func() {
				faultAt = time.Now()
				require.NoError(t, tc.fault(p))
			})
			require.False(t, faultAt.IsZero())
			t.Logf("%s: 2 × %s in %v, path 0 failed mid-transfer; after the fault %v", tc.name, mib(size), el.Round(time.Millisecond),
				time.Since(faultAt).Round(time.Millisecond))
			for _, e := range []*end{c, s} {
				st := e.qp.Stats()
				t.Logf("QP %v: %v (TCPErr %v)", e.qp.LocalAddr(), st.TCP, st.TCPErr)
			}
			flows, _ = p.Subflows()
			t.Logf("subflows in A after: %s", strings.Join(flows, ", "))
		})
	}
}

func hasFlow(flows []string, local, peer string) bool {
	for _, f := range flows {
		l, r, _ := strings.Cut(f, " ")
		if strings.HasPrefix(l, local+":") && strings.HasPrefix(r, peer+":") {
			return true
		}
	}
	return false
}

// TestMultipathRate: both paths limited to 100 Mbit/s (tc tbf); one QP
// over plain TCP (one path) and one over Multipath TCP (both) move
// WAN_MP_BYTES (default 32 MiB) each way, the same transfer as
// TestMultipathFailover. The figure is a measurement for BENCHMARKS.md. The
// ideal gain is 2; measured here it is 1.3–1.9, and once below 1, when the
// kernel's scheduler left the second path nearly idle. So the test gets
// mpAttempts tries, each timing one path and then two back to back (the
// machine's load in the one is the load in the other), and the bound
// (mpMinGain) only catches a second path that never carries its share.
func TestMultipathRate(t *testing.T) {
	checkRoutines(t)
	const rate = 100e6
	p := newTwoPath(t)
	for i := range 2 {
		require.NoError(t, p.RateLimit(i, rate))
	}
	const chunk = 1 << 20
	size := envSize("WAN_MP_BYTES", 32<<20) / chunk * chunk
	o := qpOpts{cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64},
		ird: 16, ord: 16, cqe: 1024}
	mbits := func(el time.Duration) float64 { return float64(2*size) * 8 / el.Seconds() / 1e6 }

	best := 0.0
	for attempt := 1; attempt <= mpAttempts && best < 1.5; attempt++ {
		c1, s1 := p.pair(t, o, verbs.ConnConfig{}, verbs.ConnConfig{})
		st, err := c1.qp.TCPInfo()
		require.NoError(t, err)
		require.False(t, st.Multipath)
		one := transfer(t, c1, s1, newMPBuffers(t, c1, s1, size), size, chunk, nil)
		c1.qp.Close()
		s1.qp.Close()

		c2, s2 := p.pair(t, o, mpConfig, mpConfig)
		waitSubflows(t, c2.qp, mpSubflows)
		two := transfer(t, c2, s2, newMPBuffers(t, c2, s2, size), size, chunk, nil)
		gain := one.Seconds() / two.Seconds()
		best = max(best, gain)
		t.Logf("attempt %d: paths of %s each; 2 × %s (Writes A→B and Reads B→A at once): one path (TCP) %v = %.1f Mbit/s, "+
			"two paths (MPTCP) %v = %.1f Mbit/s; gain %.2f×; QP: %v", attempt, bits(rate), mib(uint64(size)),
			one.Round(time.Millisecond), mbits(one), two.Round(time.Millisecond), mbits(two), gain, c2.qp.Stats().TCP)
		if gain < 1.5 {
			out, _ := p.A.Exec("ss", "-Htni", "state", "established")
			t.Logf("subflows in A:\n%s", out)
		}
		c2.qp.Close()
		s2.qp.Close()
	}
	require.GreaterOrEqual(t, best, mpMinGain, "two paths no faster than one in %d attempts", mpAttempts)
}

// mpMinGain is the least gain of two paths over one that TestMultipathRate
// accepts, in the best of mpAttempts.
const (
	mpMinGain  = 1.2
	mpAttempts = 3
)
