package verbs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The many-QP measurement runs its two ends in two processes: this one
// holds the client QPs, and a child process (this test binary again, running
// TestManyQPsServer with $IWARP_MANY_SERVER set) the server QPs, so that
// each process needs one descriptor a pair and each side's memory is
// measured on its own. The child reports on its stdout in lines
//
//	iwarp-many ready addr=127.0.0.1:41023 region=<RemoteBuffer, hex> rss=<KiB> fds=<n>
//	iwarp-many connected rss=<KiB> fds=<n>
//	iwarp-many done recv=<n> verified=<n> rss=<KiB> fds=<n>
//
// (rss: its VmRSS growth since it started; fds: its open descriptors),
// and exits when its stdin closes. Everything else it writes, and its
// stderr, is kept for the error message if anything fails.

const (
	manyServerEnv = "IWARP_MANY_SERVER" // in the child: the number of pairs to serve
	manyPrefix    = "iwarp-many "       // the child's report lines
	manySlot      = 1024                // octets each client writes, per pair
	manyMsg       = 16                  // receive buffer per pair, each side
	manySeed      = 0x6d616e79          // the Writes' pattern (manyPattern)
	manyFDSpare   = 200                 // descriptors a side needs beside one per pair
)

var manyCap = QPCap{MaxSendWR: 4, MaxRecvWR: 4}

// BenchmarkManyQPs connects IWARP_PAIRS (10000) QP pairs over loopback,
// the clients in this process and the servers in a child process, moves
// data on every pair (each client RDMA-Writes 1 KiB and Sends "ping", each
// server checks the Write and answers "pong") and reports each process's
// RSS growth per QP and the time to connect. A measurement, run by hand:
//
//	go test -run '^$' -bench ManyQPs -benchtime 1x ./verbs/
//
// Each process needs one descriptor a pair (RLIMIT_NOFILE is raised to the
// hard limit, or past it given CAP_SYS_RESOURCE; fewer pairs if that is
// not enough, as the log says).
func BenchmarkManyQPs(b *testing.B) {
	pairs := 10000
	if n, err := strconv.Atoi(os.Getenv("IWARP_PAIRS")); err == nil && n > 0 {
		pairs = n
	}
	lim, err := fdRoom(uint64(pairs + manyFDSpare))
	require.NoError(b, err)
	if lim < uint64(pairs+manyFDSpare) {
		pairs = int(lim) - manyFDSpare
		b.Logf("RLIMIT_NOFILE cannot go past %d here: %d pairs", lim, pairs)
	}
	var r manyResult
	for b.Loop() {
		r = runManyQPs(b, pairs, 10*time.Minute)
	}
	b.ReportMetric(float64(pairs), "pairs")
	b.ReportMetric(r.client.perQP(pairs), "KiB-RSS/client-QP")
	b.ReportMetric(r.server.perQP(pairs), "KiB-RSS/server-QP")
	b.ReportMetric(r.connect.Seconds(), "s-to-connect")
	b.ReportMetric(r.move.Seconds(), "s-to-move")
	b.Log(r.String(pairs))
}

// TestManyQPsTwoProcesses runs BenchmarkManyQPs's path with a few pairs:
// the child process and its reports, every Write checked in the server's
// region, every answer checked here.
func TestManyQPsTwoProcesses(t *testing.T) {
	checkRoutines(t)
	const pairs = 200
	r := runManyQPs(t, pairs, time.Minute)
	require.GreaterOrEqual(t, r.client.fds, pairs)
	require.GreaterOrEqual(t, r.server.fds, pairs)
	t.Log(r.String(pairs))
}

// TestManyQPsServer is not a test of its own: it is the server side of
// BenchmarkManyQPs and TestManyQPsTwoProcesses, in the child process they
// start with $IWARP_MANY_SERVER set to the number of pairs.
func TestManyQPsServer(t *testing.T) {
	v := os.Getenv(manyServerEnv)
	if v == "" {
		t.Skip("the server process of BenchmarkManyQPs")
	}
	pairs, err := strconv.Atoi(v)
	if err == nil {
		err = serveManyQPs(pairs, os.Stdin, os.Stdout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "many-QP server: %v\n", err)
		os.Exit(1)
	}
}

