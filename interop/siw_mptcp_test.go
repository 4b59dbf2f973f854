//go:build interop

package interop

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/interop/rping"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/tcpx"
	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

// TestSiwRpingClientMPTCP: siw's rping client, a plain TCP peer, against a
// Listener with tcpx.Config.MultipathTCP. The listener is an MPTCP socket
// (ss -M lists it); siw's connection falls back to TCP in the handshake and
// runs as on any listener: 3 pings of 16 KiB validated by siw, and
// Wireshark's verdict on the capture as for the other siw tests.
func TestSiwRpingClientMPTCP(t *testing.T) {
	d, err := verbs.Open(verbs.DeviceAttr{})
	require.NoError(t, err)
	cfg := verbs.ConnConfig{MPA: mpa.Config{Rev: 2, CRC: mpa.CRCOff}, TCP: tcpx.Config{MultipathTCP: true}}
	ln, err := d.Listen(context.Background(), "tcp", "127.0.0.1:0", rping.ConnConfig(cfg))
	require.NoError(t, err)
	defer ln.Close()
	p := port(ln)
	out, err := exec.Command("ss", "-HMltn", fmt.Sprintf("sport = :%d", p)).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), fmt.Sprintf(":%d", p), "the Listener is not an MPTCP socket (ss -M)")

	const size = 16384
	vm := siwVM(t, fmt.Sprintf("echo READY\nwaitfile go 300 || exit 1\n"+
		"timeout 60 rping -c -a 10.0.2.2 -p %d -C %d -S %d -V -v > /tmp/rping.out 2>&1; rc=$?\n"+
		"cut -c1-160 /tmp/rping.out | sed 's/^/rping -c: /'\n"+
		"echo \"CLIENT rc=$rc pings=$(grep -c '^ping data' /tmp/rping.out)\"\n", p, siwPings, size))
	guestLine(t, vm, "READY", 2*time.Minute)

	ctx := vmCtx(t, vm, 2*time.Minute)
	pcap, stop := siwCapture(t, p)
	require.NoError(t, vm.Signal("go"))
	req, err := ln.GetRequest(ctx)
	require.NoError(t, err, "siw's MPA Request")
	e, err := rping.NewEndpoint()
	require.NoError(t, err)
	t.Cleanup(func() { e.QP.Close() })
	require.NoError(t, req.Accept(ctx, e.QP, nil))
	st, err := e.QP.TCPInfo()
	require.NoError(t, err)
	require.False(t, st.Multipath, "siw speaks no MPTCP: the connection must have fallen back to TCP")
	require.IsType(t, &net.TCPAddr{}, e.QP.LocalAddr())
	n, srvErr := e.Server(ctx, 0, size)
	l := guestLine(t, vm, "CLIENT ", time.Minute)
	<-e.QP.Done()
	stop()
	require.NoError(t, srvErr)
	require.Equal(t, siwPings, n, "pings served")
	require.ErrorIs(t, e.QP.Err(), verbs.ErrDisconnected)
	require.Equal(t, fmt.Sprintf("CLIENT rc=0 pings=%d", siwPings), strings.TrimSpace(l), "siw's rping client")
	judgeSiw(t, pcap, false, 7*siwPings, 0)
}
