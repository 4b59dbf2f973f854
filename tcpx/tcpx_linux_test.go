//go:build linux

package tcpx

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"
	"golang.org/x/sys/unix"
)

// families are the address families the tests run over.
var families = []struct {
	name, network, addr string
}{
	{"IPv4", "tcp4", "127.0.0.1:0"},
	{"IPv6", "tcp6", "[::1]:0"},
}

func skipUnlessFamily(t *testing.T, network string) {
	t.Helper()
	if network == "tcp6" && !nettest.SupportsIPv6() {
		t.Skip("IPv6 is not available on this machine (no ::1 to listen on)")
	}
}

// pair returns a connection dialed with dcfg and its accepted end from a
// Listener with lcfg, closed at the end of the test.
func pair(t *testing.T, network, addr string, dcfg, lcfg Config) (dialed, accepted *net.TCPConn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := Listen(ctx, network, addr, lcfg)
	require.NoError(t, err)
	defer ln.Close()

	type result struct {
		c   *net.TCPConn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		ch <- result{c, err}
	}()
	dialed, err = Dial(ctx, network, ln.Addr().String(), dcfg)
	if err != nil {
		ln.Close()
		<-ch
		require.NoError(t, err, "Dial")
	}
	r := <-ch
	if r.err != nil {
		dialed.Close()
		require.NoError(t, r.err, "Accept")
	}
	t.Cleanup(func() {
		dialed.Close()
		r.c.Close()
	})
	return dialed, r.c
}

// sockopt reads an integer socket option of c.
func sockopt(t *testing.T, c *net.TCPConn, level, opt int) int {
	t.Helper()
	rc, err := c.SyscallConn()
	require.NoError(t, err)
	var v int
	var gerr error
	require.NoError(t, rc.Control(func(fd uintptr) {
		v, gerr = unix.GetsockoptInt(int(fd), level, opt)
	}))
	require.NoError(t, gerr)
	return v
}

func linger(t *testing.T, c *net.TCPConn) *unix.Linger {
	t.Helper()
	rc, err := c.SyscallConn()
	require.NoError(t, err)
	var l *unix.Linger
	var gerr error
	require.NoError(t, rc.Control(func(fd uintptr) {
		l, gerr = unix.GetsockoptLinger(int(fd), unix.SOL_SOCKET, unix.SO_LINGER)
	}))
	require.NoError(t, gerr)
	return l
}

// sysctlInt reads an integer from /proc/sys, or skips the test.
func sysctlInt(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("cannot read %s: %v", path, err)
	}
	f := strings.Fields(string(b))
	n, err := strconv.Atoi(f[len(f)-1])
	require.NoError(t, err)
	return n
}

func TestDialListen(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			skipUnlessFamily(t, fam.network)
			report := test.CheckRoutines(t)
			defer report()

			d, a := pair(t, fam.network, fam.addr, Config{}, Config{})
			want4 := fam.network == "tcp4"
			for _, addr := range []net.Addr{d.LocalAddr(), d.RemoteAddr(), a.LocalAddr(), a.RemoteAddr()} {
				ip := addr.(*net.TCPAddr).IP
				require.Equal(t, want4, ip.To4() != nil, "address %v", addr)
			}
			require.Equal(t, d.LocalAddr().String(), a.RemoteAddr().String())

			// Both directions carry data.
			_, err := d.Write([]byte("ping"))
			require.NoError(t, err)
			buf := make([]byte, 4)
			_, err = io.ReadFull(a, buf)
			require.NoError(t, err)
			require.Equal(t, "ping", string(buf))
			_, err = a.Write([]byte("pong"))
			require.NoError(t, err)
			_, err = io.ReadFull(d, buf)
			require.NoError(t, err)
			require.Equal(t, "pong", string(buf))
		})
	}
}

