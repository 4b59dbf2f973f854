package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The example built and run as a user would: a server process and a client
// process over loopback.
func TestEchoProcesses(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "echo")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var srvOut bytes.Buffer
	srv := exec.CommandContext(ctx, bin, "-p", fmt.Sprint(port), "-t", "20s")
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	require.NoError(t, srv.Start())
	var cliOut []byte
	for range 100 { // until the server listens
		cliOut, err = exec.CommandContext(ctx, bin, "-s", "127.0.0.1", "-p", fmt.Sprint(port), "-m", "ping 16 octets!", "-t", "5s").CombinedOutput()
		if err == nil || !strings.Contains(string(cliOut), "connection refused") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, err, "client:\n%s", cliOut)
	require.NoError(t, srv.Wait(), "server:\n%s", srvOut.String())
	require.Contains(t, string(cliOut), `echo client: received "ping 16 octets!"`)
	require.Contains(t, srvOut.String(), `echo server: received "ping 16 octets!"`)
	require.Contains(t, srvOut.String(), "echo: end 0")
}
