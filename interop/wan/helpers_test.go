//go:build netns

package wan

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/verbs"
	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

var sweepOnce sync.Once

// requireNetns fails (never skips) unless the tests can make namespaces:
// they are opt-in through the build tag already, and a test that passes
// without running would hide that.
func requireNetns(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the netns tests need root (ip netns, TUN devices, setns)")
	}
	for _, tool := range []string{"ip", "tc", "ss", "sysctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: apt-get install iproute2 procps", tool)
		}
	}
	sweepOnce.Do(SweepStale)
}

// newNet makes a Net that is removed when the test ends, whatever happens.
func newNet(t testing.TB, kind LinkKind) *Net {
	t.Helper()
	requireNetns(t)
	n, err := NewNet(kind)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("link statistics: %s", n.Stats())
		}
		require.NoError(t, n.Close())
	})
	return n
}

// impairedNet is a Net on the link the impaired tests use (netem or the
// TUN emulator).
func impairedNet(t *testing.T) *Net {
	t.Helper()
	requireNetns(t)
	kind, err := ImpairedKind()
	require.NoError(t, err)
	return newNet(t, kind)
}

// checkRoutines fails the test if goroutines outlive it. Call it first, so
// that its check runs after every other clean-up.
func checkRoutines(t *testing.T) {
	t.Cleanup(test.CheckRoutines(t))
}

// fdCount is the number of open file descriptors of this process.
func fdCount(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

// requireFDs waits (up to 5 s: a socket closed by another goroutine is
// released when its last user returns) for the descriptor count to come
// back to want.
func requireFDs(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for fdCount(t) != want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, want, fdCount(t), "open file descriptors after the QPs closed")
}

// requireNoSockets checks with ss(8) that the namespace holds no TCP socket
// any more, TIME-WAIT aside (the kernel keeps those by design).
func requireNoSockets(t *testing.T, ns *NS) {
	t.Helper()
	var out string
	deadline := time.Now().Add(5 * time.Second)
	for {
		o, err := ns.Exec("ss", "-Htan")
		require.NoError(t, err)
		out = ""
		for _, l := range strings.Split(strings.TrimSpace(o), "\n") {
			if l != "" && !strings.HasPrefix(l, "TIME-WAIT") {
				out += l + "\n"
			}
		}
		if out == "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Empty(t, out, "TCP sockets left in %s", ns.Name)
}

// side is one process's verbs device and protection domain.
type side struct {
	dev *verbs.Device
	pd  *verbs.PD
}

func newSide() *side {
	d, err := verbs.Open(verbs.DeviceAttr{})
	if err != nil {
		panic(err) // the default limits are valid
	}
	return &side{dev: d, pd: d.AllocPD()}
}

// end is one QP with its own CQs.
type end struct {
	*side
	scq, rcq *verbs.CQ
	qp       *verbs.QP
}

type qpOpts struct {
	cap      verbs.QPCap
	ird, ord int
	cqe      int
}

func (sd *side) newEnd(t testing.TB, o qpOpts) *end {
	if o.cap.MaxSendWR == 0 {
		o.cap = verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 64}
	}
	if o.cqe == 0 {
		o.cqe = 1024
	}
	e := &end{side: sd}
	var err error
	e.scq, err = sd.dev.CreateCQ(o.cqe)
	require.NoError(t, err)
	e.rcq, err = sd.dev.CreateCQ(o.cqe)
	require.NoError(t, err)
	e.qp, err = sd.pd.CreateQP(verbs.QPConfig{SendCQ: e.scq, RecvCQ: e.rcq, Cap: o.cap, IRD: o.ird, ORD: o.ord})
	require.NoError(t, err)
	return e
}

func (e *end) regMR(t testing.TB, n int, acc verbs.Access) *verbs.MR {
	mr, err := e.pd.RegMR(make([]byte, n), acc)
	require.NoError(t, err)
	return mr
}

// listen starts a verbs listener inside n.B.
func listen(t testing.TB, n *Net, sd *side, cfg verbs.ConnConfig) *verbs.Listener {
	var ln *verbs.Listener
	require.NoError(t, n.B.Do(func() (err error) {
		ln, err = sd.dev.Listen(context.Background(), "tcp4", n.AddrB+":0", cfg)
		return err
	}))
	return ln
}