// manySide is what one process reports: its RSS growth in KiB once
// connected and once every pair has moved data, and its open descriptors.
type manySide struct {
	rssConnected, rssDone uint64
	fds                   int
}

func (s manySide) perQP(pairs int) float64 { return float64(s.rssDone) / float64(pairs) }

type manyResult struct {
	connect, move  time.Duration
	client, server manySide
}

func (r manyResult) String(pairs int) string {
	return fmt.Sprintf("%d pairs, clients here and servers in a child process: connected in %v, every pair moved data in %v; "+
		"RSS +%d MiB connected, +%d MiB after = %.1f KiB per QP here (%d fds); "+
		"server RSS +%d MiB connected, +%d MiB after = %.1f KiB per QP, %d KiB of it the region written (%d fds)",
		pairs, r.connect.Round(time.Millisecond), r.move.Round(time.Millisecond),
		r.client.rssConnected>>10, r.client.rssDone>>10, r.client.perQP(pairs), r.client.fds,
		r.server.rssConnected>>10, r.server.rssDone>>10, r.server.perQP(pairs), manySlot>>10, r.server.fds)
}

// manyPattern is what the clients write: pair i writes the manySlot
// octets at offset i, so that every pair's are distinct.
func manyPattern(pairs int) []byte {
	b := make([]byte, pairs+manySlot)
	fill(b, manySeed)
	return b
}

// runManyQPs starts the server process, connects pairs client QPs to it,
// moves data on every pair and stops the server; timeout bounds it all.
func runManyQPs(tb testing.TB, pairs int, timeout time.Duration) manyResult {
	tb.Helper()
	var r manyResult
	rss0 := rssKiB(tb)
	srv := startManyServer(tb, pairs, timeout)
	ctx := srv.alive

	d := openDev(DeviceAttr{MaxQP: pairs + 16})
	defer d.Close()
	pd := d.AllocPD()
	cq, err := d.CreateCQ(4 * pairs)
	require.NoError(tb, err)
	src, err := pd.RegMR(manyPattern(pairs), 0)
	require.NoError(tb, err)
	pongs, err := pd.RegMR(make([]byte, pairs*manyMsg), LocalWrite)
	require.NoError(tb, err)
	clients := make([]*QP, pairs)
	for i := range clients {
		clients[i], err = pd.CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq, Cap: manyCap, IRD: -1, ORD: -1})
		require.NoError(tb, err)
		_, err = clients[i].PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{pongs.SGE(i*manyMsg, manyMsg)}})
		require.NoError(tb, err)
	}
	defer func() {
		for _, qp := range clients {
			qp.Abort()
		}
	}()

	ready := srv.expect(tb, "ready")
	addr := ready["addr"]
	rbWire, err := hex.DecodeString(ready["region"])
	require.NoError(tb, err, "the server's region")
	region, err := ParseRemoteBuffer(rbWire)
	require.NoError(tb, err, "the server's region")
	require.GreaterOrEqual(tb, uint64(region.Len), uint64(pairs*manySlot), "the server's region")

	// Each client tells the server its pair number in its private data.
	start := time.Now()
	dctx, failed := context.WithCancelCause(ctx)
	defer failed(nil)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range min(64, pairs) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				cfg := ConnConfig{PrivateData: binary.BigEndian.AppendUint32(nil, uint32(i))}
				if err := clients[i].Dial(dctx, "tcp", addr, cfg); err != nil {
					failed(fmt.Errorf("pair %d: %w", i, err))
				}
			}
		}()
	}
