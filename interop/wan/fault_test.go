//go:build netns

package wan

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/tcpx"
	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

// The fault tests post a long train of large RDMA Writes and a few
// receives, break the connection while the Writes are in flight, and check
// what RFC 5040 and ibverbs promise: the QP reaches ERROR (Done closes),
// Err says why, every WR completes exactly once and in order — the Writes
// handed to TCP before the fault with Success, every one after with
// WRFlushErr —, WRs posted afterwards flush at once, and Close leaves no
// goroutine, file descriptor or kernel socket behind.
const (
	faultWrites   = 16
	faultChunk    = 32 << 20 // 16 × 32 MiB: far more than the socket buffers hold
	faultRecvs    = 4
	detectBound   = 10 * time.Second // RST and FIN arrive in microseconds on a veth
	peerEnvNS     = "IWWAN_PEER_NS"
	peerEnvAddr   = "IWWAN_PEER_ADDR"
	peerListening = "LISTENING "
)

// faultLoad posts the receives and Writes of a fault test; the Writes go to
// [raddr, raddr+faultChunk) under rkey. It returns once the first Write has
// completed, so that the fault strikes mid-transfer.
func faultLoad(t *testing.T, c *end, raddr uint64, rkey uint32) (src *verbs.MR) {
	t.Helper()
	src = c.regMR(t, faultChunk, verbs.LocalWrite)
	for i := range src.Buf() {
		src.Buf()[i] = byte(i*7 + i>>16)
	}
	for i := range faultRecvs {
		_, err := c.qp.PostRecv(verbs.RecvWR{ID: uint64(101 + i), SGL: []verbs.SGE{src.SGE(i*64, 64)}})
		require.NoError(t, err)
	}
	for i := range faultWrites {
		_, err := c.qp.PostSend(verbs.SendWR{ID: uint64(1 + i), Opcode: verbs.OpRDMAWrite, Flags: verbs.Signaled,
			SGL: []verbs.SGE{src.SGE(0, faultChunk)}, RemoteAddr: raddr, RKey: rkey})
		require.NoError(t, err)
	}
	wc := waitOK(t, c.scq, verbs.WCRDMAWrite, 30*time.Second)
	require.EqualValues(t, 1, wc.ID)
	return src
}

// requireFaultFlush checks the completions of faultLoad's WRs after the QP
// failed (Write 1 was taken by faultLoad) and returns how many Writes
// flushed.
func requireFaultFlush(t *testing.T, e *end) int {
	t.Helper()
	var ids []uint64
	for i := 2; i <= faultWrites; i++ {
		ids = append(ids, uint64(i))
	}
	flushed := requireFlushed(t, collect(t, e.scq, len(ids), 10*time.Second), ids, verbs.WCRDMAWrite)
	require.NotZero(t, flushed, "no Write was outstanding at the fault: the test did not test anything")
	var rids []uint64
	for i := range faultRecvs {
		rids = append(rids, uint64(101+i))
	}
	require.Equal(t, faultRecvs, requireFlushed(t, collect(t, e.rcq, faultRecvs, 10*time.Second), rids, verbs.WCRecv))
	requireEmpty(t, e.scq, e.rcq)
	return flushed
}

