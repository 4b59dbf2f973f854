package verbs

import (
	"io"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/stretchr/testify/require"
)

// Stats counts what went out during a stream that never lets the SQ run
// dry, when the transmit loop's writes happen inside Appends (the Writer's
// arena fills) and not at a flush of its own: here a peer that reads
// slowly holds the loop in those writes. FPDUs of an Ethernet MSS, their
// payloads copied, fill the arena before a batch is queued.
func TestQPStatsDuringStream(t *testing.T) {
	checkRoutines(t)
	st := newStackSide(t, ConnConfig{})
	q := st.newQP(t, 0, 0)
	defer q.qp.Close()
	p := answerDial(t, q.qp, ConnConfig{MaxFPDU: 1460}, mpa.Config{IRD: 8, ORD: 8})
	start := q.qp.Stats().OctetsSent

	const msg, n = 1 << 20, 16 // 16 MiB: more than the sockets hold
	src, err := st.pd.RegMR(make([]byte, msg), LocalWrite)
	require.NoError(t, err)
	for i := range n {
		_, err := q.qp.PostSend(SendWR{ID: uint64(i), Opcode: OpRDMAWrite, SGL: []SGE{src.SGE(0, msg)},
			RemoteAddr: 0x1000, RKey: 0x100})
		require.NoError(t, err)
	}

	// Octets the peer has read were handed to TCP: the counter shows
	// them while the rest of the stream waits to go, all but the write
	// that TCP's full buffers hold up (at most a batch).
	const read = 4 << 20
	p.conn.SetReadDeadline(time.Now().Add(peerTimeout))
	_, err = io.CopyN(io.Discard, p.conn, read)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return q.qp.Stats().OctetsSent >= start+read-txBatch }, 10*time.Second, time.Millisecond,
		"OctetsSent %d after the peer read %d", q.qp.Stats().OctetsSent-start, read)
	s := q.qp.Stats()
	require.Less(t, s.OctetsSent-start, uint64(n*msg), "the stream is not over")
	// Each FPDU is at most 1460 octets, so the FPDUs counted must account
	// for the octets counted. Stats loads the two counters one after the
	// other, and the transmit loop may publish a batch in between: the
	// octets may be ahead of the FPDUs by a batch.
	require.GreaterOrEqual(t, s.FPDUsSent, (s.OctetsSent-start-txBatch)/1460, "FPDUs counted with their octets (%d octets)",
		s.OctetsSent-start)

	// The rest, and then the counters are exact.
	_, err = io.CopyN(io.Discard, p.conn, int64(n*msg-read))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return q.qp.Stats().FPDUsSent > 0 && q.qp.Stats().OctetsSent-start >= n*msg }, 5*time.Second, time.Millisecond)
}