// connect dials ln from n.A with c's QP and accepts with s's, which sends
// private data spd; it returns the private data c received.
func connect(t testing.TB, n *Net, ln *verbs.Listener, c, s *end, ccfg verbs.ConnConfig, spd []byte) []byte {
	return connectTo(t, n.A, ln, ln.Addr().String(), c, s, ccfg, spd)
}

// connectTo is connect from namespace a to addr, where ln listens.
func connectTo(t testing.TB, a *NS, ln *verbs.Listener, addr string, c, s *end, ccfg verbs.ConnConfig, spd []byte) []byte {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		req, err := ln.GetRequest(ctx)
		if err == nil {
			err = req.Accept(ctx, s.qp, spd)
		}
		errc <- err
	}()
	var pd []byte
	err := a.Do(func() (err error) {
		err = c.qp.Dial(ctx, "tcp4", addr, ccfg)
		pd = c.qp.PeerPrivateData()
		return err
	})
	require.NoError(t, err)
	require.NoError(t, <-errc)
	return pd
}

// pair makes a client end in n.A and a server end in n.B, connected, closed
// when the test ends.
func pair(t *testing.T, n *Net, o qpOpts, ccfg, scfg verbs.ConnConfig) (c, s *end) {
	c, s = newSide().newEnd(t, o), newSide().newEnd(t, o)
	ln := listen(t, n, s.side, scfg)
	connect(t, n, ln, c, s, ccfg, nil)
	require.NoError(t, ln.Close())
	t.Cleanup(func() {
		c.qp.Close()
		s.qp.Close()
	})
	return c, s
}

// waitWC waits up to d for one completion.
func waitWC(t testing.TB, cq *verbs.CQ, d time.Duration) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wc [1]verbs.WC
	for cq.Poll(wc[:]) == 0 {
		require.NoError(t, cq.Wait(ctx), "waiting for a completion")
	}
	return wc[0]
}

// waitOK waits for a successful completion of opcode op.
func waitOK(t testing.TB, cq *verbs.CQ, op verbs.WCOpcode, d time.Duration) verbs.WC {
	t.Helper()
	wc := waitWC(t, cq, d)
	if wc.Status != verbs.Success && wc.QP != nil {
		select {
		case <-wc.QP.Done():
			t.Fatalf("%v; QP error: %v", wc, wc.QP.Err())
		case <-time.After(5 * time.Second):
		}
	}
	require.Equal(t, verbs.Success, wc.Status, "%v", wc)
	require.Equal(t, op, wc.Opcode, "%v", wc)
	return wc
}

// collect takes exactly n completions from cq, waiting up to d for all.
func collect(t testing.TB, cq *verbs.CQ, n int, d time.Duration) []verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out := make([]verbs.WC, 0, n)
	buf := make([]verbs.WC, 64)
	for len(out) < n {
		k := cq.Poll(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		if k == 0 {
			require.NoError(t, cq.Wait(ctx), "have %d of %d completions", len(out), n)
		}
	}
	return out
}

// requireFlushed checks the completions of WRs posted with ids, in that
// order, on a QP that failed: each comes once, in posting order, the ones
// carried out before the failure with Success and every one after with
// WRFlushErr. It returns how many were flushed.
func requireFlushed(t testing.TB, wcs []verbs.WC, ids []uint64, op verbs.WCOpcode) int {
	t.Helper()
	require.Len(t, wcs, len(ids))
	flushed := 0
	for i, wc := range wcs {
		require.Equal(t, ids[i], wc.ID, "completion %d out of posting order", i)
		require.Equal(t, op, wc.Opcode, "%v", wc)
		switch wc.Status {
		case verbs.Success:
			require.Zero(t, flushed, "%v after a flushed WR", wc)
		case verbs.WRFlushErr:
			flushed++
		default:
			t.Fatalf("completion %v: want success or flush", wc)
		}
	}
	return flushed
}

// requireEmpty checks that a CQ holds nothing more.
func requireEmpty(t testing.TB, cqs ...*verbs.CQ) {
	t.Helper()
	for _, cq := range cqs {
		var wc [1]verbs.WC
		if cq.Poll(wc[:]) != 0 {
			t.Fatalf("unexpected completion %v", wc[0])
		}
	}
}

