//go:build interop

package interop

// Our rsockets (package rsocket) against librdmacm's own on a kernel siw
// peer in the VM: rdma-core's rstream in both roles (its latency and
// bandwidth patterns, several sizes, data verified on both sides), and a
// plain BSD-socket program (sockcat, beside siwvm.sh) run under
// LD_PRELOAD=librspreload.so in both roles. One VM for all of it.

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/interop/siw"
	"github.com/goiwarp/iwarp/rsocket"
	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

const rspreload = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so"

// rstreamCase is one rstream run in custom mode: -S size -C count -I iters.
// Latency: count 1, many iterations; bandwidth: one iteration, many
// transfers.
type rstreamCase struct {
	name               string
	size, count, iters int
	flags              string // more -T options for rstream
}

var rstreamCases = []rstreamCase{
	{"lat-64", 64, 1, 100, "-T b"},
	{"bw-64", 64, 500, 1, "-T b"},
	{"bw-4k", 4096, 100, 1, "-T b"},
	{"lat-64k", 65536, 1, 10, "-T b"},
	{"bw-1m", 1 << 20, 4, 1, "-T b"},
	{"bw-4k-nonblocking", 4096, 100, 1, ""}, // rstream's default: MSG_DONTWAIT, polling
}

func (c rstreamCase) args() string {
	return fmt.Sprintf("-S %d -C %d -I %d -T v %s", c.size, c.count, c.iters, c.flags)
}

// rstreamPeer speaks rstream's exchange (run_test with -T v): a 16-octet
// sync each way, then per iteration count transfers from the client and
// count back, every octet the next of a counter mod 256 (format_buf,
// verify_buf) on each side.
func rstreamPeer(c net.Conn, client bool, size, count, iters int) error {
	var tx, rx byte
	buf := make([]byte, size)
	send := func(n int) error {
		for i := range buf[:n] {
			buf[i] = tx
			tx++
		}
		_, err := c.Write(buf[:n])
		return err
	}
	recv := func(n int) error {
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return err
		}
		for i, b := range buf[:n] {
			if b != rx {
				return fmt.Errorf("octet %d of a transfer: %d, want %d", i, b, rx)
			}
			rx++
		}
		return nil
	}
	first, second := recv, send
	if client {
		first, second = send, recv
	}
	if err := first(16); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	if err := second(16); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	for range iters {
		for range count {
			if err := first(size); err != nil {
				return err
			}
		}
		for range count {
			if err := second(size); err != nil {
				return err
			}
		}
	}
	return nil
}

// finish reads what is left until rstream's shutdown (io.EOF) and closes.
func finish(c net.Conn) error {
	c.SetReadDeadline(time.Now().Add(time.Minute))
	n, err := io.Copy(io.Discard, c)
	if err == nil && n > 0 {
		err = fmt.Errorf("%d octets after the exchange", n)
	}
	return errors.Join(err, c.Close())
}

