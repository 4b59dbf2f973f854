package perf

// Hostile clients against an iwarp-perf server, over TCP on loopback: each
// case starts "iwarp-perf TEST [options]" as a server in this process, as a
// user would, attacks it with clients that break the exchange in one way
// each, and requires after every attack that the server logged the client
// as dropped (with the reason), and after all of them that it serves a
// legitimate client and exits 0, without a goroutine left behind.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/require"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/internal/perftest"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/goiwarp/iwarp/verbs"
)

// hostileTimeout is the servers' --exchange-timeout here: what a silent
// client costs each, and what every step of the others, attackers that
// go on and legitimate clients, must beat on a loaded machine (with 250 ms
// an attacker's RTR and a legitimate client of TestServerRuns came late
// under -race beside two CPU hogs).
const hostileTimeout = time.Second

// silence is the reason a server gives for a peer silent for hostileTimeout.
var silence = "nothing from the peer for " + hostileTimeout.String() + " (--exchange-timeout)"

// syncBuffer is a bytes.Buffer for a writer and a reader on two goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// hostileServer is an iwarp-perf server running in this process.
type hostileServer struct {
	args    []string // the test and its options, for the clients too
	port    string
	out     syncBuffer
	log     syncBuffer
	code    chan int
	drops   int // drops seen so far
	timeout time.Duration
}

const dropLine = "; dropped, waiting for the next client"

func startHostileServer(ctx context.Context, t *testing.T, args []string, timeout time.Duration) *hostileServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	s := &hostileServer{args: args, port: port, code: make(chan int, 1), timeout: timeout}
	sargs := append(append([]string(nil), args...), "-p", port, "--exchange-timeout", timeout.String())
	go func() { s.code <- MainContext(ctx, sargs, &s.out, &s.log) }()
	for !strings.Contains(s.out.String(), "Waiting for client") {
		select {
		case c := <-s.code:
			t.Fatalf("server exited %d: %s", c, s.log.String())
		case <-time.After(time.Millisecond):
		}
	}
	return s
}

func (s *hostileServer) addr() string { return "127.0.0.1:" + s.port }

