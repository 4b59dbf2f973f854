package verbs

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Inside TLS a FIN between FPDUs is orderly only after close_notify: a
// bare FIN (an attacker on the path, or a peer that died in a way its
// kernel closes for it) ends the QP as a loss, its receives flushed.
func TestTLSBareFINIsTruncation(t *testing.T) {
	checkRoutines(t)
	for _, notify := range []bool{false, true} {
		name := map[bool]string{false: "bare FIN", true: "close_notify then FIN"}[notify]
		t.Run(name, func(t *testing.T) {
			tp := dialTLSPeer(t, newTestPKI(t))
			rb := tp.s.regMR(t, 64, LocalWrite)
			_, err := tp.s.qp.PostRecv(RecvWR{ID: 9, SGL: []SGE{rb.SGE(0, 64)}})
			require.NoError(t, err)
			if notify {
				require.NoError(t, tp.tc.CloseWrite())
			}
			require.NoError(t, tp.sock.Conn.(*net.TCPConn).CloseWrite())
			select {
			case <-tp.s.qp.Done():
			case <-time.After(failFast):
				t.Fatal("the QP did not end on the peer's FIN")
			}
			err = tp.s.qp.Err()
			if notify {
				require.ErrorIs(t, err, ErrDisconnected)
				require.NotErrorIs(t, err, ErrConnLost)
			} else {
				require.ErrorIs(t, err, ErrConnLost)
				require.NotErrorIs(t, err, ErrDisconnected)
				require.ErrorContains(t, err, "without close_notify")
			}
			wc := wait(t, tp.s.rcq)
			require.Equal(t, uint64(9), wc.ID)
			require.Equal(t, WRFlushErr, wc.Status)
		})
	}
}

// Our own orderly ends inside TLS send close_notify, so the peer sees
// them as orderly: Close without Disconnect here (Disconnect in
// TestTLSPeerToPeerDisconnect, the FIN that answers the peer's in
// TestTLSAnswerToOrderlyFINWithReadsOutstanding); Abort stays a reset.
func TestTLSOrderlyEndsSendCloseNotify(t *testing.T) {
	checkRoutines(t)
	p := newTestPKI(t)
	t.Run("Close", func(t *testing.T) {
		c, s := connect(t, p.tlsOpts(t, "erin"))
		barrier(t, c, s)
		require.NoError(t, c.qp.Close())
		<-s.qp.Done()
		require.ErrorIs(t, s.qp.Err(), ErrDisconnected)
		require.NotErrorIs(t, s.qp.Err(), ErrConnLost)
	})
	t.Run("Abort is a reset", func(t *testing.T) {
		c, s := connect(t, p.tlsOpts(t, "erin"))
		barrier(t, c, s)
		require.NoError(t, c.qp.Abort())
		<-s.qp.Done()
		require.True(t, errors.Is(s.qp.Err(), ErrConnLost), "%v", s.qp.Err())
	})
}

// Our FIN answering a peer's orderly one comes with close_notify even
// when that FIN left Reads of ours unanswered (ErrUnanswered is our
// verdict, not the peer's): a peer that disconnected in order must not
// see a truncation, or its Disconnect fails where in cleartext it
// succeeds.
func TestTLSAnswerToOrderlyFINWithReadsOutstanding(t *testing.T) {
	checkRoutines(t)
	tp := dialTLSPeer(t, newTestPKI(t))
	sink := tp.s.regMR(t, 64, LocalWrite)
	_, err := tp.s.qp.PostSend(SendWR{ID: 1, Opcode: OpRDMARead, Flags: Signaled,
		SGL: []SGE{sink.SGE(0, 64)}, RemoteAddr: 0x1000, RKey: 0x1234})
	require.NoError(t, err)
	require.NoError(t, tp.tc.CloseWrite()) // close_notify
	require.NoError(t, tp.sock.Conn.(*net.TCPConn).CloseWrite())
	<-tp.s.qp.Done()
	require.ErrorIs(t, tp.s.qp.Err(), ErrUnanswered)
	tp.tc.SetReadDeadline(time.Now().Add(failFast))
	_, err = io.Copy(io.Discard, tp.tc)
	require.NoError(t, err, "the stack's stream ends without an error")
	require.False(t, tp.sock.eof.Load(), "the stack's FIN came after its close_notify")
}
