//go:build linux

package tcpx

import (
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// After the peer's FIN and then its reset, a read sees end of stream and
// Reset reports the socket closed; PendingError has the errno the read
// did not take (Linux: EPIPE for a reset in CLOSE-WAIT), once.
func TestPendingErrorAfterFINThenReset(t *testing.T) {
	d, a := pair(t, "tcp4", "127.0.0.1:0", Config{}, Config{})
	require.Nil(t, PendingError(d), "a healthy connection")
	require.NoError(t, a.CloseWrite())
	require.NoError(t, a.SetLinger(0))
	require.NoError(t, a.Close())
	// The FIN, then the RST, reach d: TCP's state is CLOSE (a pause did
	// not ensure it where loopback's delivery was deferred).
	require.Eventually(t, func() bool { return Reset(d) }, 5*time.Second, time.Millisecond, "the reset reached d")
	d.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := d.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
	require.True(t, Reset(d))
	require.ErrorIs(t, PendingError(d), syscall.EPIPE)
	require.Nil(t, PendingError(d), "taken")
}