// waitDrop waits for the server to log its next dropped client and
// requires that the line names the reason want.
func (s *hostileServer) waitDrop(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		lines := strings.Split(strings.TrimSpace(s.log.String()), "\n")
		var drops []string
		for _, l := range lines {
			if strings.HasSuffix(l, dropLine) {
				drops = append(drops, l)
			}
		}
		if len(drops) > s.drops {
			require.Len(t, drops, s.drops+1, "one drop per attack")
			l := drops[s.drops]
			s.drops++
			require.True(t, strings.HasPrefix(l, "iwarp-perf: client 127.0.0.1:"), "%q", l)
			require.Contains(t, l, want)
			t.Logf("server: %s", strings.TrimSuffix(l, dropLine))
			return
		}
		require.True(t, time.Now().Before(deadline), "the server dropped no client (want %q); its log:\n%s", want, s.log.String())
		select {
		case c := <-s.code:
			t.Fatalf("server exited %d: %s", c, s.log.String())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// attacker is one hostile client: the parameters and MPA configuration of
// a legitimate client of the server, and its own device.
type attacker struct {
	t   *testing.T
	ctx context.Context
	s   *hostileServer
	p   *Params
	cfg verbs.ConnConfig
	dev *verbs.Device

	// last is the socket of the last QP it dialled; TestServerBusy dials
	// two at once.
	last atomic.Pointer[net.TCPConn]
}

// newAttacker returns an attacker whose QPs dial through it, so that it
// can write to their sockets behind the QPs' backs.
func newAttacker(t *testing.T, ctx context.Context, s *hostileServer, p *Params) *attacker {
	dev, err := verbs.Open(verbs.DeviceAttr{})
	require.NoError(t, err)
	a := &attacker{t: t, ctx: ctx, s: s, p: p, cfg: connConfig(p, true), dev: dev}
	a.cfg.DialContext = func(ctx context.Context, network, addr string) (*net.TCPConn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		a.last.Store(c.(*net.TCPConn))
		return c.(*net.TCPConn), nil
	}
	return a
}

// ctl returns a control QP, closed with the test.
func (a *attacker) ctl() *ctlQP {
	c, err := newCtlQP(a.dev)
	require.NoError(a.t, err)
	a.t.Cleanup(c.close)
	return c
}

func (a *attacker) hello(sym symmetric, session uint64) []byte {
	b, err := json.Marshal(hello{Session: session, Params: sym})
	require.NoError(a.t, err)
	return append([]byte(helloPrefix), b...)
}

// native dials a control QP with a hello of the server's parameters.
func (a *attacker) native(session uint64) *ctlQP {
	c := a.ctl()
	err := c.qp.Dial(a.ctx, "tcp", a.s.addr(), withPD(a.cfg, a.hello(a.p.symmetric(), session)))
	pd := c.qp.PeerPrivateData()
	require.NoError(a.t, err)
	require.Equal(a.t, okReply, string(pd))
	return c
}

// nativeQPs dials the test's QPs of session.
func (a *attacker) nativeQPs(session uint64) {
	cq, err := a.dev.CreateCQ(16)
	require.NoError(a.t, err)
	pd := a.dev.AllocPD()
	for i := range a.p.QPs {
		qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, IRD: a.p.Outs, ORD: a.p.Outs,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
		require.NoError(a.t, err)
		a.t.Cleanup(func() { qp.Close() })
		err = qp.Dial(a.ctx, "tcp", a.s.addr(), withPD(a.cfg, []byte(fmt.Sprintf("%s%d %d", qpPrefix, session, i))))
		require.NoError(a.t, err)
	}
}

// perftest dials a control QP as perftest's clients do (no private data).
// false: the server refused it (the atomic tests).
func (a *attacker) perftest() (*ctlQP, bool) {
	c := a.ctl()
	err := c.qp.Dial(a.ctx, "tcp", a.s.addr(), a.cfg)
	if a.p.Test.verb() == verbAtomic {
		var rej *mpa.RejectError
		require.ErrorAs(a.t, err, &rej)
		return nil, false
	}
	require.NoError(a.t, err)
	return c, true
}

// xchg is one message of perftest's exchange, the client's side.
func (a *attacker) xchg(c *ctlQP, msg []byte) []byte {
	require.NoError(a.t, c.sendRaw(a.ctx, msg))
	b, err := c.recvRaw(a.ctx)
	require.NoError(a.t, err)
	return b
}

// badFPDU is a Send FPDU whose CRC is wrong.
func badFPDU() []byte {
	ulpdu := ddp.AppendUntagged(nil, true, rdmap.Ctrl(rdmap.OpSend), 0, 0, 1, 0)
	ulpdu = append(ulpdu, "not the message you expect"...)
	b := mpa.AppendFPDU(nil, ulpdu, true)
	b[len(b)-1] ^= 0x5a
	return b
}

// hostileAttack is one hostile client; it returns what the server's log
// must say of it, after the attack has made the server drop it.
type hostileAttack struct {
	name string
	run  func(a *attacker) string
}

var hostileAttacks = []hostileAttack{
	{"silent after the hello", func(a *attacker) string {
		a.native(1)
		return "waiting for the client's QPs: QP 0 of"
	}},
	{"silent after the MPA start-up", func(a *attacker) string {
		if _, ok := a.perftest(); !ok {
			return "atomic tests do not support"
		}
		return "perftest exchange (version): " + silence
	}},
	{"silent during the test", func(a *attacker) string {
		// The whole set-up and the start of the test, then nothing: the
		// server waits in the measurement or for the Report.
		x, err := DialExchange(a.ctx, a.dev, a.s.addr(), a.cfg, a.p)
		require.NoError(a.t, err)
		a.t.Cleanup(func() { x.Close() })
		e, err := newEndpoint(a.dev, a.p)
		require.NoError(a.t, err)
		a.t.Cleanup(e.close)
		require.NoError(a.t, e.postRecvs())
		require.NoError(a.t, x.Connect(a.ctx, e.verbsQPs()))
		remote, err := x.SwapBufs(a.ctx, e.localInfo())
		require.NoError(a.t, err)
		require.NoError(a.t, e.setRemote(remote))
		require.NoError(a.t, x.Sync(a.ctx))
		return "the test: " + silence
	}},
	{"closes after the hello and its QPs", func(a *attacker) string {
		c := a.native(3)
		a.nativeQPs(3)
		c.qp.Close()
		return "control QP"
	}},
	{"closes in perftest's exchange", func(a *attacker) string {
		c, ok := a.perftest()
		if !ok {
			return "atomic tests do not support"
		}
		a.xchg(c, perftest.Version("6.06"))
		c.qp.Close()
		return "perftest exchange (cycle buffer)"
	}},
	{"garbage for the buffer message", func(a *attacker) string {
		c := a.native(4)
		a.nativeQPs(4)
		require.NoError(a.t, c.send(a.ctx, 'Z', []byte("\x00\xff garbage")))
		return "protocol error: peer sent message 'Z', expected 'B'"
	}},
	{"garbage for perftest's version", func(a *attacker) string {
		c, ok := a.perftest()
		if !ok {
			return "atomic tests do not support"
		}
		require.NoError(a.t, c.sendRaw(a.ctx, bytes.Repeat([]byte{0xa5}, 100)))
		return "perftest exchange (version): the peer sent 100 octets, expected [16]"
	}},
	{"garbage after the MPA Request", func(a *attacker) string {
		// Not FPDUs at all, in place of the first FPDU (or of the RTR).
		conn, err := net.Dial("tcp", a.s.addr())
		require.NoError(a.t, err)
		defer conn.Close()
		m := a.cfg.MPA
		m.IRD, m.ORD = 1, 1
		req, err := mpa.BuildRequest(m, a.hello(a.p.symmetric(), 5))
		require.NoError(a.t, err)
		b, err := req.Append(nil)
		require.NoError(a.t, err)
		_, err = conn.Write(b)
		require.NoError(a.t, err)
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		rep, err := mpa.ReadFrame(conn, true)
		require.NoError(a.t, err)
		require.False(a.t, rep.Reject)
		_, err = conn.Write(bytes.Repeat([]byte{0xa5, 0x00, 0xff, 0x13}, 1024))
		require.NoError(a.t, err)
		return ""
	}},
	{"absurd sizes in the hello", func(a *attacker) string {
		sym := a.p.symmetric()
		huge := func(n uint64) int { return int(min(n, math.MaxInt)) } // as large as int holds
		sym.Size, sym.QPs, sym.Iters, sym.All, sym.RxDepth = huge(1<<40), 1<<30, huge(1<<62), true, 1<<30
		c := a.ctl()
		err := c.qp.Dial(a.ctx, "tcp", a.s.addr(), withPD(a.cfg, a.hello(sym, 6)))
		var rej *mpa.RejectError
		require.ErrorAs(a.t, err, &rej)
		require.Contains(a.t, string(rej.PrivateData), "size (-s) mismatch")
		return "different parameters: size (-s) mismatch"
	}},
	{"perftest page size of 1 GiB", func(a *attacker) string {
		c, ok := a.perftest()
		if !ok {
			return "atomic tests do not support"
		}
		a.xchg(c, perftest.Version("6.06"))
		a.xchg(c, perftest.Int(1<<30))
		return "the peer's page size of 1073741824 octets would have us register"
	}},
	{"bad CRC after the hello", func(a *attacker) string {
		c := a.native(7)
		crc := c.qp.Params().CRC
		_, err := a.last.Load().Write(badFPDU())
		require.NoError(a.t, err)
		switch {
		case !crc:
			// Nothing checks it: a message the server does not read while
			// it waits for the QPs.
			return "waiting for the client's QPs: QP 0 of"
		case a.p.Markers == MarkersNone:
			return "MPA CRC error"
		}
		// Among the markers: a CRC error where no marker falls inside the
		// injected FPDU (as it usually lands), else a marker error; the
		// server sees it while it still accepts or on the control QP,
		// whichever the race between them gives (CI saw both).
		return "sent Terminate (LLP MPA error: MPA "
	}},
	{"bad CRC after perftest's set-up", func(a *attacker) string {
		c, ok := a.perftest()
		if !ok {
			return "atomic tests do not support"
		}
		a.xchg(c, perftest.Version("6.06"))
		a.xchg(c, perftest.Int(perftest.PageSize))
		a.xchg(c, perftest.Int(perftest.CacheLine))
		a.xchg(c, perftest.MTU(perftest.MTUEnum1024))
		a.xchg(c, make([]byte, perftest.DestLen))
		_, err := a.last.Load().Write(badFPDU())
		require.NoError(a.t, err)
		return "control QP"
	}},
	{"floods the control QP", func(a *attacker) string {
		c := a.native(8)
		for range 2 * ctlRecvs {
			if c.send(a.ctx, 'S', []byte("{}")) != nil {
				break // the server has had enough
			}
		}
		return "control QP"
	}},
}

// TestHostileClients attacks a server of every RDMA test, with a selection
// of options, and then requires it to serve a legitimate client.
func TestHostileClients(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"write_bw", []string{"write_bw", "-n", "20", "-s", "4096", "-q", "2"}},
		{"read_bw/crc-required", []string{"read_bw", "-n", "20", "-s", "4096", "--crc", "required"}},
		{"send_bw/crc-strict", []string{"send_bw", "-n", "50", "-s", "1024", "-r", "8", "--crc", "strict"}},
		{"send_bw/perftest-server", []string{"send_bw", "-n", "50", "-s", "1024", "-r", "8", "-R"}},
		{"send_bw/srq", []string{"send_bw", "-n", "50", "-s", "1024", "-r", "8", "-q", "2", "--use_srq"}},
		{"write_lat/mpa-rev-1", []string{"write_lat", "-n", "20", "--mpa-rev", "1", "--crc", "off"}},
		{"write_lat/poll/p2p", []string{"write_lat", "-n", "20", "--lat-wait=poll", "--p2p", "write"}},
		{"read_lat/p2p", []string{"read_lat", "-n", "20", "--p2p", "read"}},
		{"send_lat/markers", []string{"send_lat", "-n", "20", "--markers", "both"}},
		{"send_lat/poll", []string{"send_lat", "-n", "20", "-s", "300", "--lat-wait=poll"}},
		{"atomic_bw", []string{"atomic_bw", "-n", "50", "-q", "2"}},
		{"atomic_lat/poll", []string{"atomic_lat", "-n", "20", "--lat-wait=poll"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkGoroutines(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			s := startHostileServer(ctx, t, c.args, hostileTimeout)
			cp, _, err := Parse(append(append([]string(nil), c.args...), "--exchange-timeout", hostileTimeout.String(), "127.0.0.1"))
			require.NoError(t, err)
			if cp.Perftest { // the server's -R; its clients are iwarp-perf's
				cp, _, err = Parse(append(withoutR(c.args), "--exchange-timeout", hostileTimeout.String(), "127.0.0.1"))
				require.NoError(t, err)
			}
			for _, h := range hostileAttacks {
				a := newAttacker(t, ctx, s, cp)
				s.waitDrop(t, h.run(a))
			}
			// And now a client that means it.
			var out, errb bytes.Buffer
			code := MainContext(ctx, append(withoutR(c.args), "-p", s.port, "127.0.0.1"), &out, &errb)
			require.Equal(t, 0, code, "client: %s", errb.String())
			select {
			case code = <-s.code:
			case <-time.After(10 * time.Second):
				t.Fatal("the server did not exit after its run")
			}
			require.Equal(t, 0, code, "server: %s", s.log.String())
			require.Len(t, table(t, out.String()), 1)
			require.Equal(t, len(hostileAttacks), strings.Count(s.log.String(), dropLine), "%s", s.log.String())
		})
	}
}

// withoutR drops -R from args.
func withoutR(args []string) []string {
	var out []string
	for _, a := range args {
		if a != "-R" {
			out = append(out, a)
		}
	}
	return out
}

// checkGoroutines fails the test if it leaves more goroutines running
// than there were when it started.
func checkGoroutines(t *testing.T) {
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > base {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				n := runtime.Stack(buf, true)
				t.Errorf("%d goroutines, %d before the test:\n%s", runtime.NumGoroutine(), base, buf[:n])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// The TCP tests' server drops a client that is silent, or sends no hello,
// and serves the next.
func TestHostileTCPClients(t *testing.T) {
	checkGoroutines(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := []string{"tcp_lat", "-n", "20"}
	s := startHostileServer(ctx, t, args, hostileTimeout)
	conn, err := net.Dial("tcp", s.addr())
	require.NoError(t, err)
	defer conn.Close()
	s.waitDrop(t, "hello: "+silence)
	conn2, err := net.Dial("tcp", s.addr())
	require.NoError(t, err)
	defer conn2.Close()
	_, err = conn2.Write([]byte{0, 0, 0, 3, 'Q', '{', '}'})
	require.NoError(t, err)
	s.waitDrop(t, "not an iwarp-perf hello")
	conn3, err := net.Dial("tcp", s.addr())
	require.NoError(t, err)
	defer conn3.Close()
	_, err = conn3.Write([]byte{0xff, 0xff, 0xff, 0xff})
	require.NoError(t, err)
	s.waitDrop(t, "protocol error: control frame of 4294967295 octets")

	var out, errb bytes.Buffer
	code := MainContext(ctx, append(args, "-p", s.port, "127.0.0.1"), &out, &errb)
	require.Equal(t, 0, code, "client: %s", errb.String())
	require.Equal(t, 0, <-s.code, "server: %s", s.log.String())
}

// --runs: a server serves that many clients, one after the other.
func TestServerRuns(t *testing.T) {
	checkGoroutines(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := []string{"send_lat", "-n", "20"}
	s := startHostileServer(ctx, t, append(args, "--runs", "3"), hostileTimeout)
	for i := range 3 {
		var out, errb bytes.Buffer
		code := MainContext(ctx, append(args, "-p", s.port, "127.0.0.1"), &out, &errb)
		require.Equal(t, 0, code, "client %d: %s", i, errb.String())
		require.Len(t, table(t, out.String()), 1)
	}
	require.Equal(t, 0, <-s.code, "server: %s", s.log.String())
	require.Equal(t, 3, strings.Count(s.out.String(), "Waiting for client to connect"), "the greeting before each client")
	require.Equal(t, 3, strings.Count(s.out.String(), "One client at a time"))
	require.Len(t, table(t, s.out.String()), 1, "the first client's table")
}

// The limits' flags and defaults: every test perftest can run fits the
// default --max-region, unless -a goes with many QPs.
func TestLimitFlags(t *testing.T) {
	for s, want := range map[string]int64{"1048576": 1 << 20, "64MiB": 64 << 20, "1GiB": 1 << 30, "512k": 512 << 10,
		"2G": 2 << 30, "3 MB": 3 << 20} {
		n, err := parseSize(s)
		require.NoError(t, err, s)
		require.Equal(t, want, n, s)
	}
	for _, s := range []string{"", "lots", "1.5GiB", "1TiB", "-1M", "99999999999G"} {
		_, err := parseSize(s)
		require.Error(t, err, s)
	}
	for s, want := range map[string]time.Duration{"15": 15 * time.Second, "0.25": 250 * time.Millisecond, "500ms": 500 * time.Millisecond, "2m": 2 * time.Minute} {
		d, err := parseSeconds(s)
		require.NoError(t, err, s)
		require.Equal(t, want, d, s)
	}

	p, _, err := Parse([]string{"write_bw"})
	require.NoError(t, err)
	require.Equal(t, DefExchangeTimeout, p.exchangeTimeout())
	require.Equal(t, int64(DefMaxRegion), p.maxRegion())
	require.Equal(t, 1, p.Runs)
	require.Zero(t, connConfig(p, true).ReplyTimeout, "the default leaves verbs' own")
	p, _, err = Parse([]string{"write_bw", "--exchange-timeout", "2", "--max-region", "1GiB", "--runs", "0"})
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, p.exchangeTimeout())
	require.Equal(t, 2*time.Second, connConfig(p, false).RequestTimeout)
	require.Equal(t, int64(1<<30), p.maxRegion())
	require.Zero(t, p.Runs)

	for _, args := range [][]string{
		{"write_bw", "-a"}, {"read_bw", "-a", "-q", "16"}, {"send_bw", "-a", "-R"}, {"write_bw", "-q", "1024"},
		{"send_bw", "-q", "1024", "-s", "131072"}, {"write_lat", "-a"}, {"atomic_bw", "-q", "1024"},
		{"tcp_bw", "-q", "1024", "-s", "8388608"}, // no memory regions
	} {
		_, _, err := Parse(args)
		require.NoError(t, err, "%v", args)
	}
	_, _, err = Parse([]string{"write_bw", "-a", "-q", "17"})
	require.EqualError(t, err, "the memory regions of 17 QPs take 272 MiB (2 × 8 MiB each), more than --max-region 256 MiB")
	_, _, err = Parse([]string{"write_bw", "-a", "-q", "17", "--max-region", "1G"})
	require.NoError(t, err)

	// What a perftest peer's page size makes of our regions.
	p, _, err = Parse([]string{"write_bw", "-s", "2", "-q", "4", "-R"})
	require.NoError(t, err)
	require.Equal(t, int64(4*2*4096), p.regionBytes(perftest.PageSize))
	require.Equal(t, int64(4*2*65536), p.regionBytes(65536), "a 64 KiB page (arm64, ppc64)")
	require.Equal(t, int64(4*2<<30), p.regionBytes(1<<30))
}

// While a client holds the server, others are held for busyWait (in case
// its test ends) and then refused as busy, not left waiting for a Reply;
// once it is dropped, the next is served.
func TestServerBusy(t *testing.T) {
	checkGoroutines(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := []string{"write_bw", "-n", "20", "-s", "4096"}
	s := startHostileServer(ctx, t, args, 2*time.Second)
	cp, _, err := Parse(append(args, "127.0.0.1"))
	require.NoError(t, err)
	a := newAttacker(t, ctx, s, cp)
	a.native(1) // and nothing more

	var wg sync.WaitGroup
	for _, pd := range [][]byte{a.hello(cp.symmetric(), 2), nil} { // iwarp-perf's client and perftest's
		c := a.ctl()
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := c.qp.Dial(ctx, "tcp", s.addr(), withPD(a.cfg, pd))
			took := time.Since(start)
			var rej *mpa.RejectError
			if !errors.As(err, &rej) {
				t.Errorf("not refused: %v", err)
				return
			}
			if !strings.Contains(string(rej.PrivateData), "busy") {
				t.Errorf("refused with %q", rej.PrivateData)
			}
			if took < busyWait-100*time.Millisecond || took > busyWait+500*time.Millisecond {
				t.Errorf("refused after %v, want about %v", took, busyWait)
			}
		}()
	}
	wg.Wait()
	s.waitDrop(t, "waiting for the client's QPs: QP 0 of 1: nothing from the peer for 2s")

	var out, errb bytes.Buffer
	code := MainContext(ctx, append(args, "-p", s.port, "127.0.0.1"), &out, &errb)
	require.Equal(t, 0, code, "client: %s", errb.String())
	require.Equal(t, 0, <-s.code, "server: %s", s.log.String())
}

// fullListener is a listening socket whose accept queue is full and never
// drained: a SYN to it goes unanswered, as to a host that is down.
func fullListener(t *testing.T) string {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	t.Cleanup(func() { syscall.Close(fd) })
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	require.NoError(t, syscall.Listen(fd, 0))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	for range 4 { // past the backlog: the kernel drops the next SYNs
		d := net.Dialer{Timeout: 300 * time.Millisecond}
		if c, err := d.Dial("tcp", addr); err == nil {
			t.Cleanup(func() { c.Close() })
		}
	}
	return addr
}

// A client whose server never answers the SYN gives up after
// --exchange-timeout, as with every other wait on the peer; it waited for
// the kernel's own limit (about two minutes).
func TestClientConnectTimeout(t *testing.T) {
	defer test.CheckRoutines(t)()
	addr := fullListener(t)
	host, port, _ := net.SplitHostPort(addr)
	for _, args := range [][]string{{"write_bw"}, {"write_bw", "-R"}, {"tcp_bw"}} {
		p, _, err := Parse(append(args, "-n", "5", "-p", port, "--exchange-timeout", "1", host))
		require.NoError(t, err)
		// No deadline of the test's own: without --exchange-timeout's the
		// dial ends with the kernel's ETIMEDOUT, two minutes on.
		_, err = Run(context.Background(), p, io.Discard)
		require.ErrorContains(t, err, "connecting", "%v", args)
		var te *TimeoutError
		if !errors.As(err, &te) {
			require.ErrorIs(t, err, os.ErrDeadlineExceeded, "%v: our deadline, not the kernel's", args)
		}
	}
}

// A tcp_* client that comes while a run accepts its data connections is
// held for the next run and served then; it was read as a data connection
// and reset.
func TestTCPServerHoldsNextClient(t *testing.T) {
	defer test.CheckRoutines(t)()
	p, _, err := Parse([]string{"tcp_bw", "-n", "5", "-q", "2"})
	require.NoError(t, err)
	ln, err := listenTCP(context.Background(), p, "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	tl := &tcpListener{Listener: ln}
	defer tl.closeHeld()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addr := ln.Addr().String()
	type dialed struct {
		s   *tcpSide
		err error
	}
	ac := make(chan dialed, 1)
	go func() { s, err := dialTCPSide(ctx, p, addr); ac <- dialed{s, err} }()
	srvA, err := acceptTCPSide(ctx, p, tl)
	require.NoError(t, err)
	defer srvA.close()
	a := <-ac
	require.NoError(t, a.err)
	defer a.s.close()
	// Client B's control connection and hello, before A's data connections.
	b, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer b.Close()
	bctl := &tcpCtl{conn: b, r: bufio.NewReader(b), session: 7}
	hb, _ := json.Marshal(hello{Session: 7, Params: p.symmetric()})
	require.NoError(t, bctl.send(ctx, 'H', hb))
	cc := make(chan error, 1)
	go func() {
		conns, err := a.s.connect(ctx)
		for _, c := range conns {
			c.Close()
		}
		cc <- err
	}()
	conns, err := srvA.connect(ctx)
	require.NoError(t, err)
	for _, c := range conns {
		c.Close()
	}
	require.NoError(t, <-cc)
	require.Len(t, tl.held, 1, "client B, held")
	srvB, err := acceptTCPSide(ctx, p, tl)
	require.NoError(t, err, "client B served next")
	defer srvB.close()
	k, _, err := bctl.recv(ctx)
	require.NoError(t, err)
	require.Equal(t, byte('H'), k, "client B's answer")
}
