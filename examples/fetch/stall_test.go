package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/stretchr/testify/require"
)

// stallStartup connects to port and sends an MPA Request in peer-to-peer
// mode, then nothing: the server's Accept waits for an RTR that never
// comes.
func stallStartup(t *testing.T, port string) {
	t.Helper()
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", port))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	f, err := mpa.BuildRequest(mpa.Config{}, nil)
	require.NoError(t, err)
	require.True(t, f.Enhanced, "peer-to-peer mode: the server waits for an RTR")
	b, err := f.Append(nil)
	require.NoError(t, err)
	_, err = c.Write(b)
	require.NoError(t, err)
}

// A client that stalls its start-up holds up no other: a client that
// comes after it gets the file at once, and the server, its -n served,
// ends the stalled start-up and exits.
func TestFetchStalledClient(t *testing.T) {
	bin := build(t)
	src, data := randomFile(t, 1<<20+5)
	port := freePort(t)
	srv := start(t, bin, "serve", "-p", port, "-n", "1", src)
	stallStartup(t, port)
	time.Sleep(200 * time.Millisecond) // the server has the stalled request first

	dir := t.TempDir()
	begin := time.Now()
	run(t, dir, bin, "get", "-p", port, "-o", "copy", "127.0.0.1")
	took := time.Since(begin)
	srvOut := srv.wait(t)
	exited := time.Since(begin)
	t.Logf("the client was served in %v, the server exited after %v:\n%s", took, exited, srvOut)
	requireFile(t, filepath.Join(dir, "copy"), data)
	// Held behind the stalled start-up, the client would have its file,
	// and the server exit, only after RequestTimeout (5 s) from the
	// stall: 4.8 s after begin. Served at once, the client (a process
	// built with -race when the test runs with it) took 1.6 s under -race
	// beside two CPU hogs.
	require.Less(t, took, 3500*time.Millisecond, "the client waited behind the stalled one:\n%s", srvOut)
	require.Less(t, exited, 4*time.Second, "the stalled start-up held the server:\n%s", srvOut)
	require.Equal(t, 1, strings.Count(srvOut, ": left after"), "server:\n%s", srvOut)
}
