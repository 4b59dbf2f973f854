package verbs

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkManyQPs connects IWARP_PAIRS (10000) QP pairs in one process
// over loopback, both ends here, moves data on every pair (each client
// Sends 64 octets and RDMA-Writes 1 KiB, each server answers with a Send),
// and reports the process's RSS per pair. A measurement, run by hand:
//
//	go test -run '^$' -bench ManyQPs -benchtime 1x ./verbs/
//
// It needs two descriptors a pair and raises RLIMIT_NOFILE (as root, past
// the hard limit if need be).
func BenchmarkManyQPs(b *testing.B) {
	pairs := 10000
	if n, err := strconv.Atoi(os.Getenv("IWARP_PAIRS")); err == nil && n > 0 {
		pairs = n
	}
	lim := uint64(2*pairs + 200)
	var rl syscall.Rlimit
	require.NoError(b, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl))
	if rl.Cur < lim {
		want := syscall.Rlimit{Cur: lim, Max: max(rl.Max, lim)}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			// Not allowed past the hard limit here (no CAP_SYS_RESOURCE):
			// as many pairs as it allows.
			rl.Cur = rl.Max
			require.NoError(b, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl))
			pairs = int(rl.Max-200) / 2
			b.Logf("RLIMIT_NOFILE cannot go past %d here (%v): %d pairs", rl.Max, err, pairs)
		}
	}
	rss0 := rssKiB(b)
	d := openDev(DeviceAttr{MaxQP: 2*pairs + 16})
	pd := d.AllocPD()
	ccq, err := d.CreateCQ(4 * pairs)
	require.NoError(b, err)
	scq, err := d.CreateCQ(4 * pairs)
	require.NoError(b, err)
	ln, err := d.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{Backlog: pairs})
	require.NoError(b, err)
	defer ln.Close()
	cap := QPCap{MaxSendWR: 4, MaxRecvWR: 4}
	srvBuf, err := pd.RegMR(make([]byte, pairs*1024), LocalWrite|RemoteWrite)
	require.NoError(b, err)
	cliBuf, err := pd.RegMR(make([]byte, 2048), LocalWrite)
	require.NoError(b, err)
	clients, servers := make([]*QP, pairs), make([]*QP, pairs)
	for i := range pairs {
		if clients[i], err = pd.CreateQP(QPConfig{SendCQ: ccq, RecvCQ: ccq, Cap: cap, IRD: -1, ORD: -1}); err == nil {
			servers[i], err = pd.CreateQP(QPConfig{SendCQ: scq, RecvCQ: scq, Cap: cap, IRD: -1, ORD: -1})
		}
		require.NoError(b, err)
		_, err = servers[i].PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{srvBuf.SGE(i*1024, 64)}})
		require.NoError(b, err)
		_, err = clients[i].PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{cliBuf.SGE(1024, 64)}})
		require.NoError(b, err)
	}
	defer func() {
		for i := range pairs {
			clients[i].Abort()
			servers[i].Abort()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	// The server side accepts in request order; which QP it binds does
	// not matter.
	var wg sync.WaitGroup
	acceptErr := make(chan error, 1)
	go func() {
		for i := range pairs {
			req, err := ln.GetRequest(ctx)
			if err == nil {
				err = req.Accept(ctx, servers[i], nil)
			}
			if err != nil {
				acceptErr <- err
				return
			}
		}
		acceptErr <- nil
	}()
	jobs := make(chan int)
	errs := make(chan error, pairs)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				errs <- clients[i].Dial(ctx, "tcp", ln.Addr().String(), ConnConfig{})
			}
		}()
	}
	for i := range pairs {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(b, err)
	}
	require.NoError(b, <-acceptErr)
	connected := time.Since(start)
	rssConnected := rssKiB(b)

	// Every pair moves data: a Write of 1 KiB and a Send of 64 octets from
	// the client (the Send completes the server's receive after the Write
	// is placed), a Send back from the server.
	start = time.Now()
	for i, qp := range clients {
		rb := RemoteBuffer{Addr: srvBuf.Addr() + uint64(i*1024), RKey: srvBuf.RKey(), Len: 1024}
		_, err := qp.PostSend(
			SendWR{ID: uint64(i), Opcode: OpRDMAWrite, SGL: []SGE{cliBuf.SGE(0, 1024)}, RemoteAddr: rb.Addr, RKey: rb.RKey},
			SendWR{ID: uint64(i), Opcode: OpSend, Flags: Inline, InlineData: []byte("ping")})
		require.NoError(b, err)
	}
	wcs := make([]WC, 256)
	for got := 0; got < pairs; {
		n, err := scq.PollWait(ctx, wcs)
		require.NoError(b, err)
		for _, wc := range wcs[:n] {
			require.Equal(b, Success, wc.Status, "%v", wc)
			if wc.Opcode != WCRecv {
				continue
			}
			got++
			_, err := wc.QP.PostSend(SendWR{ID: wc.ID, Opcode: OpSend, Flags: Inline, InlineData: []byte("pong")})
			require.NoError(b, err)
		}
	}
	for got := 0; got < pairs; {
		n, err := ccq.PollWait(ctx, wcs)
		require.NoError(b, err)
		for _, wc := range wcs[:n] {
			require.Equal(b, Success, wc.Status, "%v", wc)
			if wc.Opcode == WCRecv {
				got++
			}
		}
	}
	moved := time.Since(start)
	rss := rssKiB(b)
	b.ReportMetric(float64(rss-rss0)/float64(pairs), "KiB-RSS/pair")
	b.ReportMetric(connected.Seconds(), "s-to-connect")
	b.Logf("%d pairs: connected in %v (RSS +%d MiB), every pair moved data in %v; RSS +%d MiB = %d KiB per pair (both QPs)",
		pairs, connected.Round(time.Millisecond), (rssConnected-rss0)>>10, moved.Round(time.Millisecond), (rss-rss0)>>10, (rss-rss0)/uint64(pairs))
}

// rssKiB is this process's resident set (VmRSS).
func rssKiB(tb testing.TB) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(tb, err)
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, err := strconv.ParseUint(f[1], 10, 64)
			require.NoError(tb, err)
			return n
		}
	}
	tb.Fatal("no VmRSS")
	return 0
}
