package verbs

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/stretchr/testify/require"
)

// A peer that accepts TCP and never sends an MPA Reply: Dial fails at
// ReplyTimeout and says so, a timeout as net.Error tells them, not a
// lost TCP connection. Before: "TCP connection lost: reading MPA Reply:
// … i/o timeout".
func TestDialSilentPeerIsReplyTimeout(t *testing.T) {
	checkRoutines(t)
	const limit = 300 * time.Millisecond
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c // reads nothing, answers nothing
		}
		close(accepted)
	}()
	s := newSide(t, pairOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
	defer cancel()
	start := time.Now()
	err = s.qp.Dial(ctx, "tcp", ln.Addr().String(), ConnConfig{ReplyTimeout: limit})
	elapsed := time.Since(start)
	if c, ok := <-accepted; ok {
		c.Close()
	}
	require.ErrorIs(t, err, ErrReplyTimeout)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.False(t, errors.Is(err, mpa.ErrStreamLost), "not a lost connection: %v", err)
	require.False(t, errors.Is(err, context.DeadlineExceeded), "not the ctx's deadline: %v", err)
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "a net.Error timeout: %v", err)
	require.NotContains(t, err.Error(), "lost")
	require.Contains(t, err.Error(), "no MPA Reply within ConnConfig.ReplyTimeout (300ms)")
	require.GreaterOrEqual(t, elapsed, limit)
	require.Equal(t, StateIdle, s.qp.State(), "a failed Dial leaves the QP IDLE")
	t.Logf("after %v: %v", elapsed, err)
}