func TestSiwRsocket(t *testing.T) {
	var fwds []siw.Forward
	var script strings.Builder
	// rstream servers, each on its own port.
	srvPorts := make([]int, len(rstreamCases))
	for i, c := range rstreamCases {
		gp := 7471 + i
		fwds = append(fwds, siw.Forward{Host: freePort(t), Guest: gp})
		srvPorts[i] = fwds[len(fwds)-1].Host
		fmt.Fprintf(&script, "( timeout 600 rstream -b 10.0.2.15 -p %d %s > /tmp/rss.%d 2>&1; rc=$?\n"+
			"  sed 's/^/rstream server %d: /' /tmp/rss.%d; echo \"RSERVER %d rc=$rc\" ) &\nwaitport %d 120 || exit 1\n",
			gp, c.args(), i, i, i, i, gp)
	}
	// A socket program under librspreload.so as a server: it sends
	// /host/to-go.bin and keeps what it receives. sockcat is nc in 80
	// lines of C: Debian's nc.openbsd -l accepts with accept4, which
	// librspreload.so (rdma-core 44) does not intercept, and its client
	// did not reach librspreload.so's connect either.
	ncPort := 7600
	fwds = append(fwds, siw.Forward{Host: freePort(t), Guest: ncPort})
	ncHost := fwds[len(fwds)-1].Host
	fmt.Fprintf(&script, "waitfile ncserver 300 || exit 1\n"+
		"( LD_PRELOAD=%s timeout 600 sockcat -l 10.0.2.15 %d < /host/to-go.bin > /tmp/from-go.bin 2>/tmp/ncs.err; rc=$?\n"+
		"  sed 's/^/sockcat server: /' /tmp/ncs.err; cmp /tmp/from-go.bin /host/to-nc.bin && same=same\n"+
		"  echo \"NCSERVER rc=$rc $same\" ) &\nwaitport %d 120 || exit 1\n", rspreload, ncPort, ncPort)
	script.WriteString("echo LISTENING\n")
	// rstream clients, one after the other, each when the host says.
	for i, c := range rstreamCases {
		fmt.Fprintf(&script, "waitfile rclient.%d 300 || exit 1\n"+
			"timeout 120 rstream -s 10.0.2.2 -p $(cat /host/rclient.%d) %s > /tmp/rsc.%d 2>&1; rc=$?\n"+
			"sed 's/^/rstream client %d: /' /tmp/rsc.%d; echo \"RCLIENT %d rc=$rc\"\n", i, i, c.args(), i, i, i, i)
	}
	// sockcat under librspreload.so as a client: it sends /host/to-go.bin
	// to our echo server and keeps the echo.
	fmt.Fprintf(&script, "waitfile ncclient 300 || exit 1\n"+
		"LD_PRELOAD=%s timeout 120 sockcat 10.0.2.2 $(cat /host/ncclient) < /host/to-go.bin > /tmp/echo.bin 2>/tmp/ncc.err; rc=$?\n"+
		"sed 's/^/sockcat client: /' /tmp/ncc.err; cmp /tmp/echo.bin /host/to-go.bin && same=same\n"+
		"echo \"NCCLIENT rc=$rc $same\"\n", rspreload)
	// riostream's iomap mode, refused: it dials us and riomaps its buffer.
	script.WriteString("waitfile rio 300 || exit 1\n" +
		"timeout 60 riostream -s 10.0.2.2 -p $(cat /host/rio) -S 64 -C 1 -I 1 > /tmp/rio 2>&1; rc=$?\n" +
		"sed 's/^/riostream client: /' /tmp/rio; echo \"RIO rc=$rc\"\nwait\n")

	vm := siwVM(t, script.String(), fwds...)
	share := filepath.Join(vm.RunDir, "share")
	require.NoError(t, os.MkdirAll(share, 0o755)) // siwvm.sh may not have made it yet
	toGo, toNC := make([]byte, 300000), make([]byte, 200000)
	rand.Read(toGo)
	rand.Read(toNC)
	require.NoError(t, os.WriteFile(filepath.Join(share, "to-go.bin"), toGo, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(share, "to-nc.bin"), toNC, 0o644))
	require.NoError(t, vm.Signal("ncserver"))
	guestLine(t, vm, "LISTENING", 2*time.Minute)

	// siw's responder reads its socket only once its QP has it: hold our
	// first FPDU back (siwFirstFPDUDelay). With CRCs on (ours ask for
	// them, siw follows), siw 6.1 mis-checks the CRC of an FPDU whose
	// trailer QEMU's network splits across two segments (interop/README.md,
	// "siw mis-checks a CRC whose trailer arrives split"): FPDUs of one
	// segment each, as nvmeof's queues send with CRCs, keep clear of it.
	conn := verbs.ConnConfig{FirstFPDUDelay: siwFirstFPDUDelay, MaxFPDU: 1440, SegmentPerFPDU: true}
	dialer := rsocket.Dialer{Conn: conn}
	lc := rsocket.ListenConfig{Conn: conn}

	t.Run("rstream-server", func(t *testing.T) {
		for i, c := range rstreamCases {
			t.Run(c.name, func(t *testing.T) {
				ctx := vmCtx(t, vm, 2*time.Minute)
				pcap, stop := siwCapture(t, srvPorts[i])
				start := time.Now()
				conn, err := dialer.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", srvPorts[i]))
				require.NoError(t, err)
				require.NoError(t, rstreamPeer(conn, true, c.size, c.count, c.iters), "our rstream client")
				require.NoError(t, finish(conn))
				took := time.Since(start)
				l := guestLine(t, vm, fmt.Sprintf("RSERVER %d ", i), time.Minute)
				stop()
				require.Equal(t, fmt.Sprintf("RSERVER %d rc=0", i), l, "rstream server")
				requireRstreamResult(t, vm, fmt.Sprintf("rstream server %d: ", i), c)
				t.Logf("%s: %d x %d octets each way, verified by rstream and by us, in %v", c.name, c.count*c.iters, c.size, took.Round(time.Millisecond))
				judgeSiw(t, pcap, true, 2*c.count*c.iters, 0) // our Reply and our Request ask for CRCs; siw follows
			})
		}
	})

	t.Run("rstream-client", func(t *testing.T) {
		for i, c := range rstreamCases {
			t.Run(c.name, func(t *testing.T) {
				ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
				require.NoError(t, err)
				defer ln.Close()
				port := ln.Addr().(*net.TCPAddr).Port
				pcap, stop := siwCapture(t, port)
				require.NoError(t, os.WriteFile(filepath.Join(share, fmt.Sprintf("rclient.%d", i)), []byte(fmt.Sprint(port)), 0o644))
				conn, err := acceptCtx(vmCtx(t, vm, 2*time.Minute), ln)
				require.NoError(t, err)
				require.NoError(t, rstreamPeer(conn, false, c.size, c.count, c.iters), "our rstream server")
				require.NoError(t, finish(conn))
				l := guestLine(t, vm, fmt.Sprintf("RCLIENT %d ", i), time.Minute)
				stop()
				require.Equal(t, fmt.Sprintf("RCLIENT %d rc=0", i), l, "rstream client")
				requireRstreamResult(t, vm, fmt.Sprintf("rstream client %d: ", i), c)
				judgeSiw(t, pcap, true, 2*c.count*c.iters, 0) // our Reply and our Request ask for CRCs; siw follows
			})
		}
	})

	// sockcat in the guest listens under librspreload.so; we dial it, send
	// to-nc.bin and half-close, and read to-go.bin until its EOF.
	t.Run("preload-sockcat-server", func(t *testing.T) {
		ctx := vmCtx(t, vm, 2*time.Minute)
		conn, err := dialer.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", ncHost))
		require.NoError(t, err)
		errc := make(chan error, 1)
		go func() {
			_, err := conn.Write(toNC)
			errc <- errors.Join(err, conn.CloseWrite())
		}()
		conn.SetReadDeadline(time.Now().Add(time.Minute))
		got, err := io.ReadAll(conn)
		require.NoError(t, err)
		require.NoError(t, <-errc)
		require.NoError(t, conn.Close())
		require.True(t, bytes.Equal(toGo, got), "sockcat's %d octets arrived as %d, equal %v", len(toGo), len(got), bytes.Equal(toGo, got))
		require.Equal(t, "NCSERVER rc=0 same", guestLine(t, vm, "NCSERVER ", time.Minute), "sockcat got our octets")
	})

	// sockcat in the guest dials our echo server under librspreload.so.
	t.Run("preload-sockcat-client", func(t *testing.T) {
		ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		require.NoError(t, os.WriteFile(filepath.Join(share, "ncclient"), []byte(fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)), 0o644))
		conn, err := acceptCtx(vmCtx(t, vm, 2*time.Minute), ln)
		require.NoError(t, err)
		conn.SetDeadline(time.Now().Add(time.Minute))
		n, err := io.Copy(conn, conn) // until nc's shutdown(SHUT_WR)
		require.NoError(t, err)
		require.Equal(t, int64(len(toGo)), n)
		require.NoError(t, conn.Close())
		require.Equal(t, "NCCLIENT rc=0 same", guestLine(t, vm, "NCCLIENT ", time.Minute), "sockcat got its octets back")
	})

	t.Run("riostream-refused", func(t *testing.T) { testRiostreamRefused(t, vm, share, lc) })
}

