package verbs

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// A work completion with an error status and the QP's Err: the cause is
// recorded before the WC is delivered, so an application that polls the
// failed WC and at once asks why always gets an answer (a fetch example run
// once printed "remote access error (<nil>)": Err waited for the flush to
// finish). Each case runs several times over real TCP, since the window it
// guards is a race.
func TestErrBeforeErrorWC(t *testing.T) {
	checkRoutines(t)
	const rounds = 20
	cases := []struct {
		name string
		// run makes the failure and returns the failed WC and the QP it
		// belongs to.
		run        func(t *testing.T, c, s *side) (WC, *QP)
		status     WCStatus
		remote     bool
		cause      string
		completion string
	}{
		{
			name: "Read with a bad RKey, at the requester",
			run: func(t *testing.T, c, s *side) (WC, *QP) {
				src := s.regFilled(t, 4096, RemoteRead, 1)
				dst := c.regMR(t, 4096, LocalWrite)
				_, err := c.qp.PostSend(SendWR{ID: 1, Opcode: OpRDMARead, Flags: Signaled,
					SGL: []SGE{dst.SGE(0, 4096)}, RemoteAddr: src.Addr(), RKey: src.RKey() ^ 0xff})
				require.NoError(t, err)
				return wait(t, c.scq), c.qp
			},
			status: RemAccessErr, remote: true, cause: "invalid STag",
		},
		{
			name: "Send larger than the receive, at the responder",
			run: func(t *testing.T, c, s *side) (WC, *QP) {
				rb := s.regMR(t, 8, LocalWrite)
				_, err := s.qp.PostRecv(RecvWR{ID: 2, SGL: []SGE{rb.SGE(0, 8)}})
				require.NoError(t, err)
				_, err = c.qp.PostSend(SendWR{ID: 3, Opcode: OpSend, Flags: Inline, InlineData: make([]byte, 64)})
				require.NoError(t, err)
				return wait(t, s.rcq), s.qp
			},
			status: LocLenErr, remote: false, cause: "DDP message too long for available buffer",
		},
		{
			name: "Send with Invalidate of an STag not ours, at the responder",
			run: func(t *testing.T, c, s *side) (WC, *QP) {
				rb := s.regMR(t, 8, LocalWrite)
				_, err := s.qp.PostRecv(RecvWR{ID: 4, SGL: []SGE{rb.SGE(0, 8)}})
				require.NoError(t, err)
				_, err = c.qp.PostSend(SendWR{ID: 5, Opcode: OpSendWithInv, Flags: Inline,
					InlineData: []byte("inv"), InvalidateRKey: 0x7fffff00})
				require.NoError(t, err)
				return wait(t, s.rcq), s.qp
			},
			status: RemInvReqErr, remote: false, cause: "STag cannot be invalidated",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i := range rounds {
				c, s := connect(t, pairOpts{})
				wc, qp := tc.run(t, c, s)
				err := qp.Err() // at once: no waiting for Done
				require.Equal(t, tc.status, wc.Status, "round %d: %v", i, wc)
				var te *TerminateError
				require.True(t, errors.As(err, &te), "round %d: %v, then Err() = %v", i, wc, err)
				require.Equal(t, tc.remote, te.Remote, "round %d: %v", i, te)
				require.Contains(t, te.Terminate.Cause().String(), tc.cause, "round %d", i)
				<-qp.Done()
				require.Same(t, te, qp.Err(), "the first cause stays")
				c.qp.Close()
				s.qp.Close()
			}
		})
	}
}