// TestPeerProcess is not a test of its own: it is the peer that
// TestPeerKilled starts in a child process (the test binary again, chosen
// with -test.run and an environment variable), so that it can kill -9 it.
// It accepts one connection inside the namespace named by $IWWAN_PEER_NS,
// hands the initiator a 32 MiB region (filled with peerPattern) that it may
// write and read through the MPA private data (address and STag), and
// waits to be killed. It exits by itself when its standard input closes
// (the parent died) or after two minutes.
func TestPeerProcess(t *testing.T) {
	nsName := os.Getenv(peerEnvNS)
	if nsName == "" {
		t.Skip("helper process of TestPeerKilled")
	}
	ns, err := OpenNS(nsName)
	require.NoError(t, err)
	s := newSide().newEnd(t, qpOpts{})
	var ln *verbs.Listener
	require.NoError(t, ns.Do(func() (err error) {
		ln, err = s.dev.Listen(context.Background(), "tcp4", os.Getenv(peerEnvAddr)+":0", verbs.ConnConfig{})
		return err
	}))
	fmt.Printf("%s%s\n", peerListening, ln.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := ln.GetRequest(ctx)
	require.NoError(t, err)
	mr := s.regMR(t, faultChunk, verbs.LocalWrite|verbs.RemoteWrite|verbs.RemoteRead)
	peerPattern(mr.Buf())
	pd := binary.BigEndian.AppendUint64(nil, mr.Addr())
	pd = binary.BigEndian.AppendUint32(pd, mr.RKey())
	require.NoError(t, req.Accept(ctx, s.qp, pd))
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	time.Sleep(2 * time.Minute)
	os.Exit(4)
}

func peerPattern(b []byte) {
	for i := range b {
		b[i] = byte(i*7 + i>>16)
	}
}

// peerProc is a running TestPeerProcess.
type peerProc struct {
	cmd    *exec.Cmd
	stdin  io.Closer
	lines  chan string
	waited bool
}

// startPeer starts the peer process in n.B, connects c to it from n.A and
// returns the address and STag of the peer's region.
func startPeer(t *testing.T, n *Net, c *end) (*peerProc, uint64, uint32) {
	var stderr bytes.Buffer
	p := &peerProc{cmd: exec.Command("/proc/self/exe", "-test.run=^TestPeerProcess$", "-test.timeout=3m")}
	p.cmd.Env = append(os.Environ(), peerEnvNS+"="+n.B.Name, peerEnvAddr+"="+n.AddrB)
	p.cmd.Stderr = &stderr
	var err error
	p.stdin, err = p.cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() {
		if !p.waited {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("peer stderr:\n%s", stderr.String())
		}
	})
	p.lines = make(chan string, 16)
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	var addr string
	// A process start on a loaded machine: the wait ends when it listens.
	timeout := time.After(time.Minute)
	for addr == "" {
		select {
		case l, ok := <-p.lines:
			require.True(t, ok, "peer exited before listening")
			addr, _ = strings.CutPrefix(l, peerListening)
		case <-timeout:
			t.Fatal("peer did not start listening in a minute")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var pd []byte
	require.NoError(t, n.A.Do(func() (err error) {
		err = c.qp.Dial(ctx, "tcp4", addr, verbs.ConnConfig{})
		pd = c.qp.PeerPrivateData()
		return err
	}))
	require.Len(t, pd, 12)
	return p, binary.BigEndian.Uint64(pd), binary.BigEndian.Uint32(pd[8:])
}

func (p *peerProc) signal(t *testing.T, sig syscall.Signal) {
	require.NoError(t, syscall.Kill(p.cmd.Process.Pid, sig))
}

// requireKilled reaps the peer and checks that SIGKILL ended it.
func (p *peerProc) requireKilled(t *testing.T) {
	werr := p.cmd.Wait()
	p.waited = true
	p.stdin.Close()
	var ee *exec.ExitError
	require.ErrorAs(t, werr, &ee)
	require.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal(), "peer: %v", werr)
	for range p.lines { // the scanner ends with the peer's stdout
	}
}

// Test 1: the peer process is killed (SIGKILL) in the middle of a
// transfer, once while it receives our RDMA Writes and once while it sends
// the responses to our RDMA Reads.
//
// WhileReceiving stops the peer (SIGSTOP) first and kills it 200 ms later.
// That makes the outcome deterministic: a stopped process leaves data
// unread in its socket, and a socket closed with unread data sends an RST
// (RFC 2525 section 2.17; Linux tcp_close). We must see ErrConnLost.
//
// WhileSending kills the peer as it runs. It has nothing unread (our Read
// Requests are small and it reads them at once), so its kernel sends what
// the process had written and then a FIN. What we see depends on where the
// kill falls in the byte stream: a FIN between two FPDUs, with our Reads
// still outstanding, is no orderly close but verbs.ErrUnanswered (which Is
// ErrConnLost); one inside an FPDU (the usual case: the process dies in
// the middle of a writev) is RFC 5044's "TCP connection closed, terminated
// or lost" (LLP error 0x01), which the QP reports with a Terminate
// (*TerminateError), as Linux siw does; a reset is ErrConnLost. Any of the
// three passes; anything else (an orderly close, a DDP or RDMAP error, a
// hang) fails. The region read is checked octet by octet.
func TestPeerKilled(t *testing.T) {
	t.Run("WhileReceiving", func(t *testing.T) {
		checkRoutines(t)
		n := newNet(t, LinkVeth)
		fds := fdCount(t)
		c := newSide().newEnd(t, qpOpts{})
		p, raddr, rkey := startPeer(t, n, c)
		src := faultLoad(t, c, raddr, rkey)

		p.signal(t, syscall.SIGSTOP)
		time.Sleep(200 * time.Millisecond)
		t0 := time.Now()
		p.signal(t, syscall.SIGKILL)
		el := requireDone(t, c.qp, t0, detectBound, "initiator")
		p.requireKilled(t)

		qerr := c.qp.Err()
		require.ErrorIs(t, qerr, verbs.ErrConnLost)
		require.True(t, isErrno(qerr, syscall.ECONNRESET, syscall.EPIPE), "want a reset, got %v", qerr)
		flushed := requireFaultFlush(t, c)
		requirePostAfterError(t, c, src)
		require.NoError(t, c.qp.Close())
		requireFDs(t, fds)
		requireNoSockets(t, n.A)
		t.Logf("peer killed while receiving: ERROR after %v (%v); %d of %d Writes flushed, %d receives flushed",
			el.Round(time.Microsecond), qerr, flushed, faultWrites, faultRecvs)
	})
	t.Run("WhileSending", func(t *testing.T) {
		checkRoutines(t)
		n := newNet(t, LinkVeth)
		fds := fdCount(t)
		c := newSide().newEnd(t, qpOpts{})
		p, raddr, rkey := startPeer(t, n, c)
		sink := c.regMR(t, faultChunk, verbs.LocalWrite)
		for i := range faultRecvs {
			_, err := c.qp.PostRecv(verbs.RecvWR{ID: uint64(101 + i), SGL: []verbs.SGE{sink.SGE(i*64, 64)}})
			require.NoError(t, err)
		}
		for i := range faultWrites {
			_, err := c.qp.PostSend(verbs.SendWR{ID: uint64(1 + i), Opcode: verbs.OpRDMARead, Flags: verbs.Signaled,
				SGL: []verbs.SGE{sink.SGE(0, faultChunk)}, RemoteAddr: raddr, RKey: rkey})
			require.NoError(t, err)
		}
		wc := waitOK(t, c.scq, verbs.WCRDMARead, 30*time.Second)
		require.EqualValues(t, 1, wc.ID)
		want := make([]byte, faultChunk)
		peerPattern(want)
		require.True(t, bytes.Equal(want, sink.Buf()), "the first Read brought wrong data")

		t0 := time.Now()
		p.signal(t, syscall.SIGKILL)
		el := requireDone(t, c.qp, t0, detectBound, "initiator")
		p.requireKilled(t)

		qerr := c.qp.Err()
		var te *verbs.TerminateError
		switch {
		case errors.Is(qerr, verbs.ErrConnLost):
		case errors.As(qerr, &te):
			require.False(t, te.Remote, "the dead peer cannot have sent a Terminate: %v", qerr)
			require.ErrorIs(t, qerr, &mpa.Error{Code: mpa.CodeStreamLost})
		default:
			t.Fatalf("QP error %v: want a lost or closed connection", qerr)
		}
		var ids []uint64
		for i := 2; i <= faultWrites; i++ {
			ids = append(ids, uint64(i))
		}
		flushed := requireFlushed(t, collect(t, c.scq, len(ids), 10*time.Second), ids, verbs.WCRDMARead)
		require.NotZero(t, flushed, "no Read was outstanding at the kill")
		var rids []uint64
		for i := range faultRecvs {
			rids = append(rids, uint64(101+i))
		}
		require.Equal(t, faultRecvs, requireFlushed(t, collect(t, c.rcq, faultRecvs, 10*time.Second), rids, verbs.WCRecv))
		requireEmpty(t, c.scq, c.rcq)
		// Every Read wrote the same octets; a partly placed one too.
		require.True(t, bytes.Equal(want, sink.Buf()), "Read data corrupted")
		requirePostAfterError(t, c, sink)
		require.NoError(t, c.qp.Close())
		requireFDs(t, fds)
		requireNoSockets(t, n.A)
		t.Logf("peer killed while sending: ERROR after %v (%v); %d of %d Reads flushed, %d receives flushed",
			el.Round(time.Microsecond), qerr, flushed, faultWrites, faultRecvs)
	})
}

// Test 2: the peer resets the connection (RST) mid-transfer (QP.Abort:
// SO_LINGER 0 and close on its socket).
//
// The kernel hands ECONNRESET to one call only: when the transmit loop's
// writev takes it, the receive loop reads a plain end of stream, which
// the engine once recorded as an orderly close (ErrDisconnected) in 2 to
// 11 runs of 40. It now asks the socket's TCP state (README.md, "Engine
// issue found"), and this test guards that.
func TestPeerReset(t *testing.T) {
	for _, how := range []string{"Abort"} {
		t.Run(how, func(t *testing.T) {
			checkRoutines(t)
			n := newNet(t, LinkVeth)
			fds := fdCount(t)
			c, s := pair(t, n, qpOpts{}, verbs.ConnConfig{}, verbs.ConnConfig{})
			dst := s.regMR(t, faultChunk, verbs.LocalWrite|verbs.RemoteWrite)
			for i := range faultRecvs {
				_, err := s.qp.PostRecv(verbs.RecvWR{ID: uint64(201 + i), SGL: []verbs.SGE{dst.SGE(i*64, 64)}})
				require.NoError(t, err)
			}
			src := faultLoad(t, c, dst.Addr(), dst.RKey())

			t0 := time.Now()
			dc := watch(t0, c.qp, s.qp)
			require.NoError(t, s.qp.Abort())
			el := dc.requireDone(t, c.qp, detectBound, "initiator")
			dc.requireDone(t, s.qp, detectBound, "responder")

			qerr := c.qp.Err()
			require.ErrorIs(t, qerr, verbs.ErrConnLost)
			require.True(t, isErrno(qerr, syscall.ECONNRESET, syscall.EPIPE), "want a reset, got %v", qerr)
			flushed := requireFaultFlush(t, c)
			requirePostAfterError(t, c, src)

			// The responder's own view: it ended the connection itself
			// (ErrDisconnected), and its receives flush too.
			require.ErrorIs(t, s.qp.Err(), verbs.ErrDisconnected)
			var rids []uint64
			for i := range faultRecvs {
				rids = append(rids, uint64(201+i))
			}
			require.Equal(t, faultRecvs, requireFlushed(t, collect(t, s.rcq, faultRecvs, 5*time.Second), rids, verbs.WCRecv))

			require.NoError(t, c.qp.Close())
			require.NoError(t, s.qp.Close())
			requireFDs(t, fds)
			requireNoSockets(t, n.A)
			requireNoSockets(t, n.B)
			t.Logf("peer %s: initiator in ERROR after %v (%v); %d of %d Writes flushed",
				how, el.Round(time.Microsecond), qerr, flushed, faultWrites)
		})
	}
}

// shortKeepAlive is the keep-alive of the partition tests: first probe
// after 1 s of silence, then one a second, dead after 3 unanswered.
var shortKeepAlive = net.KeepAliveConfig{Idle: time.Second, Interval: time.Second, Count: 3}

// Test 3a: the network partitions (every packet lost, both ways) while
// Writes are in flight on a 50 ms RTT path. Keep-alive does not help the
// sender: it probes only an idle connection, and this one has data
// outstanding. TCP_USER_TIMEOUT (ConnConfig.TCP.UserTimeout) does: the
// kernel gives up when data has gone unacknowledged that long, instead of
// retransmitting for about 15 minutes (tcp_retries2). The receiver has
// nothing outstanding; it learns from keep-alive, which TCP_USER_TIMEOUT
// also bounds (probing stops once the timeout has passed with a probe
// unanswered).
//
// Bound: detection within UserTimeout + 5 s of the partition, for both QPs.
// Linux clamps the retransmission timer to the user timeout, so it is
// typically found at 2.0–2.5 s; the 5 s cover a loaded machine.
func TestPartitionUserTimeout(t *testing.T) {
	checkRoutines(t)
	n := impairedNet(t)
	require.NoError(t, n.Impair(Impairment{Delay: 25 * time.Millisecond, Rate: 1e9}))
	const ut = 2 * time.Second
	cfg := verbs.ConnConfig{TCP: tcpx.Config{UserTimeout: ut, KeepAlive: shortKeepAlive}}
	fds := fdCount(t)
	c, s := pair(t, n, qpOpts{}, cfg, cfg)
	dst := s.regMR(t, faultChunk, verbs.LocalWrite|verbs.RemoteWrite)
	for i := range faultRecvs {
		_, err := s.qp.PostRecv(verbs.RecvWR{ID: uint64(201 + i), SGL: []verbs.SGE{dst.SGE(i*64, 64)}})
		require.NoError(t, err)
	}
	faultLoad(t, c, dst.Addr(), dst.RKey())

	t0 := time.Now()
	dc := watch(t0, c.qp, s.qp)
	require.NoError(t, n.Partition())
	bound := ut + 5*time.Second
	elC := dc.requireDone(t, c.qp, bound, "sender")
	elS := dc.requireDone(t, s.qp, bound, "receiver")
	for _, e := range []*end{c, s} {
		require.ErrorIs(t, e.qp.Err(), verbs.ErrConnLost)
		require.True(t, isErrno(e.qp.Err(), syscall.ETIMEDOUT), "want ETIMEDOUT, got %v", e.qp.Err())
	}
	// Not sooner than the timeout allows: nothing else may have ended it.
	require.Greater(t, elC, ut/2)
	flushed := requireFaultFlush(t, c)
	var rids []uint64
	for i := range faultRecvs {
		rids = append(rids, uint64(201+i))
	}
	require.Equal(t, faultRecvs, requireFlushed(t, collect(t, s.rcq, faultRecvs, 5*time.Second), rids, verbs.WCRecv))

	require.NoError(t, c.qp.Close())
	require.NoError(t, s.qp.Close())
	requireFDs(t, fds)
	requireNoSockets(t, n.A)
	requireNoSockets(t, n.B)
	t.Logf("%s", n.Describe())
	t.Logf("partition in flight, UserTimeout %v: sender ERROR after %v, receiver after %v (bound %v); %d of %d Writes flushed; sender: %v; receiver: %v",
		ut, elC.Round(time.Millisecond), elS.Round(time.Millisecond), bound, flushed, faultWrites, c.qp.Err(), s.qp.Err())
}

// Test 3b: an idle connection partitions. Only keep-alive can notice:
// with idle 1 s, interval 1 s and 3 probes, the kernel gives up 1 + 3 s
// after it last heard from the peer (a probe's answer counts), so
// 3–4 s after the partition. Before the partition the connection idles
// for 3 s with probes answered, and must stay up.
//
// Bounds: at least 2 s (sooner would mean something other than keep-alive
// ended it) and less than 1 + 3×1 + 5 s.
func TestPartitionIdleKeepAlive(t *testing.T) {
	checkRoutines(t)
	n := impairedNet(t)
	require.NoError(t, n.Impair(Impairment{Delay: 25 * time.Millisecond, Rate: 1e9}))
	cfg := verbs.ConnConfig{TCP: tcpx.Config{KeepAlive: shortKeepAlive}}
	fds := fdCount(t)
	c, s := pair(t, n, qpOpts{}, cfg, cfg)
	buf := c.regMR(t, 64, verbs.LocalWrite)
	sbuf := s.regMR(t, 128, verbs.LocalWrite)
	_, err := s.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{sbuf.SGE(0, 64)}})
	require.NoError(t, err)
	_, err = c.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Flags: verbs.Signaled | verbs.Inline, InlineData: []byte("ping")})
	require.NoError(t, err)
	waitOK(t, c.scq, verbs.WCSend, 10*time.Second)
	waitOK(t, s.rcq, verbs.WCRecv, 10*time.Second)
	_, err = c.qp.PostRecv(verbs.RecvWR{ID: 11, SGL: []verbs.SGE{buf.SGE(0, 64)}})
	require.NoError(t, err)
	_, err = s.qp.PostRecv(verbs.RecvWR{ID: 12, SGL: []verbs.SGE{sbuf.SGE(64, 64)}})
	require.NoError(t, err)

	time.Sleep(3 * time.Second)
	require.Equal(t, verbs.StateRTS, c.qp.State(), "idle connection died with the path up: %v", c.qp.Err())
	require.Equal(t, verbs.StateRTS, s.qp.State(), "idle connection died with the path up: %v", s.qp.Err())

	t0 := time.Now()
	dc := watch(t0, c.qp, s.qp)
	require.NoError(t, n.Partition())
	ka := shortKeepAlive.Idle + time.Duration(shortKeepAlive.Count)*shortKeepAlive.Interval
	bound := ka + 5*time.Second
	elC := dc.requireDone(t, c.qp, bound, "initiator")
	elS := dc.requireDone(t, s.qp, bound, "responder")
	for _, e := range []*end{c, s} {
		require.ErrorIs(t, e.qp.Err(), verbs.ErrConnLost)
		require.True(t, isErrno(e.qp.Err(), syscall.ETIMEDOUT), "want ETIMEDOUT, got %v", e.qp.Err())
	}
	require.Greater(t, elC, 2*time.Second)
	require.Greater(t, elS, 2*time.Second)
	require.Equal(t, 1, requireFlushed(t, collect(t, c.rcq, 1, 5*time.Second), []uint64{11}, verbs.WCRecv))
	require.Equal(t, 1, requireFlushed(t, collect(t, s.rcq, 1, 5*time.Second), []uint64{12}, verbs.WCRecv))
	requireEmpty(t, c.scq, c.rcq, s.scq, s.rcq)

	require.NoError(t, c.qp.Close())
	require.NoError(t, s.qp.Close())
	requireFDs(t, fds)
	requireNoSockets(t, n.A)
	requireNoSockets(t, n.B)
	t.Logf("%s", n.Describe())
	t.Logf("idle partition, keep-alive %v/%v/%d: initiator ERROR after %v, responder after %v (expected %v–%v, bound %v)",
		shortKeepAlive.Idle, shortKeepAlive.Interval, shortKeepAlive.Count,
		elC.Round(time.Millisecond), elS.Round(time.Millisecond), ka-shortKeepAlive.Idle, ka, bound)
}
