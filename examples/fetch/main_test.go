package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

// The example built and run as a user would: a server process and client
// processes over loopback. Two clients at once share the server's region,
// one naming its output after the server's file, the other with a chunk
// size that does not divide the file.
func TestFetchProcesses(t *testing.T) {
	bin := build(t)
	src, data := randomFile(t, 3<<20+12345)
	port := freePort(t)
	srv := start(t, bin, "serve", "-p", port, "-n", "2", src)

	dir1, dir2 := t.TempDir(), t.TempDir()
	var wg sync.WaitGroup
	var out1, out2 string
	var err1, err2 error
	wg.Go(func() { out1, err1 = runErr(dir1, bin, "get", "-p", port, "127.0.0.1") })
	wg.Go(func() {
		out2, err2 = runErr(dir2, bin, "get", "-p", port, "-o", "copy", "-chunk", "300K", "-depth", "5", "127.0.0.1")
	})
	wg.Wait()
	require.NoError(t, err1, "client 1:\n%s", out1)
	require.NoError(t, err2, "client 2:\n%s", out2)
	srvOut := srv.wait(t)

	requireFile(t, filepath.Join(dir1, filepath.Base(src)), data)
	requireFile(t, filepath.Join(dir2, "copy"), data)
	sum := fmt.Sprintf("SHA-256 verified: %x", sha256.Sum256(data))
	require.Contains(t, out1, sum)
	require.Contains(t, out1, "Reads of 1048576, 4 at once") // 4 chunks: no more Reads than that
	require.Contains(t, out2, sum)
	require.Contains(t, out2, "Reads of 307200, 5 at once")
	require.Equal(t, 2, strings.Count(srvOut, ": left after"), "server:\n%s", srvOut)
	requireNoTemp(t, dir1, dir2)
}

// A client that asks for more Reads at once than the server serves gets
// the server's number from MPA and keeps to it.
func TestFetchDepthAboveServerIRD(t *testing.T) {
	bin := build(t)
	src, data := randomFile(t, 2<<20+777)
	port := freePort(t)
	srv := start(t, bin, "serve", "-p", port, "-n", "1", "-ird", "4", src)
	dir := t.TempDir()
	out := run(t, dir, bin, "get", "-p", port, "-o", "copy", "-chunk", "64K", "-depth", "64", "127.0.0.1")
	srvOut := srv.wait(t)
	requireFile(t, filepath.Join(dir, "copy"), data)
	require.Contains(t, out, "depth 4, not 64: the server serves no more Reads at once")
	require.Contains(t, out, "Reads of 65536, 4 at once")
	require.Contains(t, out, fmt.Sprintf("SHA-256 verified: %x", sha256.Sum256(data)))
	require.Contains(t, srvOut, "Reads at once: 64 asked, 4 allowed")
}

// The transport flags reach both sides' sockets: a copy over Multipath TCP
// with a chosen algorithm and buffers works, and an algorithm the kernel
// lacks fails the client with the kernel's list.
func TestFetchTransportFlags(t *testing.T) {
	bin := build(t)
	src, data := randomFile(t, 1<<20+99)
	port := freePort(t)
	tcp := []string{"-cc", "reno", "-sockbuf", "2M", "-mptcp"}
	srv := start(t, bin, append(append([]string{"serve", "-p", port, "-n", "1"}, tcp...), src)...)
	dir := t.TempDir()
	out := run(t, dir, bin, append(append([]string{"get", "-p", port, "-o", "copy"}, tcp...), "127.0.0.1")...)
	srv.wait(t)
	requireFile(t, filepath.Join(dir, "copy"), data)
	require.Contains(t, out, fmt.Sprintf("SHA-256 verified: %x", sha256.Sum256(data)))

	out, err := runErr(dir, bin, "get", "-p", port, "-cc", "nosuchcc", "127.0.0.1")
	require.Error(t, err, "client:\n%s", out)
	require.Contains(t, out, `congestion control "nosuchcc" is not available (kernel has `)
}

// A server whose checksum does not match what it serves: the client says
// so, fails, and leaves no output file.
func TestFetchChecksumMismatch(t *testing.T) {
	bin := build(t)
	port := fakeServer(t, func(o *offer) { o.Sum[7] ^= 1 })
	dir := t.TempDir()
	out, err := runErr(dir, bin, "get", "-p", port, "-o", "copy", "127.0.0.1")
	require.Error(t, err, "client:\n%s", out)
	t.Logf("client:\n%s", out)
	require.Contains(t, out, "fetch: SHA-256 mismatch: read ")
	require.Contains(t, out, "copy not written")
	require.NoFileExists(t, filepath.Join(dir, "copy"))
	requireNoTemp(t, dir)
}