func TestOptionsApplied(t *testing.T) {
	// Below the default net.core.{w,r}mem_max of 212992, so the kernel does
	// not cap them.
	const sndbuf, rcvbuf = 96 << 10, 128 << 10
	if sysctlInt(t, "/proc/sys/net/core/wmem_max") < sndbuf || sysctlInt(t, "/proc/sys/net/core/rmem_max") < rcvbuf {
		t.Skip("net.core.wmem_max or rmem_max is below the buffer sizes under test")
	}
	cfg := Config{
		SendBuffer:  sndbuf,
		RecvBuffer:  rcvbuf,
		KeepAlive:   net.KeepAliveConfig{Idle: 7 * time.Second, Interval: 3 * time.Second, Count: 4},
		UserTimeout: 12500 * time.Millisecond,
	}
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			skipUnlessFamily(t, fam.network)
			report := test.CheckRoutines(t)
			defer report()

			d, a := pair(t, fam.network, fam.addr, cfg, cfg)
			for _, c := range []struct {
				side string
				c    *net.TCPConn
			}{{"dialed", d}, {"accepted", a}} {
				tcp := func(opt int) int { return sockopt(t, c.c, unix.IPPROTO_TCP, opt) }
				sock := func(opt int) int { return sockopt(t, c.c, unix.SOL_SOCKET, opt) }
				require.Equal(t, 1, tcp(unix.TCP_NODELAY), "%s TCP_NODELAY", c.side)
				require.Equal(t, 2*sndbuf, sock(unix.SO_SNDBUF), "%s SO_SNDBUF (Linux doubles it)", c.side)
				require.Equal(t, 2*rcvbuf, sock(unix.SO_RCVBUF), "%s SO_RCVBUF (Linux doubles it)", c.side)
				require.Equal(t, 12500, tcp(unix.TCP_USER_TIMEOUT), "%s TCP_USER_TIMEOUT ms", c.side)
				require.Equal(t, 1, sock(unix.SO_KEEPALIVE), "%s SO_KEEPALIVE", c.side)
				require.Equal(t, 7, tcp(unix.TCP_KEEPIDLE), "%s TCP_KEEPIDLE s", c.side)
				require.Equal(t, 3, tcp(unix.TCP_KEEPINTVL), "%s TCP_KEEPINTVL s", c.side)
				require.Equal(t, 4, tcp(unix.TCP_KEEPCNT), "%s TCP_KEEPCNT", c.side)
				require.Zero(t, linger(t, c.c).Onoff, "%s SO_LINGER off", c.side)
			}
		})
	}
}

func TestZeroConfig(t *testing.T) {
	report := test.CheckRoutines(t)
	defer report()

	d, a := pair(t, "tcp4", "127.0.0.1:0", Config{}, Config{})
	for _, c := range []*net.TCPConn{d, a} {
		require.Equal(t, 1, sockopt(t, c, unix.IPPROTO_TCP, unix.TCP_NODELAY))
		require.Zero(t, sockopt(t, c, unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT))
		require.Equal(t, 1, sockopt(t, c, unix.SOL_SOCKET, unix.SO_KEEPALIVE))
		require.Equal(t, 15, sockopt(t, c, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE))
		require.Equal(t, 15, sockopt(t, c, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL))
		require.Equal(t, 9, sockopt(t, c, unix.IPPROTO_TCP, unix.TCP_KEEPCNT))
		require.Zero(t, linger(t, c).Onoff)
	}
}

func TestNagleNoKeepAliveAbortOnClose(t *testing.T) {
	report := test.CheckRoutines(t)
	defer report()

	cfg := Config{Nagle: true, NoKeepAlive: true, AbortOnClose: true}
	d, a := pair(t, "tcp4", "127.0.0.1:0", cfg, cfg)
	for _, c := range []*net.TCPConn{d, a} {
		// Package net turns TCP_NODELAY on for every new connection;
		// Accept and Dial must turn it off again.
		require.Zero(t, sockopt(t, c, unix.IPPROTO_TCP, unix.TCP_NODELAY))
		require.Zero(t, sockopt(t, c, unix.SOL_SOCKET, unix.SO_KEEPALIVE))
		l := linger(t, c)
		require.Equal(t, int32(1), l.Onoff)
		require.Zero(t, l.Linger)
	}

	// With AbortOnClose, a plain Close resets the connection.
	require.NoError(t, d.Close())
	_, err := a.Read(make([]byte, 1))
	require.ErrorIs(t, err, syscall.ECONNRESET)
}

func TestApply(t *testing.T) {
	report := test.CheckRoutines(t)
	defer report()

	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	a, err := ln.Accept()
	require.NoError(t, err)
	defer a.Close()

	tc := c.(*net.TCPConn)
	require.NoError(t, Apply(tc, Config{
		Nagle:       true,
		RecvBuffer:  100_000,
		UserTimeout: 1500 * time.Microsecond, // rounds up to 2 ms
		KeepAlive:   net.KeepAliveConfig{Idle: 20 * time.Second, Interval: -1, Count: -1},
	}))
	require.Zero(t, sockopt(t, tc, unix.IPPROTO_TCP, unix.TCP_NODELAY))
	require.Equal(t, 200_000, sockopt(t, tc, unix.SOL_SOCKET, unix.SO_RCVBUF))
	require.Equal(t, 2, sockopt(t, tc, unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT))
	require.Equal(t, 1, sockopt(t, tc, unix.SOL_SOCKET, unix.SO_KEEPALIVE))
	require.Equal(t, 20, sockopt(t, tc, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE))
	require.Equal(t, 9, sockopt(t, tc, unix.IPPROTO_TCP, unix.TCP_KEEPCNT), "a negative Count leaves the system value")

	require.Error(t, Apply(tc, Config{SendBuffer: -1}))

	// A closed connection reports an error rather than panicking.
	require.NoError(t, tc.Close())
	require.ErrorIs(t, Apply(tc, Config{}), net.ErrClosed)
	_, err = EMSS(tc)
	require.ErrorIs(t, err, net.ErrClosed)
	_, err = Info(tc)
	require.ErrorIs(t, err, net.ErrClosed)
}

