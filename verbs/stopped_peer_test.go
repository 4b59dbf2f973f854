//go:build linux

package verbs

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/goiwarp/iwarp/mpa"
)

// A real peer process, stopped (SIGSTOP) or killed (SIGKILL) while our
// Reads are outstanding: the cases of ResponseTimeout and ErrUnanswered
// (resp_timeout_test.go and fin_unanswered_test.go script them with a raw
// peer; these take the kernel's own behaviour).

const readServerEnv = "IWARP_READ_SERVER" // in the child: serve Reads

// TestReadServer is the child process: a verbs server whose region the
// parent Reads. It reports "ready <addr> <region>" and serves until its
// stdin closes (or it is killed). Run alone it skips: it is the child of
// the tests below.
func TestReadServer(t *testing.T) {
	if os.Getenv(readServerEnv) != "1" {
		t.Skip("the child process of TestStoppedPeer* and TestKilledPeer*")
	}
	d, err := Open(DeviceAttr{})
	require.NoError(t, err)
	defer d.Close()
	pd := d.AllocPD()
	cq, err := d.CreateCQ(64)
	require.NoError(t, err)
	region, err := pd.RegMR(make([]byte, 4<<20), LocalWrite|RemoteRead)
	require.NoError(t, err)
	qp, err := pd.CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq})
	require.NoError(t, err)
	ln, err := d.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{})
	require.NoError(t, err)
	fmt.Printf("ready %s %s\n", ln.Addr(), hex.EncodeToString(region.RemoteBuffer().Append(nil)))
	req, err := ln.GetRequest(context.Background())
	require.NoError(t, err)
	require.NoError(t, req.Accept(context.Background(), qp, nil))
	io.Copy(io.Discard, os.Stdin)
}

// readServer is the parent's handle on a TestReadServer child.
type readServer struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	addr   string
	region RemoteBuffer
}

func startReadServer(t *testing.T) *readServer {
	t.Helper()
	s := &readServer{cmd: exec.Command(os.Args[0], "-test.run=^TestReadServer$", "-test.timeout=2m")}
	s.cmd.Env = append(os.Environ(), readServerEnv+"=1")
	s.cmd.Stderr = os.Stderr
	var err error
	s.stdin, err = s.cmd.StdinPipe()
	require.NoError(t, err)
	out, err := s.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, s.cmd.Start())
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGCONT)
		s.cmd.Process.Kill()
		s.cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready ") {
				lines <- sc.Text()
			}
		}
		close(lines)
	}()
	select {
	case line, ok := <-lines:
		require.True(t, ok, "the server ended before it was ready")
		f := strings.Fields(line)
		require.Len(t, f, 3, line)
		b, err := hex.DecodeString(f[2])
		require.NoError(t, err)
		s.addr = f[1]
		s.region, err = ParseRemoteBuffer(b)
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not report ready")
	}
	return s
}

// readRound posts a Read of n octets from the server's region and waits
// for its completion.
func readRound(t *testing.T, c *side, srv *readServer, sink *MR, n int) {
	t.Helper()
	_, err := c.qp.PostSend(SendWR{ID: 100, Opcode: OpRDMARead, Flags: Signaled,
		SGL: []SGE{sink.SGE(0, n)}, RemoteAddr: srv.region.Addr, RKey: srv.region.RKey})
	require.NoError(t, err)
	require.Equal(t, wcString(100, WCRDMARead, Success), wcOf(waitWC(t, c.scq)))
}

// A stopped server process: its kernel still ACKs our Read Requests, so
// only ResponseTimeout ends the wait (before, CQ.Wait waited for ever).
func TestStoppedPeerReadTimesOut(t *testing.T) {
	checkRoutines(t)
	const limit = time.Second
	srv := startReadServer(t)
	c := newSide(t, pairOpts{})
	sink := c.regMR(t, 1<<20, LocalWrite)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.qp.Dial(ctx, "tcp", srv.addr, ConnConfig{ResponseTimeout: limit}))
	defer c.qp.Close()
	readRound(t, c, srv, sink, 4096) // the server answers while it runs

	require.NoError(t, srv.cmd.Process.Signal(syscall.SIGSTOP))
	waitStopped(t, srv.cmd.Process.Pid)
	start := time.Now()
	for i := range 4 {
		_, err := c.qp.PostSend(SendWR{ID: uint64(i), Opcode: OpRDMARead, Flags: Signaled,
			SGL: []SGE{sink.SGE(i*4096, 4096)}, RemoteAddr: srv.region.Addr, RKey: srv.region.RKey})
		require.NoError(t, err)
	}
	waitDone(t, c.qp, 10*limit)
	elapsed := time.Since(start)
	require.GreaterOrEqual(t, elapsed, limit)
	require.ErrorIs(t, c.qp.Err(), ErrResponseTimeout)
	wcs := drainWC(c.scq)
	require.Len(t, wcs, 4)
	require.Equal(t, RetryExcErr, wcs[0].Status, "%v", wcs[0])
	for _, wc := range wcs[1:] {
		require.Equal(t, WRFlushErr, wc.Status, "%v", wc)
	}
	t.Logf("stopped peer: QP ended after %v (ResponseTimeout %v): %v", elapsed, limit, c.qp.Err())
}

