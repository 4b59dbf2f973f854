//go:build linux

package verbs

import (
	"context"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/tcpx"
	"github.com/stretchr/testify/require"
)

// The peer closes (FIN) as the application disconnects: the receive loop
// sees end of stream in RTS, and before it asks the socket's state,
// Disconnect sends our FIN and the peer's kernel ACKs it. The socket is
// then in CLOSE with no reset anywhere: both sides closed in an orderly
// way, so Disconnect succeeds. It used to fail with ErrConnLost ("reset or
// timed out"), as against Linux's rdma_server in the siw VM on a loaded
// machine.
func TestFINWhileDisconnecting(t *testing.T) {
	checkRoutines(t)
	var target *QP
	at, release := make(chan struct{}), make(chan struct{})
	// Set before the QP's loops start, which read it.
	old := rxEOFHook
	rxEOFHook = func(qp *QP) {
		if qp == target {
			close(at)
			<-release
		}
	}
	t.Cleanup(func() { rxEOFHook = old })
	s := newSide(t, pairOpts{})
	target = s.qp
	rp := answerDial(t, s.qp, ConnConfig{}, mpa.Config{IRD: 4, ORD: 4})
	defer rp.close()

	rp.closeWrite(t)
	select {
	case <-at:
	case <-time.After(peerTimeout):
		t.Fatal("the receive loop never saw the peer's FIN")
	}
	done := make(chan error, 1)
	go func() { done <- s.qp.Disconnect(context.Background()) }()
	for end := time.Now().Add(peerTimeout); !tcpx.Reset(s.qp.sock); {
		require.True(t, time.Now().Before(end), "our FIN was never ACKed (the socket never reached CLOSE)")
		time.Sleep(time.Millisecond)
	}
	close(release)
	select {
	case err := <-done:
		require.NoError(t, err, "Disconnect")
	case <-time.After(peerTimeout):
		t.Fatal("Disconnect did not return")
	}
	require.ErrorIs(t, s.qp.Err(), ErrDisconnected)
	require.NotErrorIs(t, s.qp.Err(), ErrConnLost)
}