feed:
	for i := range pairs {
		select {
		case jobs <- i:
		case <-dctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if dctx.Err() != nil {
		srv.fail(tb, "connecting", context.Cause(dctx))
	}
	r.server.rssConnected, _ = usage(tb, srv.expect(tb, "connected"))
	r.connect = time.Since(start)
	r.client.rssConnected = rssKiB(tb) - rss0

	// Every pair moves data: a Write of 1 KiB and a Send from the client
	// (the Send completes the server's receive after the Write is placed),
	// a Send back from the server.
	start = time.Now()
	for i, qp := range clients {
		_, err := qp.PostSend(
			SendWR{ID: uint64(i), Opcode: OpRDMAWrite, SGL: []SGE{src.SGE(i, manySlot)},
				RemoteAddr: region.Addr + uint64(i*manySlot), RKey: region.RKey},
			SendWR{ID: uint64(i), Opcode: OpSend, Flags: Inline, InlineData: []byte("ping")})
		require.NoError(tb, err)
	}
	wcs := make([]WC, 256)
	seen := make([]bool, pairs)
	for got := 0; got < pairs; {
		n, err := cq.PollWait(ctx, wcs)
		if err != nil {
			srv.fail(tb, fmt.Sprintf("waiting for the answers (%d of %d in)", got, pairs), context.Cause(ctx))
		}
		for _, wc := range wcs[:n] {
			if wc.Status != Success {
				srv.fail(tb, "client", fmt.Errorf("%v; QP: %v", wc, wc.QP.Err()))
			}
			if wc.Opcode != WCRecv {
				continue
			}
			i := int(wc.ID)
			require.False(tb, seen[i], "pair %d answered twice", i)
			seen[i] = true
			require.Equal(tb, "pong", string(pongs.Buf()[i*manyMsg:][:wc.ByteLen]), "pair %d", i)
			got++
		}
	}
	r.move = time.Since(start)
	r.client.rssDone = rssKiB(tb) - rss0
	r.client.fds = fdCount(tb)
	done := srv.expect(tb, "done")
	require.Equal(tb, strconv.Itoa(pairs), done["recv"], "receives the server completed")
	require.Equal(tb, strconv.Itoa(pairs), done["verified"], "Writes the server found in its region")
	r.server.rssDone, r.server.fds = usage(tb, done)
	if err := srv.stop(false); err != nil {
		srv.fail(tb, "server process", err)
	}
	return r
}

// serveManyQPs is the server process: it accepts pairs connections, answers
// each pair's Send with a Send after checking the Write before it, reports
// on out and returns when in closes.
func serveManyQPs(pairs int, in io.Reader, out io.Writer) error {
	rss0, err := readRSS()
	if err != nil {
		return err
	}
	if lim, err := fdRoom(uint64(pairs + manyFDSpare)); err != nil || lim < uint64(pairs+manyFDSpare) {
		return fmt.Errorf("RLIMIT_NOFILE %d for %d pairs: %v", lim, pairs, err)
	}
	// The parent closes our stdin to stop us, or by dying.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		io.Copy(io.Discard, in)
		cancel(errors.New("stdin closed"))
	}()
	report := func(what string, kv ...any) error {
		rss, err := readRSS()
		if err != nil {
			return err
		}
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			return err
		}
		line := manyPrefix + what + fmt.Sprintf(strings.Repeat(" %s=%v", len(kv)/2), kv...)
		_, err = fmt.Fprintf(out, "%s rss=%d fds=%d\n", line, rss-rss0, len(fds))
		return err
	}

	d, err := Open(DeviceAttr{MaxQP: pairs + 16})
	if err != nil {
		return err
	}
	defer d.Close()
	pd := d.AllocPD()
	cq, err := d.CreateCQ(4 * pairs)
	if err != nil {
		return err
	}
	region, err := pd.RegMR(make([]byte, pairs*manySlot), LocalWrite|RemoteWrite)
	if err != nil {
		return err
	}
	pings, err := pd.RegMR(make([]byte, pairs*manyMsg), LocalWrite)
	if err != nil {
		return err
	}
	qps := make([]*QP, pairs)
	for k := range qps {
		if qps[k], err = pd.CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq, Cap: manyCap, IRD: -1, ORD: -1}); err != nil {
			return err
		}
	}
	ln, err := d.Listen(ctx, "tcp", "127.0.0.1:0", ConnConfig{Backlog: pairs})
	if err != nil {
		return err
	}
	defer ln.Close()
	if err := report("ready", "addr", ln.Addr(), "region", hex.EncodeToString(region.RemoteBuffer().Append(nil))); err != nil {
		return err
	}

	// Accept in request order, each request onto the next QP, with the
	// receive for its pair's Send posted first.
	paired := make([]bool, pairs)
	for k, qp := range qps {
		req, err := ln.GetRequest(ctx)
		if err != nil {
			return fmt.Errorf("request %d of %d: %w", k, pairs, errors.Join(err, context.Cause(ctx)))
		}
		if len(req.PrivateData) != 4 {
			return fmt.Errorf("request %d: %d octets of private data, want a pair number", k, len(req.PrivateData))
		}
		i := int(binary.BigEndian.Uint32(req.PrivateData))
		if i >= pairs || paired[i] {
			return fmt.Errorf("request %d: pair %d twice or out of range", k, i)
		}
		paired[i] = true
		if _, err := qp.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{pings.SGE(i*manyMsg, manyMsg)}}); err != nil {
			return err
		}
		if err := req.Accept(ctx, qp, nil); err != nil {
			return fmt.Errorf("pair %d: %w", i, err)
		}
	}
	ln.Close()
	if err := report("connected"); err != nil {
		return err
	}

	want := manyPattern(pairs)
	wcs := make([]WC, 256)
	recv, verified := 0, 0
	for recv < pairs {
		n, err := cq.PollWait(ctx, wcs)
		if err != nil {
			return fmt.Errorf("%d of %d receives: %w", recv, pairs, errors.Join(err, context.Cause(ctx)))
		}
		for _, wc := range wcs[:n] {
			if wc.Status != Success {
				return fmt.Errorf("%v; QP: %v", wc, wc.QP.Err())
			}
			if wc.Opcode != WCRecv {
				continue
			}
			recv++
			i := int(wc.ID)
			if got := string(pings.Buf()[i*manyMsg:][:wc.ByteLen]); got != "ping" {
				return fmt.Errorf("pair %d sent %q, want \"ping\"", i, got)
			}
			if !bytes.Equal(region.Buf()[i*manySlot:][:manySlot], want[i:][:manySlot]) {
				return fmt.Errorf("pair %d: the %d octets written differ from the pattern", i, manySlot)
			}
			verified++
			if _, err := wc.QP.PostSend(SendWR{ID: wc.ID, Opcode: OpSend, Flags: Inline, InlineData: []byte("pong")}); err != nil {
				return fmt.Errorf("pair %d: %w", i, err)
			}
		}
	}
	if err := report("done", "recv", recv, "verified", verified); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// manyServer is the running server process of runManyQPs.
