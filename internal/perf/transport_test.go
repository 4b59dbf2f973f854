package perf

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// --cc, --mptcp and --sockbuf reach every connection's tcpx.Config: the
// QPs' (connConfig) and tcp_*'s (tcpConfig), the client's from its source
// address.
func TestTransportFlags(t *testing.T) {
	p, _, err := Parse([]string{"write_bw", "--cc", "reno", "--mptcp", "--sockbuf", "4M", "--bind_source_ip", "127.0.0.2", "peer"})
	require.NoError(t, err)
	require.Equal(t, TransportParams{CC: "reno", MPTCP: true, SockBuf: 4 << 20}, p.Transport)
	for _, client := range []bool{true, false} {
		for _, c := range []struct {
			CC             string
			MPTCP          bool
			Snd, Rcv       int
			Local          string
			UserTimeoutSet bool
		}{
			{p.tcpConfig(client).CongestionControl, p.tcpConfig(client).MultipathTCP, p.tcpConfig(client).SendBuffer,
				p.tcpConfig(client).RecvBuffer, p.tcpConfig(client).LocalAddr, p.tcpConfig(client).UserTimeout != 0},
			{connConfig(p, client).TCP.CongestionControl, connConfig(p, client).TCP.MultipathTCP, connConfig(p, client).TCP.SendBuffer,
				connConfig(p, client).TCP.RecvBuffer, connConfig(p, client).TCP.LocalAddr, connConfig(p, client).TCP.UserTimeout != 0},
		} {
			require.Equal(t, "reno", c.CC)
			require.True(t, c.MPTCP)
			require.Equal(t, 4<<20, c.Snd)
			require.Equal(t, 4<<20, c.Rcv)
			require.False(t, c.UserTimeoutSet, "a multipath socket refuses TCP_USER_TIMEOUT")
			if client {
				require.Equal(t, "127.0.0.2", c.Local)
			} else {
				require.Empty(t, c.Local)
			}
		}
	}

	p, _, err = Parse([]string{"tcp_bw", "peer"})
	require.NoError(t, err)
	require.Equal(t, TransportParams{}, p.Transport, "the system's TCP unless asked")

	for _, bad := range [][]string{
		{"write_bw", "--cc", "no-such-cc", "peer"},
		{"tcp_bw", "--sockbuf", "2G", "peer"},
		{"tcp_bw", "--sockbuf", "-1", "peer"},
	} {
		_, _, err := Parse(bad)
		var ue *UsageError
		require.ErrorAs(t, err, &ue, "%v", bad)
	}
	_, _, err = Parse([]string{"write_bw", "--cc", "no-such-cc", "peer"})
	require.ErrorContains(t, err, "modprobe tcp_no-such-cc")
}