// doneClock notes when QPs reach ERROR, each on its own goroutine, so
// that the time of one is not delayed by waiting for another.
type doneClock struct {
	since time.Time
	at    map[*verbs.QP]chan time.Duration
}

// watch starts the clock at since for each QP; call it before the fault.
func watch(since time.Time, qps ...*verbs.QP) *doneClock {
	dc := &doneClock{since: since, at: make(map[*verbs.QP]chan time.Duration)}
	for _, qp := range qps {
		ch := make(chan time.Duration, 1)
		dc.at[qp] = ch
		go func() {
			<-qp.Done() // closed by Close at the latest, at clean-up
			ch <- time.Since(since)
		}()
	}
	return dc
}

// requireDone waits until qp has reached ERROR, at most d after the
// clock's start, and returns how long after the start that was.
func (dc *doneClock) requireDone(t testing.TB, qp *verbs.QP, d time.Duration, who string) time.Duration {
	t.Helper()
	var el time.Duration
	select {
	case el = <-dc.at[qp]:
	case <-time.After(time.Until(dc.since.Add(d))):
		t.Fatalf("%s: QP still in %s %v after the fault (bound %v)", who, qp.State(), time.Since(dc.since), d)
	}
	require.Equal(t, verbs.StateError, qp.State())
	require.Error(t, qp.Err())
	return el
}

// requireDone is watch and requireDone for one QP.
func requireDone(t testing.TB, qp *verbs.QP, since time.Time, d time.Duration, who string) time.Duration {
	t.Helper()
	return watch(since, qp).requireDone(t, qp, d, who)
}

// requirePostAfterError checks that WRs posted to a QP in ERROR complete
// at once with WRFlushErr (how ibverbs applications drain a QP).
func requirePostAfterError(t testing.TB, e *end, src *verbs.MR) {
	t.Helper()
	_, err := e.qp.PostSend(verbs.SendWR{ID: 9001, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{src.SGE(0, 8)}})
	require.NoError(t, err)
	wc := waitWC(t, e.scq, 5*time.Second)
	require.Equal(t, verbs.WRFlushErr, wc.Status, "%v", wc)
	require.EqualValues(t, 9001, wc.ID)
	_, err = e.qp.PostRecv(verbs.RecvWR{ID: 9002, SGL: []verbs.SGE{src.SGE(0, 8)}})
	require.NoError(t, err)
	wc = waitWC(t, e.rcq, 5*time.Second)
	require.Equal(t, verbs.WRFlushErr, wc.Status, "%v", wc)
	require.EqualValues(t, 9002, wc.ID)
}

// isErrno reports whether err carries one of the errnos.
func isErrno(err error, errnos ...syscall.Errno) bool {
	for _, e := range errnos {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// sockInt reads an integer socket option of a QP's connection.
func sockInt(t testing.TB, c net.Conn, level, opt int) int {
	rc, err := c.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	var v int
	var serr error
	require.NoError(t, rc.Control(func(fd uintptr) { v, serr = unix.GetsockoptInt(int(fd), level, opt) }))
	require.NoError(t, serr)
	return v
}

func envInt(name string, def int) int {
	if s := os.Getenv(name); s != "" {
		v, err := strconv.Atoi(s)
		if err == nil {
			return v
		}
		panic(fmt.Sprintf("%s=%q: %v", name, s, err))
	}
	return def
}

// envSize reads a size in octets, with an optional K, M or G suffix
// (powers of 1024).
func envSize(name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	mul := 1
	switch s[len(s)-1] {
	case 'k', 'K':
		mul = 1 << 10
	case 'm', 'M':
		mul = 1 << 20
	case 'g', 'G':
		mul = 1 << 30
	}
	if mul != 1 {
		s = s[:len(s)-1]
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		panic(fmt.Sprintf("%s: %v", name, err))
	}
	return v * mul
}

func envDuration(name string, def time.Duration) time.Duration {
	if s := os.Getenv(name); s != "" {
		v, err := time.ParseDuration(s)
		if err != nil {
			panic(fmt.Sprintf("%s=%q: %v", name, s, err))
		}
		return v
	}
	return def
}

// heapInuse returns HeapInuse after a full collection.
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
