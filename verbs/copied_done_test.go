package verbs

import (
	"bytes"
	"context"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/goiwarp/iwarp/tcpx"
	"github.com/stretchr/testify/require"
)

// A Write or Send whose payload the Writer copied completes before the write
// that carries it while the transmit loop gathers small WRs (txQueued).
// These tests hold that promise to what a completion means over TCP: the
// Writes complete while the peer reads nothing, and what the stack still
// holds of them reaches the peer, in order and before the FIN, whether the
// application then disconnects, closes, or does nothing. A peer that never
// reads cannot make Close hang.
//
// The peer's receive window is a few KiB, so the write of the Writes
// stalls; a local invalidation posted after them is carried out, and
// completes, before that write, so that every WR has completed while the
// Writer still holds the Writes' octets.

const (
	copiedWRs  = 120 // 100-octet Writes: 14 160 stream octets, under txGather, more than the sockets hold
	copiedSize = 100
	copiedSTag = 0x5a5a5a01
	copiedBase = 0x10000
	copiedInv  = 1 << 20 // the fast registration's and the invalidation's WR ID
)

// postCopied registers a fast MR, then posts the test's Writes, all
// signaled, and a local invalidation of that MR in one call, and waits for
// every completion without the peer reading anything.
func postCopied(t *testing.T, q *stackQP, src *MR) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wcs := make([]WC, 256)
	fast, err := q.qp.pd.AllocMR()
	require.NoError(t, err)
	stag, err := q.qp.PostRegMR(copiedInv, Signaled, fast, make([]byte, 64), LocalWrite)
	require.NoError(t, err)
	n, err := q.scq.PollWait(ctx, wcs[:1])
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, Success, wcs[0].Status, "%v", wcs[0])

	wrs := make([]SendWR, copiedWRs+1)
	for i := range copiedWRs {
		wrs[i] = SendWR{ID: uint64(i), Opcode: OpRDMAWrite, Flags: Signaled,
			SGL: []SGE{src.SGE(i*copiedSize, copiedSize)}, RemoteAddr: copiedBase + uint64(i*copiedSize), RKey: copiedSTag}
	}
	wrs[copiedWRs] = SendWR{ID: copiedInv, Opcode: OpLocalInv, Flags: Signaled, InvalidateRKey: stag}
	n, err = q.qp.PostSend(wrs...)
	require.NoError(t, err)
	require.Equal(t, len(wrs), n)
	for done := 0; done < len(wrs); {
		n, err := q.scq.PollWait(ctx, wcs)
		require.NoError(t, err, "%d of %d WRs complete while the peer reads nothing", done, len(wrs))
		for _, wc := range wcs[:n] {
			require.Equal(t, Success, wc.Status, "%v", wc)
			require.Equal(t, wrs[done].ID, wc.ID, "in order")
			done++
		}
	}
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
// peer with a small receive buffer that reads only when told, and
// registers the Writes' source.
func copiedPair(t *testing.T) (*stackQP, *rawPeer, *MR) {
	st := newStackSide(t, ConnConfig{TCP: tcpx.Config{SendBuffer: 4 << 10}})
	q := &stackQP{}
	var err error
	q.scq, err = st.dev.CreateCQ(2 * copiedWRs)
	require.NoError(t, err)
	q.rcq, err = st.dev.CreateCQ(16)
	require.NoError(t, err)
	q.qp, err = st.pd.CreateQP(QPConfig{SendCQ: q.scq, RecvCQ: q.rcq, Cap: QPCap{MaxSendWR: 2 * copiedWRs, MaxRecvWR: 4}})
	require.NoError(t, err)
	t.Cleanup(func() { q.qp.Close() })
	errc := st.acceptAsync(q)
	d := net.Dialer{Timeout: peerTimeout, Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { setRcvBuf(fd, 2048) })
	}}
	p := dialPeerWith(t, d, st.ln.Addr().String(), mpa.Config{P2P: mpa.P2POff})
	require.NoError(t, <-errc, "Accept")
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
	p.close()
}