type manyServer struct {
	cmd      *exec.Cmd
	stdin    io.Closer
	lines    chan string   // report lines, without the prefix
	out      *tailBuffer   // its stderr and the rest of its stdout
	readDone chan struct{} // closed when its stdout has ended
	deadline context.Context
	alive    context.Context // ends with its stdout (cause errServerGone), or at the deadline
	stopped  bool
	werr     error // of Wait
	reported bool  // out is in a failure message already
}

var errServerGone = errors.New("the server process ended")

func startManyServer(tb testing.TB, pairs int, timeout time.Duration) *manyServer {
	tb.Helper()
	s := &manyServer{lines: make(chan string, 8), out: &tailBuffer{max: 64 << 10}, readDone: make(chan struct{})}
	var stopDeadline context.CancelFunc
	s.deadline, stopDeadline = context.WithTimeout(context.Background(), timeout)
	alive, gone := context.WithCancelCause(s.deadline)
	s.alive = alive
	s.cmd = exec.Command(os.Args[0], "-test.run=^TestManyQPsServer$", "-test.timeout="+(timeout+time.Minute).String())
	s.cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", manyServerEnv, pairs))
	s.cmd.Stderr = s.out
	stdin, err := s.cmd.StdinPipe()
	require.NoError(tb, err)
	stdout, err := s.cmd.StdoutPipe()
	require.NoError(tb, err)
	require.NoError(tb, s.cmd.Start())
	s.stdin = stdin
	go func() {
		defer close(s.readDone)
		defer gone(errServerGone)
		defer close(s.lines)
		br := bufio.NewReader(stdout)
		for {
			l, err := br.ReadString('\n')
			if rest, ok := strings.CutPrefix(l, manyPrefix); ok {
				select {
				case s.lines <- strings.TrimSpace(rest):
					continue
				default:
				}
			}
			s.out.Write([]byte(l))
			if err != nil {
				return
			}
		}
	}()
	tb.Cleanup(func() {
		s.stop(true)
		stopDeadline()
		if tb.Failed() && !s.reported {
			tb.Logf("the server process: %v; its output:\n%s", s.werr, s.out)
		}
	})
	return s
}

