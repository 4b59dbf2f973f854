package tcpx

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestStatsString(t *testing.T) {
	s := Stats{
		RTT:           42 * time.Microsecond,
		RTTVar:        11 * time.Microsecond,
		MinRTT:        9 * time.Microsecond,
		RTO:           201 * time.Millisecond,
		SndCwnd:       10,
		SndMSS:        65483,
		RcvMSS:        536,
		PMTU:          65535,
		Unacked:       3,
		Lost:          2,
		Retransmits:   1,
		BytesSent:     1<<24 + 2<<16 + 3<<8 + 4,
		BytesAcked:    1<<20 + 7,
		BytesReceived: 5,
		BytesRetrans:  1448,
		DeliveryRate:  125000000,
		RwndLimited:   1500 * time.Microsecond,
		SndbufLimited: 0,
	}
	require.Equal(t, "rtt 42µs rttvar 11µs minrtt 9µs rto 201ms cwnd 10 mss 65483/536 pmtu 65535 unacked 3 lost 2 retrans 1 sent 16909060 retrans-bytes 1448 acked 1048583 received 5 delivery-rate 125000000 rwnd-limited 1.5ms sndbuf-limited 0s", s.String())
}
