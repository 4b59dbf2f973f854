//go:build linux

package tcpx

import (
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// setSockopts sets TCP_USER_TIMEOUT and, if buffers is true,
// SO_SNDBUF and SO_RCVBUF. It works on a socket before connect or listen as
// well as on an established one.
func setSockopts(rc syscall.RawConn, cfg *Config, buffers bool) error {
	var err error
	set := func(fd int, level, opt int, name string, v int) {
		if err != nil {
			return
		}
		if e := unix.SetsockoptInt(fd, level, opt, v); e != nil {
			err = fmt.Errorf("tcpx: setsockopt %s %d: %w", name, v, e)
		}
	}
	cerr := rc.Control(func(fd uintptr) {
		s := int(fd)
		if cfg.UserTimeout > 0 {
			set(s, unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, "TCP_USER_TIMEOUT", userTimeoutMillis(cfg.UserTimeout))
		}
		if buffers && cfg.SendBuffer > 0 {
			set(s, unix.SOL_SOCKET, unix.SO_SNDBUF, "SO_SNDBUF", cfg.SendBuffer)
		}
		if buffers && cfg.RecvBuffer > 0 {
			set(s, unix.SOL_SOCKET, unix.SO_RCVBUF, "SO_RCVBUF", cfg.RecvBuffer)
		}
	})
	if cerr != nil {
		return fmt.Errorf("tcpx: %w", cerr)
	}
	return err
}

// readable peeks one octet: false while the socket would block.
func readable(fd uintptr) (bool, error) {
	var b [1]byte
	_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	return err != unix.EAGAIN && err != unix.EINTR, nil
}

func buffered(rc syscall.RawConn) (int, error) { return ioctlInt(rc, unix.SIOCINQ, "SIOCINQ") }

func unsent(rc syscall.RawConn) (int, error) { return ioctlInt(rc, unix.SIOCOUTQNSD, "SIOCOUTQNSD") }

func ioctlInt(rc syscall.RawConn, req uint, name string) (int, error) {
	var (
		n   int
		err error
	)
	cerr := rc.Control(func(fd uintptr) {
		n, err = unix.IoctlGetInt(int(fd), req)
	})
	if cerr != nil {
		return 0, fmt.Errorf("tcpx: %w", cerr)
	}
	if err != nil {
		return 0, fmt.Errorf("tcpx: ioctl %s: %w", name, err)
	}
	return n, nil
}

func emss(rc syscall.RawConn) (int, error) {
	var (
		mss int
		err error
	)
	cerr := rc.Control(func(fd uintptr) {
		mss, err = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG)
	})
	if cerr != nil {
		return 0, fmt.Errorf("tcpx: %w", cerr)
	}
	if err != nil {
		return 0, fmt.Errorf("tcpx: getsockopt TCP_MAXSEG: %w", err)
	}
	return mss, nil
}

func info(rc syscall.RawConn) (Stats, error) {
	var (
		ti  *unix.TCPInfo
		err error
	)
	cerr := rc.Control(func(fd uintptr) {
		ti, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	})
	if cerr != nil {
		return Stats{}, fmt.Errorf("tcpx: %w", cerr)
	}
	if err != nil {
		return Stats{}, fmt.Errorf("tcpx: getsockopt TCP_INFO: %w", err)
	}
	return statsFromInfo(ti), nil
}

// tcpClose is TCP_CLOSE of the kernel's TCP states (include/net/tcp_states.h).
const tcpClose = 7

func stateClosed(rc syscall.RawConn) bool {
	closed := false
	rc.Control(func(fd uintptr) {
		ti, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		closed = err == nil && ti.State == tcpClose
	})
	return closed
}

func pendingError(rc syscall.RawConn) error {
	var e error
	rc.Control(func(fd uintptr) {
		if v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR); err == nil && v != 0 {
			e = syscall.Errno(v)
		}
	})
	return e
}

func usec[T uint32 | uint64](v T) time.Duration { return time.Duration(v) * time.Microsecond }

func statsFromInfo(ti *unix.TCPInfo) Stats {
	return Stats{
		RTT:    usec(ti.Rtt),
		RTTVar: usec(ti.Rttvar),
		MinRTT: usec(ti.Min_rtt),
		RTO:    usec(ti.Rto),

		SndCwnd:     ti.Snd_cwnd,
		SndSsthresh: ti.Snd_ssthresh,
		SndMSS:      ti.Snd_mss,
		RcvMSS:      ti.Rcv_mss,
		PMTU:        ti.Pmtu,
		SndWnd:      ti.Snd_wnd,
		RcvWnd:      ti.Rcv_wnd,

		Unacked:     ti.Unacked,
		Lost:        ti.Lost,
		Retransmits: ti.Total_retrans,
		DataSegsOut: ti.Data_segs_out,
		DataSegsIn:  ti.Data_segs_in,

		BytesSent:     ti.Bytes_sent,
		BytesRetrans:  ti.Bytes_retrans,
		BytesAcked:    ti.Bytes_acked,
		BytesReceived: ti.Bytes_received,

		DeliveryRate:  ti.Delivery_rate,
		RwndLimited:   usec(ti.Rwnd_limited),
		SndbufLimited: usec(ti.Sndbuf_limited),
	}
}

func (q *SendQueue) probe(fd uintptr) {
	q.n, q.err = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
	if q.err != nil {
		q.err = fmt.Errorf("tcpx: ioctl SIOCOUTQ: %w", q.err)
	}
}
