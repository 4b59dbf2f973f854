package verbs

import (
	"testing"
	"time"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// A FIN while Reads of ours are unanswered is what a killed peer's kernel
// sends when its receive buffer was empty: no orderly RDMA close. The
// peer here answers the first of three Reads and closes; the QP's error Is
// ErrUnanswered and ErrConnLost, never ErrDisconnected, and the two left
// flush. Before, Err was ErrDisconnected ("closed in an orderly way").
func TestFINWithReadsUnanswered(t *testing.T) {
	checkRoutines(t)
	for _, full := range []bool{false, true} {
		name := map[bool]string{false: "half-close", true: "close"}[full]
		t.Run(name, func(t *testing.T) {
			s := newSide(t, pairOpts{})
			sink := s.regMR(t, 4096, LocalWrite)
			rp := answerDial(t, s.qp, ConnConfig{}, mpa.Config{IRD: 4, ORD: 4})
			for i := range 3 {
				_, err := s.qp.PostSend(SendWR{ID: uint64(1 + i), Opcode: OpRDMARead, Flags: Signaled,
					SGL: []SGE{sink.SGE(i*64, 64)}, RemoteAddr: 0x1000, RKey: 0x77})
				require.NoError(t, err)
			}
			rr := rp.wantReadRequest(t, 2) // MSN 1 was the Read RTR
			rp.wantReadRequest(t, 3)
			rp.wantReadRequest(t, 4)
			u := ddp.AppendTagged(nil, true, rdmap.Ctrl(rdmap.OpReadResponse), rr.SinkSTag(), rr.SinkTO())
			rp.send(t, append(u, make([]byte, 64)...))
			if full {
				rp.close()
			} else {
				rp.closeWrite(t)
			}
			waitDone(t, s.qp, peerTimeout)
			err := s.qp.Err()
			require.ErrorIs(t, err, ErrUnanswered)
			require.ErrorIs(t, err, ErrConnLost)
			require.NotErrorIs(t, err, ErrDisconnected)
			require.Contains(t, err.Error(), "2 outstanding")
			wcs := drainWC(s.scq)
			require.Len(t, wcs, 3)
			require.Equal(t, wcString(1, WCRDMARead, Success), wcOf(wcs[0]))
			require.Equal(t, wcString(2, WCRDMARead, WRFlushErr), wcOf(wcs[1]))
			require.Equal(t, wcString(3, WCRDMARead, WRFlushErr), wcOf(wcs[2]))
		})
	}
}

// A FIN before the peer answered the start-up's Read RTR (P2PAuto): the
// peer never ran its side of the connection, and the WRs we posted, held
// until that answer, flush. No orderly close either.
func TestFINWithReadRTRUnanswered(t *testing.T) {
	checkRoutines(t)
	s := newSide(t, pairOpts{})
	sink := s.regMR(t, 64, LocalWrite)
	rp := answerDialNoRTR(t, s.qp, ConnConfig{FirstFPDUHold: 5 * time.Second}, mpa.Config{IRD: 4, ORD: 4})
	require.Zero(t, rp.wantReadRequest(t, 1).Size(), "the Read RTR")
	_, err := s.qp.PostSend(SendWR{ID: 1, Opcode: OpRDMARead, Flags: Signaled,
		SGL: []SGE{sink.SGE(0, 64)}, RemoteAddr: 0x1000, RKey: 0x77})
	require.NoError(t, err)
	rp.closeWrite(t)
	waitDone(t, s.qp, peerTimeout)
	err = s.qp.Err()
	require.ErrorIs(t, err, ErrUnanswered)
	require.ErrorIs(t, err, ErrConnLost)
	require.Contains(t, err.Error(), "the start-up's Read RTR and 0 more outstanding")
	require.Equal(t, []string{wcString(1, WCRDMARead, WRFlushErr)}, wcStrings(drainWC(s.scq)))
}

// Every Read answered before the FIN: an orderly close, as before.
func TestFINWithReadsAnswered(t *testing.T) {
	checkRoutines(t)
	s := newSide(t, pairOpts{})
	sink := s.regMR(t, 64, LocalWrite)
	rp := answerDial(t, s.qp, ConnConfig{}, mpa.Config{IRD: 4, ORD: 4})
	_, err := s.qp.PostSend(SendWR{ID: 1, Opcode: OpRDMARead, Flags: Signaled,
		SGL: []SGE{sink.SGE(0, 64)}, RemoteAddr: 0x1000, RKey: 0x77})
	require.NoError(t, err)
	rr := rp.wantReadRequest(t, 2)
	u := ddp.AppendTagged(nil, true, rdmap.Ctrl(rdmap.OpReadResponse), rr.SinkSTag(), rr.SinkTO())
	rp.send(t, append(u, make([]byte, 64)...))
	require.Equal(t, wcString(1, WCRDMARead, Success), wcOf(waitWC(t, s.scq)))
	rp.closeWrite(t)
	waitDone(t, s.qp, 2*time.Second)
	require.ErrorIs(t, s.qp.Err(), ErrDisconnected)
	require.NotErrorIs(t, s.qp.Err(), ErrConnLost)
}
