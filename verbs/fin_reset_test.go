//go:build linux

package verbs

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/goiwarp/iwarp/tcpx"
	"github.com/stretchr/testify/require"
)

// The peer closes (FIN) and then resets the connection while our receive
// loop is busy: the loop's read sees end of stream, the socket is in
// CLOSE, and the reset is still pending. Err says that, with the errno
// (Linux's EPIPE for a reset after the FIN). Before it said "connection
// reset or timed out (read: EOF)", which contradicts itself.
func TestFINThenResetSaysSo(t *testing.T) {
	checkRoutines(t)
	s := newSide(t, pairOpts{})
	rbuf := s.regMR(t, 64, LocalWrite)
	_, err := s.qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{rbuf.SGE(0, 64)}})
	require.NoError(t, err)
	rp := answerDial(t, s.qp, ConnConfig{}, mpa.Config{IRD: 4, ORD: 4})
	in, release := make(chan struct{}), make(chan struct{})
	first := true
	s.qp.SetRxHandler(func() {
		if first { // holds the receive loop once, off the socket
			first = false
			close(in)
			<-release
		}
	})
	rp.send(t, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, []byte("hold")))
	select {
	case <-in:
	case <-time.After(peerTimeout):
		t.Fatal("the handler did not run")
	}
	rp.closeWrite(t)
	require.NoError(t, rp.conn.SetLinger(0))
	rp.close()
	// The FIN, then the RST, reach our socket: TCP's state is CLOSE (a
	// pause did not ensure it where loopback's delivery was deferred).
	require.Eventually(t, func() bool { return tcpx.Reset(s.qp.sock) }, peerTimeout, time.Millisecond,
		"the reset reached the stack's socket")
	close(release)
	waitDone(t, s.qp, peerTimeout)
	qerr := s.qp.Err()
	require.ErrorIs(t, qerr, ErrConnLost)
	require.True(t, errors.Is(qerr, syscall.EPIPE) || errors.Is(qerr, syscall.ECONNRESET), "the errno: %v", qerr)
	require.Contains(t, qerr.Error(), "the peer closed its side (FIN), then the connection was reset by the peer")
	require.NotContains(t, qerr.Error(), "EOF")
	t.Logf("%v", qerr)
}
