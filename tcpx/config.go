package tcpx

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Config holds the TCP options of an iWARP connection. The zero value is
// sensible: TCP_NODELAY on, keep-alive on with the net package's defaults, and
// everything else left to the kernel.
type Config struct {
	// Nagle turns Nagle's algorithm on (TCP_NODELAY off). Leave it false:
	// iWARP sends every FPDU as soon as it is framed, and a small FPDU held
	// back waiting for an ACK stalls a Read Response or a Send for up to a
	// delayed-ACK timeout. Linux siw sets TCP_NODELAY for the same reason.
	Nagle bool

	// SendBuffer and RecvBuffer set SO_SNDBUF and SO_RCVBUF in bytes. Zero
	// leaves the kernel's autotuning on, which grows the buffers up to the
	// maxima of net.ipv4.tcp_wmem and net.ipv4.tcp_rmem; that is the right
	// choice unless those maxima are too small for the path.
	//
	// On a long fat pipe the buffers must hold a bandwidth-delay product,
	// for example 10 Gbit/s × 40 ms = 50 MB, or the window, not the link,
	// limits throughput (Stats.RwndLimited and Stats.SndbufLimited show
	// this). Setting a size turns Linux autotuning off for that buffer for
	// good. Linux doubles the value to leave room for its bookkeeping
	// (getsockopt returns the doubled figure) and silently caps the request
	// at net.core.wmem_max or net.core.rmem_max, so raise those first.
	//
	// The receive buffer is set before the handshake because the window
	// scale factor is fixed in the SYN: Dial sets both on the socket before
	// connecting, and Listen sets them on the listening socket, from which
	// accepted sockets inherit them. Apply on an established connection
	// cannot change the window scale.
	//
	// A receive buffer of a few segments can stall a stream: Linux offers a
	// window rounded down to whole segments of the size it has received,
	// and a sender whose next segment is larger then sends one window-sized
	// probe per retransmission timeout (200 ms or more). On loopback, where
	// segments reach 64 KiB, 8 KiB receive buffers did this; 64 KiB did not.
	SendBuffer int
	RecvBuffer int

	// KeepAlive tunes TCP keep-alive probes, which find a dead peer on an
	// idle connection. Zero fields take the net package's defaults (15 s
	// idle, 15 s between probes, 9 probes) and negative fields leave the
	// system's value. KeepAlive.Enable is ignored: probes are on unless
	// NoKeepAlive is set.
	KeepAlive   net.KeepAliveConfig
	NoKeepAlive bool

	// UserTimeout sets TCP_USER_TIMEOUT: how long transmitted data may stay
	// unacknowledged before the kernel drops the connection with ETIMEDOUT.
	// It is the way to find a dead peer on a WAN while data is in flight,
	// when keep-alive probes are not sent; it also bounds keep-alive
	// probing. Zero leaves the kernel default, which is retransmission with
	// backoff for about 15 minutes (net.ipv4.tcp_retries2). It has
	// millisecond resolution; a value below a millisecond is rounded up.
	// Linux has no user timeout for a multipath socket, so a Config with
	// MultipathTCP set refuses it.
	UserTimeout time.Duration

	// MultipathTCP asks for Multipath TCP (RFC 8684) on Dial and Listen:
	// the socket is opened with IPPROTO_MPTCP, and one connection can then
	// run over several paths (subflows) and survive the loss of one. The
	// paths come from the kernel's path manager (ip mptcp endpoint, ip
	// mptcp limits), not from this package. A peer without MPTCP, such as
	// Linux siw or an iWARP NIC, gets plain TCP: the kernel falls back
	// during the handshake, and (*net.TCPConn).MultipathTCP reports false.
	// Where the kernel has no MPTCP (net.mptcp.enabled = 0) Go opens a
	// plain TCP socket instead.
	//
	// It is off by default, whatever Go's own default for listeners (on
	// since Go 1.24): a connection's shape is then this field's choice.
	// On a multipath connection the socket is the MPTCP meta socket:
	// TCP_USER_TIMEOUT does not exist there (so UserTimeout must be zero);
	// TCP_NODELAY, keep-alive, buffer sizes, SO_LINGER and
	// CongestionControl are taken by the meta socket and passed on to the
	// subflows; TCP_MAXSEG and TCP_INFO describe the first subflow only; SIOCINQ, SIOCOUTQ and SIOCOUTQNSD count the
	// connection's data, whichever subflow carries it. Stats says which
	// figures are the connection's.
	MultipathTCP bool

	// CongestionControl names the TCP congestion control algorithm of the
	// connection (TCP_CONGESTION), for example "cubic" or "bbr". Empty
	// leaves the system's default (net.ipv4.tcp_congestion_control). It is
	// set before the handshake, on the listening socket for Listen and on
	// each accepted one. A name the kernel does not have, or that an
	// unprivileged process may not pick (net.ipv4.tcp_allowed_congestion_control),
	// fails Dial and Listen with a *CongestionControlError.
	CongestionControl string

	// AbortOnClose sets SO_LINGER to zero, so that Close discards unsent
	// data and sends an RST, as Abort does, instead of a FIN.
	AbortOnClose bool

	// LocalAddr is the source address Dial binds its socket to before
	// connecting, as rdma_resolve_addr's src_addr: an IP address ("10.0.0.2",
	// "fe80::1%eth0"), the port then chosen by the kernel, or "IP:port".
	// Empty: the kernel picks the address by its routes. On a host with
	// several interfaces it picks the path (and so the source a peer's
	// access list sees). With a port, only one connection at a time can
	// use it (EADDRINUSE): give the IP alone to a Config that dials several
	// (an NVMe host's queues). Listen ignores it.
	LocalAddr string
}

