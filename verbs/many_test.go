//go:build linux

package verbs

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
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