// waitStopped waits until every thread of process pid has stopped (state
// T in /proc): a signal's stop is not done when kill returns, and a thread
// still running could answer a Read.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	require.NoError(t, err)
	stopped := func() bool {
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			if err != nil {
				continue // a thread that has exited
			}
			// pid (comm) state ...: comm may hold spaces and parentheses.
			f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
			if len(f) == 0 || (f[0] != "T" && f[0] != "t") {
				return false
			}
		}
		return true
	}
	require.Eventually(t, stopped, 10*time.Second, time.Millisecond, "process %d stopped", pid)
}

// A server killed with Reads outstanding: its kernel resets the connection
// or, when nothing was left unread, closes it with a FIN. Either way the
// client's QP reports a lost connection, never an orderly close (before, a
// FIN gave ErrDisconnected, in about 1 run in 6). A round whose Reads all
// completed before the kill is an orderly close indeed, and counted apart.
func TestKilledPeerWithReadsOutstanding(t *testing.T) {
	checkRoutines(t)
	const size = 4 << 20
	causes := map[string]int{}
	for round := range 6 {
		srv := startReadServer(t)
		c := newSide(t, pairOpts{})
		sink := c.regMR(t, size, LocalWrite)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		require.NoError(t, c.qp.Dial(ctx, "tcp", srv.addr, ConnConfig{}))
		cancel()
		for i := range 16 {
			_, err := c.qp.PostSend(SendWR{ID: uint64(i), Opcode: OpRDMARead, Flags: Signaled,
				SGL: []SGE{sink.SGE(0, size)}, RemoteAddr: srv.region.Addr, RKey: srv.region.RKey})
			require.NoError(t, err)
		}
		require.NoError(t, srv.cmd.Process.Kill())
		waitDone(t, c.qp, 10*time.Second)
		flushed := 0
		for _, wc := range drainWC(c.scq) {
			require.Contains(t, []WCStatus{Success, WRFlushErr}, wc.Status, "round %d: %v", round, wc)
			if wc.Status == WRFlushErr {
				flushed++
			}
		}
		err := c.qp.Err()
		switch {
		case flushed == 0:
			require.ErrorIs(t, err, ErrDisconnected, "round %d: every Read answered", round)
			causes["all answered before the kill"]++
		case errors.Is(err, ErrUnanswered):
			causes["FIN, Reads unanswered"]++
		default:
			require.ErrorIs(t, err, ErrConnLost, "round %d: %d Reads flushed", round, flushed)
			causes["reset"]++
		}
		if flushed > 0 {
			require.False(t, errors.Is(err, ErrDisconnected), "round %d: %d Reads flushed: %v", round, flushed, err)
		}
		c.qp.Close()
	}
	t.Logf("killed peer, 6 rounds: %v", causes)
}

// Reads posted but not yet sent when the peer's FIN comes are unanswered
// too: here the responder holds its first FPDU until the initiator's
// (FirstFPDUHold -1), and the initiator closes before sending one. The
// Reads flush, and the QP says why (before, ErrDisconnected: CI saw
// TestKilledPeerWithReadsOutstanding hit it when the kill beat the
// transmit loop).
func TestPeerFINBeforeReadsSent(t *testing.T) {
	checkRoutines(t)
	st := newStackSide(t, ConnConfig{FirstFPDUHold: -1})
	q := st.newQP(t, 8, 8)
	sink := regGuarded(t, st.pd, 64, LocalWrite)
	acc := st.acceptAsync(q)
	p := dialPeer(t, st.ln.Addr().String(), mpa.Config{IRD: 8, ORD: 8})
	require.NoError(t, <-acc)
	for i := range 3 {
		_, err := q.qp.PostSend(SendWR{ID: uint64(i), Opcode: OpRDMARead, Flags: Signaled,
			SGL: []SGE{sink.mr.SGE(0, 64)}, RemoteAddr: 0x1000, RKey: 0x1234})
		require.NoError(t, err)
	}
	require.NoError(t, p.conn.CloseWrite())
	waitDone(t, q.qp, 5*time.Second)
	err := q.qp.Err()
	require.ErrorIs(t, err, ErrUnanswered)
	require.ErrorIs(t, err, ErrConnLost)
	require.NotErrorIs(t, err, ErrDisconnected)
	require.ErrorContains(t, err, "3 posted and not yet sent")
	wcs := drainWC(q.scq)
	require.Len(t, wcs, 3)
	for _, wc := range wcs {
		require.Equal(t, WRFlushErr, wc.Status, "%v", wc)
	}
}