// riostream needs an iomap table of the peer's for riomap (RDMA Writes
// straight into a mapped buffer), and we offer one of size 0: its
// riomap fails with ENOMEM before any data, and it closes.
func testRiostreamRefused(t *testing.T, vm *siw.VM, share string, lc rsocket.ListenConfig) {
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	require.NoError(t, os.WriteFile(filepath.Join(share, "rio"), []byte(fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)), 0o644))
	conn, err := acceptCtx(vmCtx(t, vm, 2*time.Minute), ln)
	require.NoError(t, err, "the stream itself connects")
	conn.SetReadDeadline(time.Now().Add(time.Minute))
	n, err := conn.Read(make([]byte, 64))
	require.ErrorIs(t, err, io.EOF, "riostream closes without sending")
	require.Zero(t, n)
	require.NoError(t, conn.Close())
	l := guestLine(t, vm, "RIO ", time.Minute)
	require.NotEqual(t, "RIO rc=0", l)
	require.Contains(t, vm.Output(), "riostream client: riomap: Cannot allocate memory")
	t.Logf("riostream: %s, %q", l, "riomap: Cannot allocate memory")
}

// requireRstreamResult checks rstream's result line (name, size, transfers,
// iterations, total, time, Gb/sec, usec/xfer) and logs it.
func requireRstreamResult(t *testing.T, vm *siw.VM, prefix string, c rstreamCase) {
	t.Helper()
	for _, l := range vm.Lines() {
		if strings.HasPrefix(l, prefix+"custom") {
			t.Logf("rstream: %s", strings.TrimPrefix(l, prefix))
			return
		}
	}
	t.Fatalf("no result line from %q; output:\n%s", prefix, vm.Output())
}

// acceptCtx accepts one connection, giving up when ctx ends.
func acceptCtx(ctx context.Context, ln *rsocket.Listener) (*rsocket.Conn, error) {
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	return ln.AcceptRsocket()
}
