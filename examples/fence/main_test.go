package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// The example as two cluster nodes run it, processes against a target on
// two ports: node 1 holds and beats; node 2 declares it dead and takes the
// disk; node 1 learns it at once and stops with status 3, and the target
// refuses node 1's host any write from then on.
func TestFenceProcesses(t *testing.T) {
	bin := build(t)
	const nqn = "nqn.2024-01.io.goiwarp:shared"
	sub, err := target.NewSubsystem(nqn)
	require.NoError(t, err)
	disk := target.NewMemBackend(1 << 20)
	_, err = sub.AddNamespaceConfig(disk, target.NamespaceConfig{Reservations: true,
		ReservationFile: filepath.Join(t.TempDir(), "ns1.resv")})
	require.NoError(t, err)
	tg, err := target.New(target.Config{}, sub)
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	var addrs []string
	for range 2 {
		p, err := tg.ListenPort(context.Background(), "tcp", "127.0.0.1:0", target.PortConfig{Subsystems: []string{nqn}})
		require.NoError(t, err)
		addrs = append(addrs, p.Addr().String())
	}
	paths := strings.Join(addrs, ",")

	var out1 syncBuffer
	// One heartbeat, then none for an hour: only the notice can tell
	// node 1 it was fenced.
	node1 := exec.Command(bin, "hold", "-key", "1", "-beat", "1h", paths)
	node1.Stdout, node1.Stderr = &out1, &out1
	require.NoError(t, node1.Start())
	done := make(chan error, 1)
	go func() { done <- node1.Wait() }()
	t.Cleanup(func() { node1.Process.Kill(); <-done })
	require.Eventually(t, func() bool { return strings.Contains(out1.String(), "fence: holding with key 0x1") },
		20*time.Second, 10*time.Millisecond, "%s", &out1)
	require.Eventually(t, func() bool {
		b := make([]byte, 64)
		disk.ReadAt(b, 512) // key 1's block
		return bytes.HasPrefix(b, []byte("heartbeat 1 from key 0x1"))
	}, 10*time.Second, 10*time.Millisecond, "node 1's heartbeat on the disk")

	out2, err := exec.Command(bin, "take", "-key", "2", "-victim", "1", paths).CombinedOutput()
	require.NoError(t, err, "%s", out2)
	require.Contains(t, string(out2), "fence: key 0x1 fenced")
	require.Contains(t, string(out2), "reservation: Write Exclusive - Registrants Only, generation 3, persists through power loss: true")
	require.Contains(t, string(out2), "key 0x2 host 676f69776172702d0000000000000002 (holder)")
	require.NotContains(t, string(out2), "key 0x1 host", "node 1 unregistered")

	select {
	case err := <-done:
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "%v\n%s", err, &out1)
		require.Equal(t, fencedStatus, ee.ExitCode(), "%s", &out1)
		done <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatalf("node 1 was not told:\n%s", &out1)
	}
	require.Contains(t, out1.String(), "Registration Preempted on namespace 1")
	require.Contains(t, out1.String(), "fence: fenced")

	out3, err := exec.Command(bin, "show", paths).CombinedOutput()
	require.NoError(t, err, "%s", out3)
	require.Contains(t, string(out3), "key 0x2 host")
	c, err := host.Connect(context.Background(), "tcp", addrs[0], nqn, host.Config{IOQueues: 1,
		HostID: [16]byte{'g', 'o', 'i', 'w', 'a', 'r', 'p', '-', 15: 1}})
	require.NoError(t, err)
	defer c.Close()
	n, err := c.Namespace(context.Background(), 1)
	require.NoError(t, err)
	_, err = n.WriteAt(make([]byte, 512), 0)
	var se *nvme.StatusError
	require.ErrorAs(t, err, &se, "node 1's host, fenced")
	require.Equal(t, nvme.StatusReservationConflict|nvme.DNR, se.Status)
}

var binDir string

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "fence-test-"); err != nil {
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

// build builds the program once, with the race detector when the test
// runs with it, so that `go test -race` checks the program too.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(binDir, "fence")
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

// A node that loses the disk (the target gone) stops by itself, with
// status 1, within its -timeout: no notice could reach it.
func TestFenceDiskLost(t *testing.T) {
	bin := build(t)
	const nqn = "nqn.2024-01.io.goiwarp:shared"
	sub, err := target.NewSubsystem(nqn)
	require.NoError(t, err)
	_, err = sub.AddNamespaceConfig(target.NewMemBackend(1<<20), target.NamespaceConfig{Reservations: true})
	require.NoError(t, err)
	tg, err := target.New(target.Config{}, sub)
	require.NoError(t, err)
	addr, err := tg.Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var out syncBuffer
	node := exec.Command(bin, "hold", "-key", "1", "-beat", "100ms", "-timeout", "2s", addr.String())
	node.Stdout, node.Stderr = &out, &out
	require.NoError(t, node.Start())
	done := make(chan error, 1)
	go func() { done <- node.Wait() }()
	t.Cleanup(func() { node.Process.Kill(); <-done })
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "holding with key 0x1") },
		20*time.Second, 10*time.Millisecond, "%s", &out)
	tg.Close()
	select {
	case err := <-done:
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "%v\n%s", err, &out)
		require.Equal(t, 1, ee.ExitCode(), "%s", &out)
		require.Contains(t, out.String(), "fence: heartbeat:")
		done <- err
	case <-time.After(20 * time.Second):
		t.Fatalf("the node went on without its disk:\n%s", &out)
	}
}
