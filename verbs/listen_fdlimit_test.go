//go:build linux

package verbs

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/stretchr/testify/require"
)

// Out of fds, accepting one more needs one: a Listener whose process has no
// fd left evicts a start-up to make room, rather than wait while silent
// peers hold every fd for RequestTimeout. The flood and the legitimate
// initiator run in a child process (this test binary, TestFloodChild), so
// that only the Listener's process is at its limit.
func TestListenerFloodAtFDLimit(t *testing.T) {
	checkRoutines(t)
	s := newStackSide(t, ConnConfig{}) // RequestTimeout 5 s
	const silent = 1000

	child := exec.Command(os.Args[0], "-test.run=^TestFloodChild$")
	child.Env = append(os.Environ(), "VERBS_FLOOD_ADDR="+s.ln.Addr().String(), "VERBS_FLOOD_N="+strconv.Itoa(silent))
	stdin, err := child.StdinPipe()
	require.NoError(t, err)
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	child.Stderr = os.Stderr
	require.NoError(t, child.Start())
	defer child.Wait()
	defer stdin.Close()
	lines := bufio.NewScanner(stdout)
	next := func() string {
		t.Helper()
		require.True(t, lines.Scan(), "the child's output ended: %v", lines.Err())
		return lines.Text()
	}

	// From here this process can open 64 more fds (ReadDir's own is closed).
	var old syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old))
	lim := old
	lim.Cur = uint64(fdLimitFor(t, 64))
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim))
	restore := func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) }
	defer restore()

	q := s.newQP(t, 4, 4)
	accepted := s.acceptAsync(q)
	fmt.Fprintln(stdin, "flood")
	require.Equal(t, "flooded", next())
	fmt.Fprintln(stdin, "dial")
	res := next()
	require.NoError(t, <-accepted, "Accept; the child: %s", res)
	took, ok := strings.CutPrefix(res, "replied ")
	require.True(t, ok, "the legitimate initiator: %s", res)
	d, err := time.ParseDuration(took)
	require.NoError(t, err)
	t.Logf("%d silent connections against %d fds; the legitimate initiator had its Reply in %v", silent, lim.Cur, d)
	require.LessOrEqual(t, d, floodBound)
	restore()
	stdin.Close()
	require.NoError(t, child.Wait())
	q.qp.Close()
}

// fdLimitFor returns the RLIMIT_NOFILE under which this process can open
// free more fds: a new fd takes the lowest free number, which the limit
// bounds.
func fdLimitFor(t *testing.T, free int) int {
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	open := make(map[int]bool)
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			open[n] = true
		}
	}
	l := 0
	for ; free > 0; l++ {
		if !open[l] {
			free--
		}
	}
	return l
}

// TestFloodChild is TestListenerFloodAtFDLimit's child: on "flood" it opens
// VERBS_FLOOD_N silent connections, on "dial" one legitimate MPA Request,
// and reports how long its Reply took.
func TestFloodChild(t *testing.T) {
	addr := os.Getenv("VERBS_FLOOD_ADDR")
	if addr == "" {
		t.Skip("the child of TestListenerFloodAtFDLimit")
	}
	n, _ := strconv.Atoi(os.Getenv("VERBS_FLOOD_N"))
	in := bufio.NewScanner(os.Stdin)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for in.Scan() {
		switch in.Text() {
		case "flood":
			for range n {
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					fmt.Printf("silent connection %d: %v\n", len(conns), err)
					return
				}
				conns = append(conns, c)
			}
			fmt.Println("flooded")
		case "dial":
			fmt.Println(legitRequest(addr))
		}
	}
	io.Copy(io.Discard, os.Stdin)
}

// legitRequest sends an MPA Request and waits for the Reply.
func legitRequest(addr string) string {
	start := time.Now()
	c, err := net.DialTimeout("tcp", addr, 3*floodBound)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	c.SetDeadline(start.Add(3 * floodBound))
	if _, err := c.Write(goodRequest()); err != nil {
		return err.Error()
	}
	if _, err := mpa.ReadFrame(c, true); err != nil {
		return fmt.Sprintf("after %v: %v", time.Since(start), err)
	}
	return "replied " + time.Since(start).String()
}
