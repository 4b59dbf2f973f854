package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/require"

	"github.com/goiwarp/iwarp/internal/flood"
	"github.com/goiwarp/iwarp/nvmeof/host"
)

// A flood of silent connections must not lock a legitimate host out of the
// target: 2 000 of them delayed a host's MPA start-up by 35 s (2 000 / 256
// start-ups at once × the 5 s RequestTimeout), and a sustained flood locked
// hosts out.

// floodConnectBound is how long a host's whole connect (admin queue,
// Fabrics Connect, Identify, an I/O queue: a start-up each) may take while
// the flood goes on, with room for a loaded machine.
const floodConnectBound = 3 * time.Second

// fdsOf returns the descriptors process pid has open.
func fdsOf(t *testing.T, pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Skipf("no /proc/PID/fd: %v", err)
	}
	return len(ents)
}

func TestServeFlood(t *testing.T) {
	t.Cleanup(test.CheckRoutines(t))
	bin := build(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	const nqn = "nqn.2024-01.io.goiwarp:flood"
	var out lockedBuf
	srv := exec.Command(bin, "--listen", addr, "--ram", "64MiB", "--nqn", nqn)
	srv.Stdout, srv.Stderr = &out, &out
	require.NoError(t, srv.Start())
	defer srv.Process.Kill()
	waitFor(t, &out, "serving "+nqn)
	base := fdsOf(t, srv.Process.Pid)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// connect is a legitimate host: it connects, writes and reads back a
	// block, and disconnects.
	block := bytes.Repeat([]byte("legitimate host"), 512/15+1)[:512]
	connect := func() time.Duration {
		t.Helper()
		cctx, ccancel := context.WithTimeout(ctx, 3*floodConnectBound)
		defer ccancel()
		start := time.Now()
		c, err := host.Connect(cctx, "tcp", addr, nqn, host.Config{})
		took := time.Since(start)
		require.NoError(t, err, "a legitimate host during the flood (after %v)", took)
		defer c.Close()
		require.LessOrEqual(t, took, floodConnectBound, "a legitimate host's connect during the flood")
		ns, err := c.Namespace(cctx, 1)
		require.NoError(t, err)
		_, err = ns.WriteAt(block, 0)
		require.NoError(t, err)
		got := make([]byte, len(block))
		_, err = ns.ReadAt(got, 0)
		require.NoError(t, err)
		require.Equal(t, block, got)
		return took
	}

	silent := flood.Start(addr, 0)
	// How fast the flood dials is the machine's speed, not the target's:
	// the bound only stops a flood that makes no progress.
	require.Eventually(t, func() bool { return silent.Count() >= 2000 }, 2*time.Minute, time.Millisecond)
	silent.StopDialing()
	t.Logf("2000 silent connections; a host connected in %v", connect().Round(time.Millisecond))

	f := flood.Start(addr, 2*time.Millisecond)
	var worst time.Duration
	start := time.Now()
	for time.Since(start) < 2*time.Second {
		time.Sleep(300 * time.Millisecond)
		worst = max(worst, connect())
	}
	t.Logf("a sustained flood (%d new silent connections in %v): the slowest host connect %v",
		f.Count(), time.Since(start).Round(time.Millisecond), worst.Round(time.Millisecond))
	f.Close()
	silent.Close()
	require.Eventually(t, func() bool { return fdsOf(t, srv.Process.Pid) <= base }, 10*time.Second, 10*time.Millisecond,
		"the target's fds come back: %d above the start", fdsOf(t, srv.Process.Pid)-base)
	require.NoError(t, srv.Process.Signal(os.Interrupt))
	require.NoError(t, srv.Wait(), "exit status after SIGINT:\n%s", out.String())
}
