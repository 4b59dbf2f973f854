package verbs

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// A receive handler that answers each request of a burst longer than its
// send queue: the answers it posts are held for the burst's end until the
// queue is full, then go, so that its retry finds room (they were held
// until the burst was taken, which waited for the handler: the retry
// could never succeed).
func TestRxHandlerBurstFillsSQ(t *testing.T) {
	checkRoutines(t)
	st := newStackSide(t, ConnConfig{})
	q := st.newQP(t, 0, 0) // 16 WRs each queue
	const n = 64
	rbuf := make([]byte, 16*16)
	rmr, err := st.pd.RegMR(rbuf, LocalWrite)
	require.NoError(t, err)
	for i := range 16 {
		_, err := q.qp.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{rmr.SGE(i*16, 16)}})
		require.NoError(t, err)
	}
	data := make([]byte, 4096)
	dmr, err := st.pd.RegMR(data, LocalWrite)
	require.NoError(t, err)
	var answered, failed atomic.Int32
	wcs := make([]WC, 16)
	q.qp.SetRxHandler(func() {
		for {
			k := q.rcq.Poll(wcs)
			for _, wc := range wcs[:k] {
				if wc.Status != Success {
					return
				}
				q.qp.PostRecv(RecvWR{ID: wc.ID, SGL: []SGE{rmr.SGE(int(wc.ID)*16, 16)}})
				end := time.Now().Add(2 * time.Second)
				for {
					// As an NVMe target's read: the data, then the response.
					_, err := q.qp.PostSend(SendWR{Opcode: OpRDMAWrite, SGL: []SGE{dmr.SGE(0, 4096)}, RemoteAddr: 0x1000, RKey: 0x1234},
						SendWR{Opcode: OpSend, Flags: Inline, InlineData: []byte("answer")})
					if err == nil {
						answered.Add(1)
						break
					}
					if !errors.Is(err, ErrQueueFull) || time.Now().After(end) {
						failed.Add(1)
						break
					}
					time.Sleep(50 * time.Microsecond)
				}
			}
			if k < len(wcs) {
				return
			}
		}
	})
	defer q.qp.SetRxHandler(nil)
	p := st.acceptPeer(t, q, mpa.Config{IRD: 8, ORD: 8})
	defer p.close()
	var reqs [][]byte
	for i := range n {
		reqs = append(reqs, sendULPDU(rdmap.OpSend, 0, 0, uint32(i+1), 0, true, []byte("request")))
	}
	p.send(t, reqs...) // one write: a burst
	for i := range n {
		p.wantULPDU(t, "data")
		u := p.wantULPDU(t, "an answer")
		require.Contains(t, string(u), "answer", "answer %d", i)
	}
	require.EqualValues(t, n, answered.Load())
	require.Zero(t, failed.Load(), "a post that found the send queue full for 2 s")
	require.NoError(t, q.qp.Err())
}
