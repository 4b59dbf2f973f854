//go:build interop

package interop

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/internal/pki"
	"github.com/goiwarp/iwarp/interop/rping"
	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

// Linux siw, which speaks no TLS, dials a TLS listener with its rping
// client: our listener answers its MPA Request with an MPA Reject whose
// private data gives the reason, siw's rdma_cm reports the connection
// rejected, and Wireshark reads the Reject on the wire as RFC 5044 has it.
func TestSiwClientToTLSListener(t *testing.T) {
	ca, err := pki.NewCA("interop CA")
	require.NoError(t, err)
	cert, err := ca.Issue(pki.Options{CommonName: "server", Hosts: []string{"127.0.0.1", "10.0.2.2"}})
	require.NoError(t, err)
	d, err := verbs.Open(verbs.DeviceAttr{})
	require.NoError(t, err)
	defer d.Close()
	cfg := rping.ConnConfig(verbs.ConnConfig{TLS: &tls.Config{Certificates: []tls.Certificate{cert}}})
	ln, err := d.Listen(context.Background(), "tcp", "127.0.0.1:0", cfg)
	require.NoError(t, err)
	defer ln.Close()

	script := fmt.Sprintf("echo READY\nwaitfile go 300 || exit 1\n"+
		"timeout 60 rping -c -a 10.0.2.2 -p %d -C 1 -S 64 -v > /tmp/rping 2>&1; rc=$?\n"+
		"sed 's/^/rping -c: /' /tmp/rping\n"+
		"echo \"CLIENT rc=$rc rejected=$(grep -c RDMA_CM_EVENT_REJECTED /tmp/rping)\"\n", port(ln))
	vm := siwVM(t, script)
	guestLine(t, vm, "READY", 2*time.Minute)
	pcap, stop := siwCapture(t, port(ln))
	start := time.Now()
	require.NoError(t, vm.Signal("go"))
	l := guestLine(t, vm, "CLIENT ", time.Minute)
	took := time.Since(start)
	stop()
	t.Logf("siw's rping: %s, after %v", l, took.Round(time.Millisecond))
	require.Regexp(t, `^CLIENT rc=[1-9][0-9]* rejected=1$`, l, "rping sees a rejection, not a timeout")
	require.Less(t, took, 30*time.Second, "no timeout on the way (siw's MPA timeout is 10 s)")

	v := judge(t, pcap)
	require.Equal(t, 2, v.Startups, "siw's MPA Request and our Reject")
	require.Zero(t, v.FPDUs)
	require.Zero(t, v.Malformed)
	rep := strings.TrimSpace(tshark(t, pcap, "-Y", "iwarp_mpa.rep", "-T", "fields",
		"-e", "iwarp_mpa.rej_flag", "-e", "iwarp_mpa.rev", "-e", "iwarp_mpa.privatedata"))
	t.Logf("our Reply, as Wireshark reads it: %s", rep)
	f := strings.Split(rep, "\t")
	require.Len(t, f, 3, "one Reply: %q", rep)
	require.Contains(t, []string{"1", "True"}, f[0], "R set")
	require.Equal(t, "2", f[1])
	// Rev 2, enhanced: the IRD/ORD word, then the reason.
	require.True(t, strings.HasSuffix(strings.ReplaceAll(f[2], ":", ""), fmt.Sprintf("%x", "iwarp: TLS required")), "private data %s", f[2])
}