func TestEMSS(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			skipUnlessFamily(t, fam.network)
			report := test.CheckRoutines(t)
			defer report()

			d, a := pair(t, fam.network, fam.addr, Config{}, Config{})
			for _, c := range []*net.TCPConn{d, a} {
				mss, err := EMSS(c)
				require.NoError(t, err)
				require.Positive(t, mss)
				require.LessOrEqual(t, mss, 65535)
				st, err := Info(c)
				require.NoError(t, err)
				require.Equal(t, uint32(mss), st.SndMSS, "TCP_MAXSEG and tcpi_snd_mss are both mss_cache")
				t.Logf("%s EMSS on loopback: %d", fam.name, mss)
			}
		})
	}
}

func TestInfo(t *testing.T) {
	report := test.CheckRoutines(t)
	defer report()

	d, a := pair(t, "tcp4", "127.0.0.1:0", Config{}, Config{})
	const n = 1 << 20
	errc := make(chan error, 1)
	go func() {
		// Read all n octets, then answer with one; the answer's ACK field
		// acknowledges all n, so once the dialer has read it, its
		// tcpi_bytes_acked must cover them.
		_, err := io.CopyN(io.Discard, a, n)
		if err == nil {
			_, err = a.Write([]byte{1})
		}
		errc <- err
	}()
	_, err := d.Write(make([]byte, n))
	require.NoError(t, err)
	_, err = io.ReadFull(d, make([]byte, 1))
	require.NoError(t, err)
	require.NoError(t, <-errc)

	ds, err := Info(d)
	require.NoError(t, err)
	as, err := Info(a)
	require.NoError(t, err)
	t.Logf("dialer:   %v", ds)
	t.Logf("acceptor: %v", as)

	require.Positive(t, ds.RTT)
	require.Positive(t, ds.RTO)
	require.Positive(t, ds.SndCwnd)
	require.Positive(t, ds.SndMSS)
	require.Positive(t, ds.PMTU)
	require.GreaterOrEqual(t, ds.BytesSent, uint64(n))
	// Linux counts the dialer's SYN in tcpi_bytes_acked.
	require.Contains(t, []uint64{n, n + 1}, ds.BytesAcked)
	require.Equal(t, uint64(1), ds.BytesReceived)
	require.Equal(t, uint64(n), as.BytesReceived)
	require.Equal(t, uint64(1), as.BytesSent)
	require.Equal(t, uint32(1), as.DataSegsOut, "one write of one octet")
	require.GreaterOrEqual(t, ds.DataSegsOut, uint32(n/65536), "1 MiB in segments of at most 64 KiB")
	require.Contains(t, ds.String(), "rtt ")
}

func TestAbort(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			skipUnlessFamily(t, fam.network)
			report := test.CheckRoutines(t)
			defer report()

			d, a := pair(t, fam.network, fam.addr, Config{}, Config{})
			// No data is left unread on d, which alone would make Close
			// send an RST: the RST must come from SO_LINGER.
			require.NoError(t, Abort(d))

			_, err := a.Read(make([]byte, 1))
			require.ErrorIs(t, err, syscall.ECONNRESET)
			_, err = d.Write([]byte{1})
			require.ErrorIs(t, err, net.ErrClosed, "Abort closes the connection")
		})
	}
}

func TestListenerClose(t *testing.T) {
	report := test.CheckRoutines(t)
	defer report()

	ln, err := Listen(context.Background(), "tcp", "127.0.0.1:0", Config{})
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		_, err := ln.Accept()
		errc <- err
	}()
	require.NoError(t, ln.Close())
	require.ErrorIs(t, <-errc, net.ErrClosed)
}

func TestListenerDeadline(t *testing.T) {
	report := test.CheckRoutines(t)
	defer report()

	ln, err := Listen(context.Background(), "tcp4", "127.0.0.1:0", Config{})
	require.NoError(t, err)
	defer ln.Close()
	require.NoError(t, ln.SetDeadline(time.Now().Add(-time.Second)))
	_, err = ln.Accept()
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
}

