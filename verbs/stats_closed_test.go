package verbs

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// After Close, Stats' TCPErr says the connection has ended (ErrClosed),
// not the socket package's "use of closed network connection" from a
// getsockopt on the closed socket, as before.
func TestStatsTCPErrAfterClose(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	require.NoError(t, c.qp.Stats().TCPErr)
	require.NoError(t, c.qp.Close())
	st := c.qp.Stats()
	require.ErrorIs(t, st.TCPErr, ErrClosed)
	require.Equal(t, "verbs: closed: the QP's connection has ended, and its socket with it", st.TCPErr.Error())
	require.Zero(t, st.TCP)
	waitDone(t, s.qp, peerTimeout)
	require.ErrorIs(t, s.qp.Stats().TCPErr, ErrClosed, "the peer's, ended by our close")
}
