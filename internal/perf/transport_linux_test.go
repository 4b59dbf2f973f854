package perf

import (
	"bytes"
	"context"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/goiwarp/iwarp/tcpx"
	"github.com/goiwarp/iwarp/verbs"
)

func skipUnlessTransport(t *testing.T) {
	t.Helper()
	if b, err := os.ReadFile("/proc/sys/net/mptcp/enabled"); err != nil || strings.TrimSpace(string(b)) != "1" {
		t.Skip("MPTCP is not enabled in this kernel (net.mptcp.enabled)")
	}
	if avail, _ := tcpx.AvailableCongestionControl(); !strings.Contains(" "+strings.Join(avail, " ")+" ", " reno ") {
		t.Skip("no reno congestion control")
	}
}

// sockOf finds this process's socket whose local and remote addresses are
// those given, and returns its TCP_CONGESTION and SO_PROTOCOL.
func sockOf(t *testing.T, local, remote net.Addr) (cc string, proto int) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		la, err1 := unix.Getsockname(fd)
		ra, err2 := unix.Getpeername(fd)
		if err1 != nil || err2 != nil || sockStr(la) != local.String() || sockStr(ra) != remote.String() {
			continue
		}
		cc, err = unix.GetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		require.NoError(t, err)
		proto, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL)
		require.NoError(t, err)
		return strings.TrimRight(cc, "\x00"), proto
	}
	t.Fatalf("no socket %v -> %v", local, remote)
	return "", 0
}

func sockStr(sa unix.Sockaddr) string {
	if a, ok := sa.(*unix.SockaddrInet4); ok {
		return net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port))
	}
	return ""
}

// The QPs of both sides run the congestion control and Multipath TCP the
// flags ask for: the kernel says so of their sockets.
func TestTransportQPSockets(t *testing.T) {
	skipUnlessTransport(t)
	t.Cleanup(test.CheckRoutines(t)) // after endpointPair's cleanups
	p, _, err := Parse([]string{"write_bw", "--cc", "reno", "--mptcp", "--sockbuf", "1M", "peer"})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, srv := endpointPair(ctx, t, p)
	for _, qp := range []*verbs.QP{cli.qps[0].qp, srv.qps[0].qp} {
		require.Eventually(t, func() bool { return qp.State() == verbs.StateRTS }, 5*time.Second, time.Millisecond)
		cc, proto := sockOf(t, qp.LocalAddr(), qp.RemoteAddr())
		require.Equal(t, "reno", cc)
		require.Equal(t, unix.IPPROTO_MPTCP, proto)
		st, err := qp.TCPInfo()
		require.NoError(t, err)
		require.True(t, st.Multipath, "MPTCP agreed, not fallen back")
	}
}

// tcp_bw and write_bw over loopback with --cc and --mptcp: the run
// succeeds and the report's TCP lines say what the sockets ran.
func TestTransportLoopback(t *testing.T) {
	skipUnlessTransport(t)
	defer test.CheckRoutines(t)()
	for _, tc := range []struct {
		args []string
		want *regexp.Regexp
	}{
		{[]string{"tcp_bw", "--loopback", "-n", "200", "-q", "2", "--cc", "reno", "--mptcp"},
			regexp.MustCompile(`(?m)^ TCP conn \d+\s*:.*multipath \(\d+ subflows.*, cc reno, `)},
		{[]string{"write_bw", "--loopback", "-n", "200", "--cc", "reno", "--mptcp", "--sockbuf", "1M"},
			regexp.MustCompile(`(?m)^ TCP qp \d+[^:]*:.*multipath \(\d+ subflows`)},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.Equal(t, 0, MainContext(ctx, tc.args, &out, &errb), "stderr: %s", errb.String())
			require.Regexp(t, tc.want, out.String())
		})
	}
}
