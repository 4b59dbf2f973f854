//go:build linux

package tcpx

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// skipUnlessMPTCP skips where the kernel has MPTCP off or absent.
func skipUnlessMPTCP(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/mptcp/enabled")
	if err != nil || strings.TrimSpace(string(b)) != "1" {
		t.Skip("MPTCP is not enabled in this kernel (net.mptcp.enabled)")
	}
}

// listenerProtocol is SO_PROTOCOL of l's socket: IPPROTO_TCP or IPPROTO_MPTCP.
func listenerProtocol(t *testing.T, l *Listener) int {
	t.Helper()
	rc, err := l.ln.SyscallConn()
	require.NoError(t, err)
	var p int
	var gerr error
	require.NoError(t, rc.Control(func(fd uintptr) {
		p, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PROTOCOL)
	}))
	require.NoError(t, gerr)
	return p
}

// exchange sends n octets from a to b and one back, so that both ends'
// counters have settled when it returns.
func exchange(t *testing.T, a, b *net.TCPConn, n int64) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := io.CopyN(io.Discard, b, n)
		if err == nil {
			_, err = b.Write([]byte{1})
		}
		errc <- err
	}()
	_, err := a.Write(make([]byte, n))
	require.NoError(t, err)
	_, err = io.ReadFull(a, make([]byte, 1))
	require.NoError(t, err)
	require.NoError(t, <-errc)
}

// Go's listeners default to MPTCP; a Config that does not ask for it must
// get plain TCP whatever else it sets (before, UserTimeout decided).
func TestListenPlainTCPByDefault(t *testing.T) {
	skipUnlessMPTCP(t)
	for _, ut := range []time.Duration{0, 5 * time.Second} {
		l, err := Listen(context.Background(), "tcp4", "127.0.0.1:0", Config{UserTimeout: ut})
		require.NoError(t, err)
		require.Equal(t, unix.IPPROTO_TCP, listenerProtocol(t, l), "UserTimeout %v", ut)
		l.Close()
	}
	d, a := pair(t, "tcp4", "127.0.0.1:0", Config{}, Config{})
	for _, c := range []*net.TCPConn{d, a} {
		require.Equal(t, unix.IPPROTO_TCP, sockopt(t, c, unix.SOL_SOCKET, unix.SO_PROTOCOL))
	}
}

func TestMultipathTCP(t *testing.T) {
	skipUnlessMPTCP(t)
	report := test.CheckRoutines(t)
	defer report()

	l, err := Listen(context.Background(), "tcp4", "127.0.0.1:0", Config{MultipathTCP: true})
	require.NoError(t, err)
	require.Equal(t, unix.IPPROTO_MPTCP, listenerProtocol(t, l))
	l.Close()

	mp := Config{MultipathTCP: true, KeepAlive: net.KeepAliveConfig{Idle: 7 * time.Second}, SendBuffer: 1 << 20}
	d, a := pair(t, "tcp4", "127.0.0.1:0", mp, mp)
	for _, c := range []*net.TCPConn{d, a} {
		require.Equal(t, unix.IPPROTO_MPTCP, sockopt(t, c, unix.SOL_SOCKET, unix.SO_PROTOCOL))
		on, err := c.MultipathTCP()
		require.NoError(t, err)
		require.True(t, on, "both ends asked for MPTCP: no fallback")
		require.Equal(t, 7, sockopt(t, c, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE), "keep-alive reaches the meta socket")
		require.Equal(t, 1, sockopt(t, c, unix.IPPROTO_TCP, unix.TCP_NODELAY))
	}
	const n = 1 << 20
	exchange(t, d, a, n)
	ds, err := Info(d)
	require.NoError(t, err)
	as, err := Info(a)
	require.NoError(t, err)
	t.Logf("dialer:   %v", ds)
	t.Logf("acceptor: %v", as)
	require.True(t, ds.Multipath)
	require.True(t, as.Multipath)
	require.Equal(t, 1, ds.Subflows, "loopback, no endpoints: the first subflow only")
	require.Positive(t, ds.RTT, "TCP_INFO of the first subflow")
	require.Positive(t, ds.SndMSS)
	// The connection's data counters (MPTCP_INFO), not a subflow's: no SYN in them.
	require.Equal(t, uint64(n), ds.BytesSent)
	require.Equal(t, uint64(n), ds.BytesAcked)
	require.Equal(t, uint64(n), as.BytesReceived)
	require.Equal(t, uint64(1), ds.BytesReceived)
	require.Contains(t, ds.String(), "mptcp subflows 1 ")

	// MSS and the queues, which MPA and the QP's send path read, work on the meta socket.
	m, err := EMSS(d)
	require.NoError(t, err)
	require.Positive(t, m)
	_, err = Unsent(d)
	require.NoError(t, err)
	_, err = Buffered(d)
	require.NoError(t, err)
}

