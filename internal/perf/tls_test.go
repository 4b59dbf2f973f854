package perf

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/internal/pki"
	"github.com/stretchr/testify/require"
)

// tlsFiles writes a CA and a certificate for both sides (CN perf) to a
// temporary directory and returns the mutual TLS flags.
func tlsFiles(t *testing.T) []string {
	ca, err := pki.NewCA("perf test CA")
	require.NoError(t, err)
	cert, err := ca.Issue(pki.Options{CommonName: "perf", Hosts: []string{"127.0.0.1", "localhost"}, Both: true})
	require.NoError(t, err)
	c, k, err := pki.PEM(cert)
	require.NoError(t, err)
	dir := t.TempDir()
	f := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o600))
		return p
	}
	return []string{"--tls-cert", f("perf.crt", c), "--tls-key", f("perf.key", k), "--tls-ca", f("ca.crt", ca.CAPEM())}
}

func runPerf(t *testing.T, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = MainContext(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

// The bandwidth tests inside TLS: the banner says what was negotiated and
// whom the peer proved to be, the QP lines say the stream is inside TLS,
// and the table is the usual one.
func TestTLSRuns(t *testing.T) {
	files := tlsFiles(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"write_bw", "--tls"}, "TLS 1.3, TLS_AES_128_GCM_SHA256, peer not verified"},
		{append([]string{"read_bw"}, files...), `TLS 1.3, TLS_AES_128_GCM_SHA256, peer "perf" verified`},
		{append([]string{"send_bw", "-q", "2"}, files...), `TLS 1.3, TLS_AES_128_GCM_SHA256, peer "perf" verified`},
		{[]string{"write_lat", "--tls"}, "TLS 1.3, TLS_AES_128_GCM_SHA256, peer not verified"},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			args := append(append([]string{}, tc.args...), "--loopback", "-n", "200", "-s", "65536")
			code, out, errs := runPerf(t, args...)
			require.Equal(t, 0, code, "stderr: %s", errs)
			require.Contains(t, out, " MPA             : rev 2, CRC OFF,", "no MPA CRC inside TLS by default")
			require.Contains(t, out, " TLS             : "+tc.want)
			require.Contains(t, out, "inside TLS")
			require.Contains(t, out, " 65536 ")
		})
	}
	// CRC kept on request, and cleartext runs say nothing of TLS.
	code, out, errs := runPerf(t, "write_bw", "--tls", "--crc", "required", "--loopback", "-n", "100")
	require.Equal(t, 0, code, "stderr: %s", errs)
	require.Contains(t, out, " MPA             : rev 2, CRC ON,")
	code, out, errs = runPerf(t, "write_bw", "--loopback", "-n", "100")
	require.Equal(t, 0, code, "stderr: %s", errs)
	require.NotContains(t, out, "TLS")
}

func TestTLSBadFlags(t *testing.T) {
	files := tlsFiles(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append([]string{"write_bw", "--tls"}, files...), "--tls makes its own certificate"},
		{[]string{"write_bw", "--tls-cert", files[1], "localhost"}, "--tls-cert and --tls-key go together"},
		{[]string{"write_bw", "--tls-cert", files[1], "--tls-key", files[3], "localhost"}, "a TLS client needs --tls-ca"},
		{[]string{"write_bw", "--tls-ca", files[5]}, "a TLS server needs --tls-cert and --tls-key"},
		{[]string{"tcp_bw", "--tls"}, "TLS is for the RDMA tests"},
		{[]string{"write_bw", "-R", "--tls", "localhost"}, "perftest speaks no TLS"},
		{[]string{"write_bw", "--tls-ca", "/nonexistent/ca.crt", "localhost"}, "--tls-ca"},
	} {
		t.Run(strings.Join(tc.args[:2], " "), func(t *testing.T) {
			_, _, err := Parse(tc.args)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// A cleartext client of a TLS server is refused with the reason, and the
// server goes on to serve a TLS client.
func TestTLSServerRefusesCleartext(t *testing.T) {
	port := freeTCPPort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srvDone := make(chan int, 1)
	var srvOut, srvErr lockedBuffer
	go func() {
		srvDone <- MainContext(ctx, []string{"write_bw", "--tls", "-p", port, "-n", "100"}, &srvOut, &srvErr)
	}()
	require.Eventually(t, func() bool { return strings.Contains(srvOut.String(), "Waiting for client") },
		10*time.Second, 10*time.Millisecond, "server: %s", &srvErr)
	code, _, errs := runPerf(t, "write_bw", "-p", port, "-n", "100", "127.0.0.1")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "iwarp: TLS required")
	code, out, errs := runPerf(t, "write_bw", "--tls", "-p", port, "-n", "100", "127.0.0.1")
	require.Equal(t, 0, code, "stderr: %s", errs)
	require.Contains(t, out, " TLS             : TLS 1.3")
	cancel()
	<-srvDone
}

func freeTCPPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// lockedBuffer is a bytes.Buffer a goroutine writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