var errConfig = errors.New("tcpx: invalid Config")

func (cfg *Config) validate() error {
	switch {
	case cfg.SendBuffer < 0 || cfg.SendBuffer > math.MaxInt32:
		return fmt.Errorf("%w: SendBuffer %d out of range", errConfig, cfg.SendBuffer)
	case cfg.RecvBuffer < 0 || cfg.RecvBuffer > math.MaxInt32:
		return fmt.Errorf("%w: RecvBuffer %d out of range", errConfig, cfg.RecvBuffer)
	case cfg.UserTimeout < 0 || cfg.UserTimeout > math.MaxInt32*time.Millisecond:
		return fmt.Errorf("%w: UserTimeout %v out of range", errConfig, cfg.UserTimeout)
	case cfg.UserTimeout > 0 && cfg.MultipathTCP:
		return fmt.Errorf("%w: UserTimeout with MultipathTCP: Linux has no TCP_USER_TIMEOUT on a multipath socket", errConfig)
	case len(cfg.CongestionControl) >= tcpCANameMax || strings.ContainsRune(cfg.CongestionControl, 0):
		return fmt.Errorf("%w: CongestionControl %q is not an algorithm name", errConfig, cfg.CongestionControl)
	}
	if _, err := cfg.localAddr(); err != nil {
		return err
	}
	return nil
}

// localAddr parses LocalAddr (nil when empty). Only literals: a source
// address names an interface of this host, which no resolver should pick.
func (cfg *Config) localAddr() (*net.TCPAddr, error) {
	if cfg.LocalAddr == "" {
		return nil, nil
	}
	host, port := cfg.LocalAddr, uint16(0)
	if h, p, err := net.SplitHostPort(cfg.LocalAddr); err == nil {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("%w: LocalAddr %q: port %q", errConfig, cfg.LocalAddr, p)
		}
		host, port = h, uint16(n)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return nil, fmt.Errorf("%w: LocalAddr %q: not an IP address or IP:port", errConfig, cfg.LocalAddr)
	}
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(ip, port)), nil
}

// userTimeoutMillis is the TCP_USER_TIMEOUT value for d, rounded up.
func userTimeoutMillis(d time.Duration) int {
	return int((d + time.Millisecond - 1) / time.Millisecond)
}
