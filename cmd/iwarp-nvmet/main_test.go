package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/require"
)

func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "iwarp-nvmet")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func waitFor(t *testing.T, out *lockedBuf, s string) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), s) }, 20*time.Second, 10*time.Millisecond,
		"waiting for %q in:\n%s", s, out.String())
}

// The binary as a user runs it: a file namespace, a Go host that
// discovers it, writes and reads; bench mode against it; then SIGINT with
// the host still connected: it disconnects the host and exits 0.
func TestServeBenchAndInterrupt(t *testing.T) {
	t.Cleanup(test.CheckRoutines(t))
	bin := build(t)
	file := filepath.Join(t.TempDir(), "disk.img")
	require.NoError(t, os.WriteFile(file, make([]byte, 8<<20), 0o644))
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	var out lockedBuf
	srv := exec.Command(bin, "--listen", addr, "--file", file, "--nqn", "nqn.2024-01.io.goiwarp:cmdtest", "--block-size", "4096",
		"--max-transfer", "1MiB")
	srv.Stdout, srv.Stderr = &out, &out
	require.NoError(t, srv.Start())
	defer srv.Process.Kill()
	waitFor(t, &out, "serving nqn.2024-01.io.goiwarp:cmdtest")
	require.Contains(t, out.String(), "2048 blocks of 4096 octets")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ents, err := host.Discover(ctx, "tcp", addr, host.Config{})
	require.NoError(t, err)
	require.Len(t, ents, 1)
	require.Equal(t, "nqn.2024-01.io.goiwarp:cmdtest", ents[0].SubNQN)
	require.Equal(t, fmt.Sprint(port), ents[0].TrSvcID)

	bench, err := exec.CommandContext(ctx, bin, "bench", "--time", "200ms", "--qd", "4", addr).CombinedOutput()
	require.NoError(t, err, "%s", bench)
	for _, want := range []string{"4 KiB random read:", "IOPS", "128 KiB seq write:", "MiB/s", "p50", "p99.9"} {
		require.Contains(t, string(bench), want)
	}
	t.Logf("bench:\n%s", bench)

	c, err := host.Connect(ctx, "tcp", addr, "nqn.2024-01.io.goiwarp:cmdtest", host.Config{})
	require.NoError(t, err)
	defer c.Close()
	require.EqualValues(t, 8, c.Info.MDTS, "--max-transfer 1MiB: 2^8 pages")
	ns, err := c.Namespace(ctx, 1)
	require.NoError(t, err)
	w := bytes.Repeat([]byte("iwarp-nvmet!"), 4096*16/12+1)[:4096*16]
	_, err = ns.WriteAt(w, 4096*100)
	require.NoError(t, err)
	require.NoError(t, ns.Flush(ctx))
	disk, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, w, disk[4096*100:4096*116], "the write is in the file at its offset")

	require.NoError(t, srv.Process.Signal(os.Interrupt))
	require.NoError(t, srv.Wait(), "exit status after SIGINT:\n%s", out.String())
	require.Contains(t, out.String(), "interrupt: disconnecting hosts")
	require.Contains(t, out.String(), "stopped")
	select {
	case <-c.IOQueueDone(0):
	case <-time.After(10 * time.Second):
		t.Fatal("the host's queue outlived the target")
	}
	t.Logf("target log:\n%s", out.String())
}

func TestUsage(t *testing.T) {
	bin := build(t)
	out, err := exec.Command(bin, "-h").CombinedOutput()
	require.NoError(t, err)
	for _, want := range []string{"--listen ADDR[:PORT]", "--ram SIZE", "--file PATH", "--nqn NQN", "bench"} {
		require.Contains(t, string(out), want)
	}
	require.LessOrEqual(t, strings.Count(string(out), "\n"), 30, "one screen")
	out, err = exec.Command(bin, "--listen", "127.0.0.1:0").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "one of --ram or --file")
	out, err = exec.Command(bin, "--listen", "127.0.0.1:0", "--ram", "12 parsecs").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "bad size")
	out, err = exec.Command(bin, "--listen", "127.0.0.1:0", "--ram", "1MiB", "--max-transfer", "2MiB").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "MaxTransfer 2097152: want a power of two in 8 KiB .. 1 MiB")
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "512KiB": 512 << 10, "64MiB": 64 << 20, "1GiB": 1 << 30, "16M": 16 << 20, "2G": 2 << 30} {
		got, err := parseSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "0", "-1", "MiB", "1.5GiB", "9999999999TiB"} {
		_, err := parseSize(in)
		require.Error(t, err, in)
	}
}
