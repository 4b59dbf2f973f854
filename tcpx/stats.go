package tcpx

import (
	"fmt"
	"time"
)

// Stats is a summary of the kernel's TCP_INFO for one connection. Counters
// are since the connection was established. A field the running kernel does
// not report is zero.
//
// On a Multipath TCP connection (Multipath true) TCP_INFO describes only the
// first subflow: the RTTs, windows, MSS, segment counters and rate fields are
// that path's. Subflows and the four Bytes counters are then the
// connection's, from MPTCP_INFO (Linux 6.5 on), whichever path carried the
// data; BytesRetrans counts data sent again on another subflow too.
type Stats struct {
	Multipath bool // the connection runs Multipath TCP (not fallen back to TCP)
	Subflows  int  // open MPTCP subflows (paths) of the connection; 0 on plain TCP

	RTT    time.Duration // smoothed round-trip time
	RTTVar time.Duration // round-trip time variation
	MinRTT time.Duration // lowest round-trip time seen
	RTO    time.Duration // current retransmission timeout

	SndCwnd     uint32 // congestion window, in segments
	SndSsthresh uint32 // slow-start threshold, in segments
	SndMSS      uint32 // send MSS, octets
	RcvMSS      uint32 // estimated MSS the peer sends, octets
	PMTU        uint32 // path MTU, octets
	SndWnd      uint32 // peer's advertised receive window, octets
	RcvWnd      uint32 // our advertised receive window, octets

	Unacked     uint32 // segments in flight
	Lost        uint32 // segments currently presumed lost
	Retransmits uint32 // segments retransmitted in total (tcpi_total_retrans)
	DataSegsOut uint32 // segments sent with data, retransmissions included (tcpi_data_segs_out): about one per write with TCP_NODELAY
	DataSegsIn  uint32 // segments received with data (tcpi_data_segs_in)

	BytesSent     uint64 // payload octets sent, retransmissions included
	BytesRetrans  uint64 // payload octets retransmitted
	BytesAcked    uint64 // octets the peer acknowledged; on the dialing side Linux counts the SYN too (+1)
	BytesReceived uint64 // payload octets received in order

	DeliveryRate  uint64        // recent delivery rate, octets per second
	RwndLimited   time.Duration // time sending was limited by the peer's receive window
	SndbufLimited time.Duration // time sending was limited by our send buffer
}

// String formats s on one line for humans, for example
//
//	rtt 42µs rttvar 10µs minrtt 30µs rto 201ms cwnd 10 mss 65483/65483 pmtu 65535 unacked 0 lost 0 retrans 0 sent 1048576 acked 1048576 received 0 rwnd-limited 0s sndbuf-limited 0s
func (s Stats) String() string {
	mp := ""
	if s.Multipath {
		mp = fmt.Sprintf("mptcp subflows %d ", s.Subflows)
	}
	return mp + fmt.Sprintf("rtt %v rttvar %v minrtt %v rto %v cwnd %d mss %d/%d pmtu %d unacked %d lost %d retrans %d sent %d retrans-bytes %d acked %d received %d delivery-rate %d rwnd-limited %v sndbuf-limited %v",
		s.RTT, s.RTTVar, s.MinRTT, s.RTO, s.SndCwnd, s.SndMSS, s.RcvMSS, s.PMTU,
		s.Unacked, s.Lost, s.Retransmits, s.BytesSent, s.BytesRetrans, s.BytesAcked, s.BytesReceived,
		s.DeliveryRate, s.RwndLimited, s.SndbufLimited)
}
