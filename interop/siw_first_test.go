//go:build interop

package interop

// Who sends first, against siw, with our defaults and no delays: the cases
// an outside test found racy. rdma-core's ucmatose client (siw initiator)
// against a server of ours that sends right after Accept failed the
// connection when our first Sends shared the MPA Reply's segment; a client
// of ours that sends right after Dial hung in about one run of three
// against siw's rdma_server. Each case runs several rounds, since a race
// hides in one.

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/interop/cmatose"
	"github.com/goiwarp/iwarp/interop/rping"
	"github.com/goiwarp/iwarp/interop/siw"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

const (
	firstRounds = 5                                                                   // rounds per case
	ucmaOpts    = "-c 4 -C 10"                                                        // connections, messages each
	ucmaTimeout = 60                                                                  // seconds per ucmatose run in the guest
	echoBinWait = 30 * time.Second                                                    // the echo example's own limit
	ucmaServer  = "ucmatose -p %d " + ucmaOpts                                        // in the guest
	ucmaClient  = "ucmatose -s 10.0.2.2 -p %d " + ucmaOpts                            // in the guest
	rdmaClient  = "rdma_client -s 10.0.2.2 -p %d"                                     // in the guest
	rdmaServer  = "rdma_server -p %d"                                                 // in the guest
	roundLine   = "ROUND %d rc=%s"                                                    // what the guest prints per round
	roundEcho   = "echo \"ROUND $r rc=$rc\"; tail -3 /tmp/out | sed 's/^/  guest: /'" // after each run
)

var ucmaOptions = cmatose.Options{Connections: 4, Count: 10}

// ucmatose's client (siw initiator, no peer-to-peer mode) against our
// cmatose server, which sends first: our Sends wait for FirstFPDUHold
// after the Reply, never sharing its segment.
func TestSiwUcmatoseClient(t *testing.T) {
	dev, err := verbs.Open(verbs.DeviceAttr{})
	require.NoError(t, err)
	ln, err := dev.Listen(context.Background(), "tcp", "127.0.0.1:0", verbs.ConnConfig{})
	require.NoError(t, err)
	defer ln.Close()
	script := fmt.Sprintf("for r in $(seq 1 %d); do waitfile go.$r 300 || exit 1; timeout %d "+ucmaClient+" > /tmp/out 2>&1; rc=$?; %s; done",
		firstRounds, ucmaTimeout, port(ln), roundEcho)
	vm := siwVM(t, "echo READY\n"+script)
	guestLine(t, vm, "READY", 2*time.Minute)
	for r := 1; r <= firstRounds; r++ {
		ctx := vmCtx(t, vm, 2*time.Minute)
		require.NoError(t, vm.Signal(fmt.Sprintf("go.%d", r)))
		start := time.Now()
		err := cmatose.Serve(ctx, ln, ucmaOptions)
		l := guestLine(t, vm, fmt.Sprintf("ROUND %d ", r), time.Minute)
		require.NoError(t, err, "round %d: our server", r)
		require.Equal(t, fmt.Sprintf(roundLine, r, "0"), l, "round %d: ucmatose client", r)
		t.Logf("round %d: %s against siw's ucmatose client in %v", r, ucmaOpts, time.Since(start).Round(time.Millisecond))
	}
	require.NotContains(t, vm.Output(), "CONNECT_ERROR")
}

