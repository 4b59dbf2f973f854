package verbs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/stretchr/testify/require"
)

// Disconnect on a QP that has failed returns why: nil would tell the
// caller the orderly close happened. Before, it returned nil.
func TestDisconnectFailedQPReturnsErr(t *testing.T) {
	checkRoutines(t)
	s := newSide(t, pairOpts{})
	rp := answerDial(t, s.qp, ConnConfig{}, mpa.Config{IRD: 4, ORD: 4})
	require.NoError(t, rp.conn.SetLinger(0))
	rp.close() // a reset
	waitDone(t, s.qp, peerTimeout)
	require.ErrorIs(t, s.qp.Err(), ErrConnLost)
	ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
	defer cancel()
	err := s.qp.Disconnect(ctx)
	require.ErrorIs(t, err, ErrConnLost)
	require.Equal(t, s.qp.Err(), err)
}

// A Disconnect whose ctx ends resets the connection; Err then says so
// (ErrAborted, which Is ErrDisconnected too), naming what Disconnect waited
// for, without wrapping the ctx's error for other goroutines to take as
// theirs. Before, Err said "disconnected".
func TestDisconnectCtxEndedErrSaysReset(t *testing.T) {
	checkRoutines(t)
	s := newSide(t, pairOpts{})
	rp := answerDial(t, s.qp, ConnConfig{}, mpa.Config{IRD: 4, ORD: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := s.qp.Disconnect(ctx) // the raw peer never closes its side
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "connection reset")
	qerr := s.qp.Err()
	require.ErrorIs(t, qerr, ErrAborted)
	require.ErrorIs(t, qerr, ErrDisconnected)
	require.False(t, errors.Is(qerr, context.DeadlineExceeded), "Err wraps the Disconnect's ctx error: %v", qerr)
	require.Equal(t, "verbs: connection reset by this side: Disconnect waiting for the peer to close: context deadline exceeded", qerr.Error())
	_ = rp
}

// Abort's Err says the connection was reset, and an orderly Disconnect
// after it is not claimed.
func TestAbortErrSaysReset(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	require.NoError(t, c.qp.Abort())
	require.ErrorIs(t, c.qp.Err(), ErrAborted)
	require.ErrorIs(t, c.qp.Err(), ErrDisconnected)
	require.Equal(t, "verbs: connection reset by this side", c.qp.Err().Error())
	ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
	defer cancel()
	require.ErrorIs(t, c.qp.Disconnect(ctx), ErrAborted)
	waitDone(t, s.qp, peerTimeout)
	require.ErrorIs(t, s.qp.Err(), ErrConnLost, "the peer saw a reset")
}
