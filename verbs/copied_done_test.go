package verbs

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/goiwarp/iwarp/tcpx"
	"github.com/stretchr/testify/require"
)

// A Write or Send whose payload the Writer copied completes before the write
// that carries it (txQueued). These tests hold that promise to what a
// completion means over TCP: the WRs complete while the peer reads nothing,
// and what the stack still holds of them reaches the peer, in order and
// before the FIN, whether the application then disconnects, closes, or
// does nothing. A peer that never reads cannot make Close hang.

const (
	copiedWRs  = 3000 // 64-octet Writes: 252 000 stream octets, more than the sockets hold
	copiedSize = 64
	copiedSTag = 0x5a5a5a01
	copiedBase = 0x10000
)

// postCopied posts the test's Writes on q in one call, all signaled, and
// waits for the completions of all but the last without the peer reading
// anything: the transmit loop takes them in one round, into the Writer's
// arena, before its write stalls on the full socket. The last, which the
// write follows at once, completes after the write.
func postCopied(t *testing.T, q *stackQP, src *MR) {
	t.Helper()
	wrs := make([]SendWR, copiedWRs)
	for i := range wrs {
		wrs[i] = SendWR{ID: uint64(i), Opcode: OpRDMAWrite, Flags: Signaled,
			SGL: []SGE{src.SGE(i*copiedSize, copiedSize)}, RemoteAddr: copiedBase + uint64(i*copiedSize), RKey: copiedSTag}
	}
	n, err := q.qp.PostSend(wrs...)
	require.NoError(t, err)
	require.Equal(t, copiedWRs, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wcs := make([]WC, 256)
	for done := 0; done < copiedWRs-1; {
		n, err := q.scq.PollWait(ctx, wcs)
		require.NoError(t, err, "%d of %d Writes complete while the peer reads nothing", done, copiedWRs-1)
		for _, wc := range wcs[:n] {
			require.Equal(t, Success, wc.Status, "%v", wc)
			require.Equal(t, uint64(done), wc.ID, "in order")
			done++
		}
	}
	require.Zero(t, q.scq.Poll(wcs), "the last Write completes after the write that carries it")
}

// lastCopied returns the last Write's completion.
func lastCopied(t *testing.T, q *stackQP) WC {
	t.Helper()
	wc := waitWC(t, q.scq)
	require.Equal(t, uint64(copiedWRs-1), wc.ID)
	return wc
}

// wantCopied reads the test's Writes from the raw peer up to its FIN.
func wantCopied(t *testing.T, p *rawPeer, src []byte) {
	t.Helper()
	var got []byte
	for {
		u, err := p.next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "after %d Writes", len(got)/copiedSize)
		require.Len(t, u, ddp.TaggedHdrLen+copiedSize)
		h := ddp.Tagged(u[:ddp.TaggedHdrLen])
		require.Equal(t, rdmap.Ctrl(rdmap.OpWrite), h.ULPCtrl())
		require.Equal(t, uint32(copiedSTag), h.STag())
		require.Equal(t, copiedBase+uint64(len(got)), h.TO(), "Write %d", len(got)/copiedSize)
		got = append(got, u[ddp.TaggedHdrLen:]...)
	}
	require.Equal(t, len(src)/copiedSize, len(got)/copiedSize, "Writes before the FIN")
	require.True(t, bytes.Equal(src, got), "the Writes' data")
}

// copiedPair connects a QP of the stack, with a small send buffer, to a raw
// peer that reads only when told, and registers the Writes' source.
func copiedPair(t *testing.T) (*stackQP, *rawPeer, *MR) {
	st := newStackSide(t, ConnConfig{TCP: tcpx.Config{SendBuffer: 8 << 10}})
	q := &stackQP{}
	var err error
	q.scq, err = st.dev.CreateCQ(copiedWRs)
	require.NoError(t, err)
	q.rcq, err = st.dev.CreateCQ(16)
	require.NoError(t, err)
	q.qp, err = st.pd.CreateQP(QPConfig{SendCQ: q.scq, RecvCQ: q.rcq, Cap: QPCap{MaxSendWR: copiedWRs, MaxRecvWR: 4}})
	require.NoError(t, err)
	t.Cleanup(func() { q.qp.Close() })
	p := st.acceptPeer(t, q, mpa.Config{P2P: mpa.P2POff})
	b := make([]byte, copiedWRs*copiedSize)
	fill(b, 7)
	src, err := st.pd.RegMR(b, 0)
	require.NoError(t, err)
	return q, p, src
}

func TestCopiedWRsCompleteBeforeTheWrite(t *testing.T) {
	checkRoutines(t)
	for _, end := range []string{"Disconnect", "Close", "peer closes"} {
		t.Run(end, func(t *testing.T) {
			q, p, src := copiedPair(t)
			postCopied(t, q, src)
			total := uint64(copiedWRs * mpa.FPDULen(ddp.TaggedHdrLen+copiedSize))
			sent := q.qp.Stats().OctetsSent
			require.Less(t, sent, total, "some completed Writes are still the stack's to send (else the test shows nothing)")
			t.Logf("%d Writes completed with %d of %d octets handed to TCP", copiedWRs, sent, total)

			ended := make(chan error, 1)
			switch end {
			case "Disconnect":
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					ended <- q.qp.Disconnect(ctx)
				}()
			case "Close":
				go func() { ended <- q.qp.Close() }()
			}
			if end == "peer closes" {
				// Nothing from the application: the peer reads all, then closes.
				p.conn.SetDeadline(time.Now().Add(peerTimeout))
				for range copiedWRs {
					p.wantULPDU(t, "a Write")
				}
				p.closeWrite(t)
				waitDone(t, q.qp, 5*time.Second)
				require.ErrorIs(t, q.qp.Err(), ErrDisconnected)
				require.Equal(t, Success, lastCopied(t, q).Status)
				return
			}
			wantCopied(t, p, src.Buf())
			p.closeWrite(t)
			select {
			case err := <-ended:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal(end + " did not return")
			}
			require.Equal(t, Success, lastCopied(t, q).Status, "written in full before the FIN")
		})
	}
}

// A peer that never reads holds Close up for at most the linger.
func TestCopiedWRsCloseNeverHangs(t *testing.T) {
	checkRoutines(t)
	q, p, src := copiedPair(t)
	postCopied(t, q, src)
	start := time.Now()
	require.NoError(t, q.qp.Close())
	require.Less(t, time.Since(start), termLinger+time.Second, "Close with a peer that reads nothing")
	require.Equal(t, WRFlushErr, lastCopied(t, q).Status, "its write never finished")
	p.close()
}