// ucmatose's server (siw responder, sends first) against our cmatose
// client with the defaults: peer-to-peer mode with a Read RTR, which siw
// answers once its QP reads the stream.
func TestSiwUcmatoseServer(t *testing.T) {
	hp := freePort(t)
	const gp = 7471
	script := fmt.Sprintf("for r in $(seq 1 %d); do (timeout %d "+ucmaServer+" > /tmp/out 2>&1; echo $? > /tmp/rc) & waitport %d || exit 1; echo \"LISTENING $r\"; wait; rc=$(cat /tmp/rc); %s; done",
		firstRounds, ucmaTimeout, gp, gp, roundEcho)
	vm := siwVM(t, script, siw.Forward{Host: hp, Guest: gp})
	for r := 1; r <= firstRounds; r++ {
		guestLine(t, vm, fmt.Sprintf("LISTENING %d", r), 2*time.Minute)
		ctx := vmCtx(t, vm, 2*time.Minute)
		start := time.Now()
		err := cmatose.Client(ctx, fmt.Sprintf("127.0.0.1:%d", hp), ucmaOptions, verbs.ConnConfig{})
		l := guestLine(t, vm, fmt.Sprintf("ROUND %d ", r), time.Minute)
		require.NoError(t, err, "round %d: our client", r)
		require.Equal(t, fmt.Sprintf(roundLine, r, "0"), l, "round %d: ucmatose server", r)
		t.Logf("round %d: %s against siw's ucmatose server in %v", r, ucmaOpts, time.Since(start).Round(time.Millisecond))
	}
}

// buildEcho builds examples/echo.
func buildEcho(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "echo")
	out, err := exec.Command("go", "build", "-o", bin, "../examples/echo").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// librdmacm's rdma_server (siw) against our echo example's client, which
// sends right after Dial.
func TestSiwRdmaServer(t *testing.T) {
	bin := buildEcho(t)
	hp := freePort(t)
	const gp = 7471
	const rounds = 2 * firstRounds
	script := fmt.Sprintf("for r in $(seq 1 %d); do (timeout 60 "+rdmaServer+" > /tmp/out 2>&1; echo $? > /tmp/rc) & waitport %d || exit 1; echo \"LISTENING $r\"; wait; rc=$(cat /tmp/rc); %s; done",
		rounds, gp, gp, roundEcho)
	vm := siwVM(t, script, siw.Forward{Host: hp, Guest: gp})
	for r := 1; r <= rounds; r++ {
		guestLine(t, vm, fmt.Sprintf("LISTENING %d", r), 2*time.Minute)
		ctx := vmCtx(t, vm, time.Minute)
		out, err := exec.CommandContext(ctx, bin, "-s", "127.0.0.1", "-p", fmt.Sprint(hp), "-t", echoBinWait.String()).CombinedOutput()
		l := guestLine(t, vm, fmt.Sprintf("ROUND %d ", r), time.Minute)
		require.NoError(t, err, "round %d: our echo client:\n%s", r, out)
		// rdma_server answers with 16 zeros of its own.
		require.Contains(t, string(out), `echo client: received ""`, "round %d", r)
		require.Equal(t, fmt.Sprintf(roundLine, r, "0"), l, "round %d: rdma_server", r)
	}
}

// librdmacm's rdma_client (siw) against our echo example's server.
func TestSiwRdmaClient(t *testing.T) {
	bin := buildEcho(t)
	hp := freePort(t)
	const rounds = 2 * firstRounds
	script := fmt.Sprintf("for r in $(seq 1 %d); do waitfile go.$r 300 || exit 1; timeout 60 "+rdmaClient+" > /tmp/out 2>&1; rc=$?; %s; done",
		rounds, hp, roundEcho)
	vm := siwVM(t, "echo READY\n"+script)
	guestLine(t, vm, "READY", 2*time.Minute)
	for r := 1; r <= rounds; r++ {
		ctx := vmCtx(t, vm, time.Minute)
		srv := exec.CommandContext(ctx, bin, "-p", fmt.Sprint(hp), "-t", echoBinWait.String())
		var out strings.Builder
		srv.Stdout, srv.Stderr = &out, &out
		require.NoError(t, srv.Start())
		waitListening(t, hp)
		require.NoError(t, vm.Signal(fmt.Sprintf("go.%d", r)))
		err := srv.Wait()
		l := guestLine(t, vm, fmt.Sprintf("ROUND %d ", r), time.Minute)
		require.NoError(t, err, "round %d: our echo server:\n%s", r, out.String())
		require.Equal(t, fmt.Sprintf(roundLine, r, "0"), l, "round %d: rdma_client", r)
	}
}

