package verbs

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A Dial whose ctx is cancelled just as its start-up completes either fails
// or hands over a QP that lives on: the cancellation must not reach the
// socket of a QP Dial returned as connected (it set the socket's deadline,
// and the QP died with a timeout a moment after a successful Dial).
func TestDialCancelRacingReply(t *testing.T) {
	checkRoutines(t)
	s := newStackSide(t, ConnConfig{})
	rounds := 300
	if testing.Short() {
		rounds = 50
	}
	survived := 0
	for i := range rounds {
		srv, cli := s.newQP(t, 0, 0), s.newQP(t, 0, 0)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			actx, acancel := context.WithTimeout(context.Background(), peerTimeout)
			defer acancel()
			req, err := s.ln.GetRequest(actx)
			if err == nil {
				err = req.Accept(actx, srv.qp, nil)
			}
			// The Reply is on its way: cancel the Dial a random few
			// microseconds later, around the moment it lands.
			for end := time.Now().Add(time.Duration(rand.IntN(60)) * time.Microsecond); time.Now().Before(end); {
			}
			cancel()
			errc <- err
		}()
		err := cli.qp.Dial(ctx, "tcp", s.ln.Addr().String(), ConnConfig{FirstFPDUHold: -1})
		aerr := <-errc
		if err == nil {
			require.NoError(t, aerr, "round %d: Accept", i)
			time.Sleep(5 * time.Millisecond)
			require.Equal(t, StateRTS, cli.qp.State(), "round %d: a Dial that succeeded left a QP that died: %v", i, cli.qp.Err())
			survived++
		}
		cancel()
		cli.qp.Close()
		srv.qp.Close()
	}
	t.Logf("%d of %d Dials succeeded despite the cancellation", survived, rounds)
}
