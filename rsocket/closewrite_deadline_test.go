package rsocket

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// CloseWrite is a shutdown, not a Write: a write deadline that has passed
// (after a Write timed out, or set to the past to stop Writes, as with a
// *net.TCPConn) does not keep it from shutting the side down when no Write
// is in progress; the peer reads what was written, then io.EOF.
func TestCloseWriteAfterWriteDeadline(t *testing.T) {
	leakCheck(t)
	c1, c2 := pair(t, Options{})
	_, err := c1.Write([]byte("last words"))
	require.NoError(t, err)
	require.NoError(t, c1.SetWriteDeadline(time.Now().Add(-time.Second)))
	require.NoError(t, c1.CloseWrite())
	require.NoError(t, c2.SetReadDeadline(time.Now().Add(5*time.Second)))
	got, err := io.ReadAll(c2)
	require.NoError(t, err)
	require.Equal(t, "last words", string(got))
}