// stop closes the child's stdin, kills it if kill is set or if it has not
// exited a minute later, reaps it and returns Wait's error.
func (s *manyServer) stop(kill bool) error {
	if s.stopped {
		return s.werr
	}
	s.stopped = true
	s.stdin.Close()
	if kill {
		s.cmd.Process.Kill()
	} else {
		t := time.AfterFunc(time.Minute, func() { s.cmd.Process.Kill() })
		defer t.Stop()
	}
	<-s.readDone // Wait closes the pipe: reading it ends first
	s.werr = s.cmd.Wait()
	return s.werr
}

// expect returns the key=value fields of the child's next report, which
// must be what.
func (s *manyServer) expect(tb testing.TB, what string) map[string]string {
	tb.Helper()
	select {
	case l, ok := <-s.lines:
		if !ok {
			s.fail(tb, fmt.Sprintf("waiting for the server's %q", what), errServerGone)
		}
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != what {
			s.fail(tb, "the server", fmt.Errorf("reported %q, want %q", l, what))
		}
		kv := make(map[string]string)
		for _, x := range f[1:] {
			k, v, _ := strings.Cut(x, "=")
			kv[k] = v
		}
		return kv
	case <-s.deadline.Done():
		s.fail(tb, fmt.Sprintf("waiting for the server's %q", what), s.deadline.Err())
	}
	return nil
}

// usage reads the rss and fds of a report of the server's.
func usage(tb testing.TB, kv map[string]string) (rss uint64, fds int) {
	tb.Helper()
	rss, err := strconv.ParseUint(kv["rss"], 10, 64)
	require.NoError(tb, err, "the server's rss")
	fds, err = strconv.Atoi(kv["fds"])
	require.NoError(tb, err, "the server's fds")
	return rss, fds
}

// fail ends the test with err and, if the child has ended or ends within
// two seconds, how it ended and what it wrote.
func (s *manyServer) fail(tb testing.TB, what string, err error) {
	tb.Helper()
	select {
	case <-s.readDone:
	case <-time.After(2 * time.Second):
		tb.Fatalf("%s: %v", what, err)
	}
	werr := s.stop(false)
	s.reported = true
	tb.Fatalf("%s: %v\nthe server process ended (%v); its output:\n%s", what, err, werr, s.out)
}

// tailBuffer keeps the last max octets written to it.
type tailBuffer struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// fdRoom raises RLIMIT_NOFILE towards want (past the hard limit only with
// CAP_SYS_RESOURCE) and returns the limit it got.
func fdRoom(want uint64) (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	if rl.Cur >= want {
		return rl.Cur, nil
	}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: max(rl.Max, want)}) == nil {
		return want, nil
	}
	rl.Cur = rl.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	return rl.Cur, nil
}

func fdCount(tb testing.TB) int {
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(tb, err)
	return len(fds)
}

// rssKiB is this process's resident set (VmRSS).
func rssKiB(tb testing.TB) uint64 {
	n, err := readRSS()
	require.NoError(tb, err)
	return n
}

func readRSS() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			return strconv.ParseUint(f[1], 10, 64)
		}
	}
	return 0, errors.New("no VmRSS in /proc/self/status")
}
