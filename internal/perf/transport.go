package perf

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/goiwarp/iwarp/tcpx"
)

// TransportParams choose the TCP under every connection of a side (--cc,
// --mptcp, --sockbuf): the RDMA tests' QPs, tcp_bw's and tcp_lat's own
// sockets and the listeners, so that tcp_bw stays the baseline on the same
// path. Each side uses its own: give them to both.
type TransportParams struct {
	// CC is the TCP congestion control (tcpx.Config.CongestionControl);
	// "" keeps the system's default.
	CC string
	// MPTCP asks for Multipath TCP (tcpx.Config.MultipathTCP); a peer
	// without it falls back to TCP.
	MPTCP bool
	// SockBuf sets SO_SNDBUF and SO_RCVBUF (tcpx.Config.SendBuffer and
	// RecvBuffer); 0 leaves the kernel's autotuning on.
	SockBuf int
}

// tcpConfig is the socket configuration of a side's connections; the
// client's leave from SourceIP.
func (p *Params) tcpConfig(client bool) tcpx.Config {
	c := tcpx.Config{
		CongestionControl: p.Transport.CC,
		MultipathTCP:      p.Transport.MPTCP,
		SendBuffer:        p.Transport.SockBuf,
		RecvBuffer:        p.Transport.SockBuf,
	}
	if client {
		c.LocalAddr = p.SourceIP
	}
	return c
}

// listenTCP is the tcp_* server's listener.
func listenTCP(ctx context.Context, p *Params, addr string) (*tcpx.Listener, error) {
	return tcpx.Listen(ctx, "tcp", addr, p.tcpConfig(false))
}

// checkCC refuses at parse time an algorithm the kernel has not loaded,
// where it can tell; one it has but does not allow this process fails at
// connect with tcpx's *CongestionControlError.
func checkCC(name string) error {
	if name == "" {
		return nil
	}
	avail, err := tcpx.AvailableCongestionControl()
	if err != nil || slices.Contains(avail, name) {
		return nil
	}
	return usagef("--cc %s: the kernel has no such TCP congestion control (it has %s; load its module, e.g. modprobe tcp_%s)",
		name, strings.Join(avail, " "), name)
}

// maxSockBuf is what SO_SNDBUF and SO_RCVBUF take (an int32, before Linux
// doubles it).
const maxSockBuf = 1 << 30

func checkSockBuf(n int) error {
	if n < 0 || n > maxSockBuf {
		return usagef("--sockbuf %d: 0 (autotuning) up to 1G", n)
	}
	return nil
}

// String says what the flags asked of TCP, for the report.
func (t TransportParams) String() string {
	var s []string
	if t.CC != "" {
		s = append(s, "cc "+t.CC)
	}
	if t.MPTCP {
		s = append(s, "mptcp")
	}
	if t.SockBuf > 0 {
		s = append(s, fmt.Sprintf("sockbuf %d", t.SockBuf))
	}
	return strings.Join(s, ", ")
}
