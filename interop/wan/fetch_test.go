//go:build netns

package wan

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// examples/fetch as a user runs it across a WAN: `fetch serve` in
// namespace B and `fetch get` in A, separate processes, over the path of
// TestWAN (25 ms each way, 0.01 % loss, 1 Gbit/s), with the program's
// defaults (port, 16 Reads of 1 MiB in flight, the server's IRD of 16).
// The client must fetch WAN_FETCH_BYTES (default 256 MiB) of random data,
// verify its SHA-256 and disconnect in order, and the server must see it
// leave; the throughput is logged, not asserted.
//
// The program sets no socket buffers: autotuning grows them up to the
// maxima of net.ipv4.tcp_rmem and tcp_wmem, which are per namespace, and
// the test raises those above the path's BDP (6.25 MB) in both namespaces
// (the alternative to raising the host's net.core.*mem_max in README.md's
// Socket buffers).
//
// TestFetchTLS is the same inside mutual TLS (-tls-cert, -tls-key, -tls-ca
// on both sides).
func TestFetch(t *testing.T)    { testFetch(t, false) }
func TestFetchTLS(t *testing.T) { testFetch(t, true) }

func testFetch(t *testing.T, withTLS bool) {
	size := envSize("WAN_FETCH_BYTES", 256<<20)
	n := impairedNet(t)
	require.NoError(t, n.Impair(wanProfile))
	raiseAutotuning(t, n)
	t.Logf("%s", n.Describe())

	dir := t.TempDir()
	bin := filepath.Join(dir, "fetch")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/goiwarp/iwarp/examples/fetch").CombinedOutput()
	require.NoError(t, err, "go build:\n%s", out)
	data := make([]byte, size)
	fillRandom(data, 3)
	want := sha256.Sum256(data)
	src, dst := filepath.Join(dir, "payload.bin"), filepath.Join(dir, "copy.bin")
	require.NoError(t, os.WriteFile(src, data, 0o644))
	data = nil
	var srvTLS, cliTLS []string
	if withTLS {
		srvTLS, cliTLS = fetchTLSFlags(t, dir, n.AddrB)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, "ip", slices.Concat([]string{"netns", "exec", n.B.Name, bin, "serve", "-n", "1"}, srvTLS, []string{src})...)
	var srvOut strings.Builder
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	require.NoError(t, srv.Start())
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	t.Cleanup(func() {
		srv.Process.Kill()
		<-srvDone
	})
	require.Eventually(t, func() bool {
		out, _ := n.B.Exec("ss", "-Htln", "sport = :7472")
		return strings.Contains(out, "7472")
	}, time.Minute, 10*time.Millisecond, "server listening") // a process start on a loaded machine

	t0 := time.Now()
	cli, err := exec.CommandContext(ctx, "ip", slices.Concat([]string{"netns", "exec", n.A.Name, bin, "get", "-o", dst}, cliTLS, []string{n.AddrB})...).CombinedOutput()
	el := time.Since(t0)
	t.Logf("fetch get (%v in all):\n%s", el.Round(time.Millisecond), cli)
	require.NoError(t, err, "client failed; server:\n%s", &srvOut)
	select {
	case err = <-srvDone:
		srvDone <- err // for the clean-up
	case <-ctx.Done():
		t.Fatalf("server still running:\n%s", &srvOut)
	}
	t.Logf("fetch serve:\n%s", &srvOut)
	t.Logf("link: %s", n.Stats())
	require.NoError(t, err, "server")

	require.Contains(t, string(cli), "Reads of 1048576, 16 at once")
	if withTLS {
		require.Contains(t, string(cli), `TLS 1.3 TLS_AES_128_GCM_SHA256, peer "server"`)
		require.Contains(t, srvOut.String(), `TLS 1.3 TLS_AES_128_GCM_SHA256, peer "client"`)
	}
	require.Contains(t, string(cli), fmt.Sprintf("fetch: SHA-256 verified: %x", want))
	require.Contains(t, srvOut.String(), "Reads at once: 16 asked, 16 allowed")
	require.Contains(t, srvOut.String(), ": left after", "the client disconnected in order")
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	require.Equal(t, want, sha256.Sum256(got), "the output file differs from the source")

	m := regexp.MustCompile(`MiB in (\S+): [\d.]+ MiB/s \((\d+) Mbit/s\)`).FindStringSubmatch(string(cli))
	require.NotNil(t, m, "no throughput line")
	t.Logf("throughput: %s in %s = %s Mbit/s on a %s path (the process's own timing, first Read to last octet written)",
		mib(uint64(size)), m[1], m[2], bits(wanProfile.Rate))
}

// raiseAutotuning lets autotuning grow socket buffers to 32 MiB in both of
// n's namespaces (net.ipv4.tcp_rmem and tcp_wmem are per namespace), well
// above the path's BDP, for programs that set no buffers of their own.
func raiseAutotuning(t testing.TB, n *Net) {
	t.Helper()
	for _, ns := range []*NS{n.A, n.B} {
		require.NoError(t, ns.Sysctl("net.ipv4.tcp_rmem", "4096 131072 33554432"))
		require.NoError(t, ns.Sysctl("net.ipv4.tcp_wmem", "4096 16384 33554432"))
	}
}
