package perf

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The TCP line after a test comes from the last look at the socket that
// had one; when the socket had closed by then, the line says which look
// its figures are from, so that a start-up's "sent 44" is not read as the
// test's.
func TestTCPStatsSaysWhichLook(t *testing.T) {
	p, _, err := Parse([]string{"write_bw", "-n", "5"})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, _ := endpointPair(ctx, t, p)
	early, late := cli.qpStats(), cli.qpStats()
	early[0].TCP.BytesSent = 44
	late[0].TCPErr = errors.New("closed")
	lines := strings.Join(cli.tcpStats(early, late), "\n")
	require.Contains(t, lines, "TCP qp 0 (as of look 1 of 2: the socket closed before the last)")
	require.Contains(t, lines, "sent 44 ")
	late[0].TCPErr = nil
	late[0].TCP.BytesSent = 4096
	lines = strings.Join(cli.tcpStats(early, late), "\n")
	require.NotContains(t, lines, "as of look")
	require.Contains(t, lines, "sent 4096 ")
}
