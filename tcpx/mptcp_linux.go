//go:build linux

package tcpx

import (
	"encoding/binary"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mptcpInfo is the kernel's struct mptcp_info (include/uapi/linux/mptcp.h),
// as a view over the octets getsockopt(SOL_MPTCP, MPTCP_INFO) returns.
// Offsets of the fields read here; older kernels return a shorter struct.
type mptcpInfo []byte

const (
	mptcpInfoOpt = 1 // MPTCP_INFO

	miSubflows      = 0  // u8: subflows beyond the first
	miBytesRetrans  = 48 // u64, from Linux 6.5 on, as the three below
	miBytesSent     = 56
	miBytesReceived = 64
	miBytesAcked    = 72
	miSubflowsTotal = 80 // u8: all subflows, from Linux 6.7 on
	miLen           = 96
)

// readMPTCPInfo returns the MPTCP_INFO of fd; ok is false on a plain TCP
// socket and on an MPTCP socket that fell back to TCP (EOPNOTSUPP).
func readMPTCPInfo(fd int) (mi mptcpInfo, ok bool) {
	buf := make([]byte, miLen)
	n := uint32(len(buf))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_MPTCP, mptcpInfoOpt,
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
	if errno != 0 || n == 0 {
		return nil, false
	}
	return mptcpInfo(buf[:n]), true
}

func (mi mptcpInfo) u64(off int) (uint64, bool) {
	if len(mi) < off+8 {
		return 0, false
	}
	return binary.NativeEndian.Uint64(mi[off:]), true
}

// fill puts the connection-level figures of mi into s.
func (mi mptcpInfo) fill(s *Stats) {
	s.Multipath = true
	s.Subflows = int(mi[miSubflows]) + 1
	if len(mi) > miSubflowsTotal && mi[miSubflowsTotal] != 0 {
		s.Subflows = int(mi[miSubflowsTotal])
	}
	if v, ok := mi.u64(miBytesSent); ok {
		s.BytesSent = v
	}
	if v, ok := mi.u64(miBytesRetrans); ok {
		s.BytesRetrans = v
	}
	if v, ok := mi.u64(miBytesReceived); ok {
		s.BytesReceived = v
	}
	if v, ok := mi.u64(miBytesAcked); ok {
		s.BytesAcked = v
	}
}
