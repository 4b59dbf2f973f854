//go:build linux

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
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The server process of the many-QP measurement (many_test.go), and the
// parent's handle on it.

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