// An offer with a wrong RKey: the server's stack refuses the first Read
// with a Terminate, and the client reports it and fails.
func TestFetchBadRKey(t *testing.T) {
	bin := build(t)
	port := fakeServer(t, func(o *offer) { o.RKey ^= 0xff })
	dir := t.TempDir()
	out, err := runErr(dir, bin, "get", "-p", port, "-o", "copy", "127.0.0.1")
	require.Error(t, err, "client:\n%s", out)
	t.Logf("client:\n%s", out)
	require.Contains(t, out, "fetch: RDMA Read of octets 0 to ")
	require.Contains(t, out, "invalid STag", "the Terminate's cause reaches the user")
	require.NoFileExists(t, filepath.Join(dir, "copy"))
	requireNoTemp(t, dir)
}

var binDir string

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "fetch-test-"); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildOut  []byte
	buildErr  error
)

// build builds the program once for all the tests, with the race detector
// when the test runs with it, so that `go test -race` checks the program
// too.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(binDir, "fetch")
	buildOnce.Do(func() {
		args := []string{"build", "-o", bin}
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "-race" && s.Value == "true" {
					args = append(args, "-race")
				}
			}
		}
		buildOut, buildErr = exec.Command("go", append(args, ".")...).CombinedOutput()
	})
	require.NoError(t, buildErr, "%s", buildOut)
	return bin
}

// randomFile writes n random octets to a file in a temporary directory.
func randomFile(t *testing.T, n int) (string, []byte) {
	data := make([]byte, n)
	rand.Read(data)
	path := filepath.Join(t.TempDir(), "payload.bin")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	return path, data
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

// server is a running `fetch serve`.
type server struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
}

// start starts the server and waits until it listens.
func start(t *testing.T, bin string, args ...string) *server {
	t.Helper()
	s := &server{cmd: exec.Command(bin, args...), out: &syncBuffer{}, done: make(chan error, 1)}
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	require.NoError(t, s.cmd.Start())
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-s.done
	})
	require.Eventually(t, func() bool { return strings.Contains(s.out.String(), "fetch serve: serving ") },
		10*time.Second, 10*time.Millisecond, "server did not start:\n%s", s.out)
	return s
}

// wait waits for the server to exit on its own (-n) and returns its output.
func (s *server) wait(t *testing.T) string {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err // for the clean-up
		require.NoError(t, err, "server:\n%s", s.out)
	case <-time.After(30 * time.Second):
		t.Fatalf("server still running:\n%s", s.out)
	}
	return s.out.String()
}

// run runs the client in dir and requires it to succeed.
func run(t *testing.T, dir, bin string, args ...string) string {
	out, err := runErr(dir, bin, args...)
	require.NoError(t, err, "client %v:\n%s", args, out)
	return out
}

func runErr(dir, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, bin, args...)
	c.Dir = dir
	out, err := c.CombinedOutput()
	return string(out), err
}

func requireFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "%s differs from the source (%d octets, want %d)", path, len(got), len(want))
}

// requireNoTemp checks that no partial output is left behind.
func requireNoTemp(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		m, err := filepath.Glob(filepath.Join(d, ".*.part-*"))
		require.NoError(t, err)
		require.Empty(t, m, "partial files left")
	}
}

// fakeServer serves 1 MiB of random data in this process with an offer
// that spoil changes, and returns its port.
func fakeServer(t *testing.T, spoil func(*offer)) string {
	dev, err := verbs.Open(verbs.DeviceAttr{})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	pd := dev.AllocPD()
	data := make([]byte, 1<<20)
	rand.Read(data)
	mr, err := pd.RegMR(data, verbs.RemoteRead)
	require.NoError(t, err)
	cq, err := dev.CreateCQ(1)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	ln, err := dev.Listen(ctx, "tcp", "127.0.0.1:0", verbs.ConnConfig{})
	require.NoError(t, err)
	o := offer{Addr: mr.Addr(), Len: uint64(mr.Len()), RKey: mr.RKey(), Sum: sha256.Sum256(data), Name: "x"}
	spoil(&o)
	go func() {
		req, err := ln.GetRequest(ctx)
		if err != nil {
			return
		}
		qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
		if err != nil {
			req.Reject(nil)
			return
		}
		if req.Accept(ctx, qp, appendOffer(nil, o)) == nil {
			<-qp.Done()
		}
		qp.Close()
	}()
	return fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
}

// syncBuffer is a bytes.Buffer that a process writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
