package main

import (
	"flag"

	"github.com/goiwarp/iwarp/tcpx"
)

// tcpFlags are the transport options both sides take: what a long path
// needs beyond the defaults (see docs/wan.md).
type tcpFlags struct {
	cc      string
	sockbuf byteSize
	mptcp   bool
}

func (f *tcpFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.cc, "cc", "", "TCP congestion control `algorithm`, as bbr or cubic (default: the system's)")
	fs.Var(&f.sockbuf, "sockbuf", "socket send and receive buffer `size` (default: kernel autotuning up to\n"+
		"net.ipv4.tcp_wmem/tcp_rmem); give at least bandwidth × RTT")
	fs.BoolVar(&f.mptcp, "mptcp", false, "use Multipath TCP over the paths the kernel's path manager knows\n"+
		"(a peer without MPTCP gets plain TCP)")
}

// config is the tcpx.Config of the flags. TCP_USER_TIMEOUT finds a dead
// peer while data is in flight; a multipath socket has none, and relies on
// keep-alive and its other paths instead.
func (f *tcpFlags) config() tcpx.Config {
	c := tcpx.Config{CongestionControl: f.cc, SendBuffer: int(f.sockbuf), RecvBuffer: int(f.sockbuf), MultipathTCP: f.mptcp}
	if !f.mptcp {
		c.UserTimeout = userTimeout
	}
	return c
}