// waitListening waits until something accepts on 127.0.0.1:port: a
// process just started, which a loaded machine may take seconds to run
// (the wait ends when it listens; its bound is a minute).
func waitListening(t *testing.T, port int) {
	t.Helper()
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if ln, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
			ln.Close()
			return
		}
	}
	t.Fatalf("nothing listens on %d", port)
}

// rping in both roles with our defaults (no FirstFPDUDelay): several
// connections, one after the other, in one VM each way.
func TestSiwRpingDefaults(t *testing.T) {
	t.Run("our client", func(t *testing.T) {
		hp := freePort(t)
		const gp = 7001
		script := fmt.Sprintf("for r in $(seq 1 %d); do (timeout 60 rping -s -a 10.0.2.15 -p %d -C %d -S 64 -V > /tmp/out 2>&1; echo $? > /tmp/rc) & waitport %d || exit 1; echo \"LISTENING $r\"; wait; rc=$(cat /tmp/rc); %s; done",
			firstRounds, gp, siwPings, gp, roundEcho)
		vm := siwVM(t, script, siw.Forward{Host: hp, Guest: gp})
		for r := 1; r <= firstRounds; r++ {
			guestLine(t, vm, fmt.Sprintf("LISTENING %d", r), 2*time.Minute)
			ctx := vmCtx(t, vm, time.Minute)
			e, err := rping.NewEndpoint()
			require.NoError(t, err)
			err = e.QP.Dial(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", hp), rping.ConnConfig(verbs.ConnConfig{}))
			require.NoError(t, err, "round %d", r)
			p := e.QP.Params()
			require.True(t, p.P2P && p.RTR == mpa.RTRRead, "round %d: the default start-up: %+v", r, p)
			require.NoError(t, e.Client(ctx, siwPings, 64, true), "round %d", r)
			require.NoError(t, e.QP.Disconnect(ctx))
			e.QP.Close()
			require.Equal(t, fmt.Sprintf(roundLine, r, "0"), guestLine(t, vm, fmt.Sprintf("ROUND %d ", r), time.Minute))
		}
	})
	t.Run("our server", func(t *testing.T) {
		dev, err := verbs.Open(verbs.DeviceAttr{})
		require.NoError(t, err)
		ln, err := dev.Listen(context.Background(), "tcp", "127.0.0.1:0", rping.ConnConfig(verbs.ConnConfig{}))
		require.NoError(t, err)
		defer ln.Close()
		script := fmt.Sprintf("for r in $(seq 1 %d); do waitfile go.$r 300 || exit 1; timeout 60 rping -c -a 10.0.2.2 -p %d -C %d -S 64 -V > /tmp/out 2>&1; rc=$?; %s; done",
			firstRounds, port(ln), siwPings, roundEcho)
		vm := siwVM(t, "echo READY\n"+script)
		guestLine(t, vm, "READY", 2*time.Minute)
		for r := 1; r <= firstRounds; r++ {
			ctx := vmCtx(t, vm, time.Minute)
			require.NoError(t, vm.Signal(fmt.Sprintf("go.%d", r)))
			req, err := ln.GetRequest(ctx)
			require.NoError(t, err)
			e, err := rping.NewEndpoint()
			require.NoError(t, err)
			require.NoError(t, req.Accept(ctx, e.QP, nil))
			n, err := e.Server(ctx, 0, 64)
			require.NoError(t, err, "round %d", r)
			require.Equal(t, siwPings, n)
			<-e.QP.Done()
			e.QP.Close()
			require.Equal(t, fmt.Sprintf(roundLine, r, "0"), guestLine(t, vm, fmt.Sprintf("ROUND %d ", r), time.Minute))
		}
	})
}