// A peer without MPTCP (siw, an iWARP NIC, an older program) reaches an
// MPTCP listener as plain TCP; an MPTCP dialer reaches a plain listener.
func TestMultipathTCPFallback(t *testing.T) {
	skipUnlessMPTCP(t)
	for _, tc := range []struct {
		name           string
		dcfg, lcfg     Config
		dproto, aproto int
	}{
		// Linux hands Accept the TCP subflow itself when the client
		// spoke no MPTCP.
		{"plain dialer", Config{UserTimeout: time.Second}, Config{MultipathTCP: true}, unix.IPPROTO_TCP, unix.IPPROTO_TCP},
		{"plain listener", Config{MultipathTCP: true}, Config{UserTimeout: time.Second}, unix.IPPROTO_MPTCP, unix.IPPROTO_TCP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, a := pair(t, "tcp4", "127.0.0.1:0", tc.dcfg, tc.lcfg)
			require.Equal(t, tc.dproto, sockopt(t, d, unix.SOL_SOCKET, unix.SO_PROTOCOL))
			require.Equal(t, tc.aproto, sockopt(t, a, unix.SOL_SOCKET, unix.SO_PROTOCOL))
			exchange(t, d, a, 1<<20)
			exchange(t, a, d, 1<<16)
			for _, c := range []*net.TCPConn{d, a} {
				on, err := c.MultipathTCP()
				require.NoError(t, err)
				require.False(t, on, "one end has no MPTCP: fallback to TCP")
				s, err := Info(c)
				require.NoError(t, err)
				require.False(t, s.Multipath)
				require.Zero(t, s.Subflows)
			}
			// The plain end keeps its user timeout.
			p := d
			if tc.dproto != unix.IPPROTO_TCP {
				p = a
			}

			require.Equal(t, 1000, sockopt(t, p, unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT))
		})
	}
}

func TestMultipathTCPUserTimeoutRefused(t *testing.T) {
	cfg := Config{MultipathTCP: true, UserTimeout: time.Second}
	_, err := Dial(context.Background(), "tcp4", "127.0.0.1:1", cfg)
	require.ErrorIs(t, err, errConfig)
	require.ErrorContains(t, err, "TCP_USER_TIMEOUT")
	_, err = Listen(context.Background(), "tcp4", "127.0.0.1:0", cfg)
	require.ErrorIs(t, err, errConfig)
}

func TestCongestionControl(t *testing.T) {
	avail, err := AvailableCongestionControl()
	require.NoError(t, err)
	require.NotEmpty(t, avail)
	for _, algo := range []string{"cubic", "bbr", "reno"} {
		if !contains(avail, algo) {
			t.Logf("%s not loaded (have %v)", algo, avail)
			continue
		}
		for _, mptcp := range []bool{false, true} {
			if mptcp && !mptcpEnabled() {
				continue
			}
			cfg := Config{CongestionControl: algo, MultipathTCP: mptcp}
			d, a := pair(t, "tcp4", "127.0.0.1:0", cfg, cfg)
			exchange(t, d, a, 1<<16)
			for _, c := range []*net.TCPConn{d, a} {
				got, err := CongestionControl(c)
				require.NoError(t, err)
				require.Equal(t, algo, got, "MPTCP %v", mptcp)
			}
		}
	}
	// The default is the system's.
	def, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	require.NoError(t, err)
	d, _ := pair(t, "tcp4", "127.0.0.1:0", Config{}, Config{})
	got, err := CongestionControl(d)
	require.NoError(t, err)
	require.Equal(t, strings.TrimSpace(string(def)), got)
}

func TestCongestionControlMissing(t *testing.T) {
	report := test.CheckRoutines(t)
	defer report()
	cfg := Config{CongestionControl: "nosuchcc"}
	ln, err := Listen(context.Background(), "tcp4", "127.0.0.1:0", Config{})
	require.NoError(t, err)
	defer ln.Close()

	_, err = Dial(context.Background(), "tcp4", ln.Addr().String(), cfg)
	var cce *CongestionControlError
	require.ErrorAs(t, err, &cce)
	require.Equal(t, "nosuchcc", cce.Name)
	require.NotEmpty(t, cce.Available)
	require.ErrorIs(t, err, unix.ENOENT)
	require.ErrorContains(t, err, `congestion control "nosuchcc" is not available`)

	_, err = Listen(context.Background(), "tcp4", "127.0.0.1:0", cfg)
	require.ErrorAs(t, err, &cce)
	if mptcpEnabled() {
		_, err = Listen(context.Background(), "tcp4", "127.0.0.1:0", Config{CongestionControl: "nosuchcc", MultipathTCP: true})
		require.ErrorAs(t, err, &cce)
	}

	// A name too long for the kernel, or with a NUL, is a Config error.
	for _, bad := range []string{"abcdefghijklmnop", "bb\x00r"} {
		_, err = Dial(context.Background(), "tcp4", ln.Addr().String(), Config{CongestionControl: bad})
		require.ErrorIs(t, err, errConfig)
		require.False(t, errors.As(err, &cce))
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func mptcpEnabled() bool {
	b, err := os.ReadFile("/proc/sys/net/mptcp/enabled")
	return err == nil && strings.TrimSpace(string(b)) == "1"
}