func TestBadArguments(t *testing.T) {
	report := test.CheckRoutines(t)
	defer report()
	ctx := context.Background()

	for _, cfg := range []Config{
		{SendBuffer: -1},
		{RecvBuffer: -5},
		{UserTimeout: -time.Second},
		{UserTimeout: 1 << 62},
	} {
		_, err := Dial(ctx, "tcp", "127.0.0.1:1", cfg)
		require.ErrorIs(t, err, errConfig, "%+v", cfg)
		_, err = Listen(ctx, "tcp", "127.0.0.1:0", cfg)
		require.ErrorIs(t, err, errConfig, "%+v", cfg)
	}
	for _, network := range []string{"udp", "unix", "ip4", ""} {
		_, err := Dial(ctx, network, "127.0.0.1:1", Config{})
		require.Error(t, err, network)
		_, err = Listen(ctx, network, "127.0.0.1:0", Config{})
		require.Error(t, err, network)
	}

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err := Dial(canceled, "tcp", "127.0.0.1:1", Config{})
	require.Error(t, err)
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
}

// Buffered sees what arrived and was not read; Unsent what was written and
// is held back, here by a receiver that does not read and has a small window.
func TestBufferedUnsent(t *testing.T) {
	c, s := pair(t, "tcp", "127.0.0.1:0", Config{SendBuffer: 1 << 20}, Config{RecvBuffer: 4096})
	n, err := Unsent(c)
	require.NoError(t, err)
	require.Zero(t, n, "nothing written yet")

	const size = 256 << 10
	require.NoError(t, c.SetWriteDeadline(time.Now().Add(10*time.Second)))
	_, err = c.Write(make([]byte, size))
	require.NoError(t, err, "fits the 1 MiB send buffer")
	require.Eventually(t, func() bool {
		in, err := Buffered(s)
		return err == nil && in > 0
	}, 5*time.Second, time.Millisecond, "the receiver holds data")
	n, err = Unsent(c)
	require.NoError(t, err)
	require.Greater(t, n, size/2, "most of it waits for the receiver's window")

	go io.CopyN(io.Discard, s, size)
	require.Eventually(t, func() bool {
		u, err1 := Unsent(c)
		in, err2 := Buffered(s)
		return err1 == nil && err2 == nil && u == 0 && in == 0
	}, 10*time.Second, time.Millisecond, "all sent and read")
}

// LocalAddr binds the dialed socket: the listener sees the connection come
// from that address (127.0.0.2, another loopback address than the
// listener's, and a port of our choosing), options still applied.
// Misspelt or foreign addresses fail with a clear error, no connection.
func TestLocalAddr(t *testing.T) {
	report := test.CheckRoutines(t)
	defer report()
	d, a := pair(t, "tcp4", "127.0.0.1:0", Config{LocalAddr: "127.0.0.2", SendBuffer: 1 << 20}, Config{})
	require.Equal(t, "127.0.0.2", a.RemoteAddr().(*net.TCPAddr).IP.String(), "the source the listener sees")
	require.Equal(t, d.LocalAddr().String(), a.RemoteAddr().String())
	rc, err := d.SyscallConn()
	require.NoError(t, err)
	var sndbuf int
	require.NoError(t, rc.Control(func(fd uintptr) { sndbuf, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF) }))
	require.NoError(t, err)
	require.GreaterOrEqual(t, sndbuf, 1<<20, "SendBuffer applied too")

	// An exact port.
	probe, err := net.Listen("tcp4", "127.0.0.3:0")
	require.NoError(t, err)
	port := probe.Addr().(*net.TCPAddr).Port
	probe.Close()
	_, a = pair(t, "tcp4", "127.0.0.1:0", Config{LocalAddr: net.JoinHostPort("127.0.0.3", strconv.Itoa(port))}, Config{})
	require.Equal(t, "127.0.0.3:"+strconv.Itoa(port), a.RemoteAddr().String())

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ln, err := Listen(ctx, "tcp4", "127.0.0.1:0", Config{})
	require.NoError(t, err)
	defer ln.Close()
	for _, bad := range []string{"localhost", "127.0.0.1:http", "127.0.0.1:70000", "300.1.1.1"} {
		_, err := Dial(ctx, "tcp4", ln.Addr().String(), Config{LocalAddr: bad})
		require.ErrorIs(t, err, errConfig, bad)
	}
	// An address no interface here has.
	_, err = Dial(ctx, "tcp4", ln.Addr().String(), Config{LocalAddr: "192.0.2.1"})
	require.ErrorIs(t, err, unix.EADDRNOTAVAIL)
}
