package verbs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// A peer that asks for data and then half-closes (FIN) still gets every
// response it asked for: a half-closed TCP connection carries data the
// other way (RFC 9293 section 3.6), and the responder accepted the work
// before the FIN. An outside hostile-peer suite found 64 KiB Read Requests
// followed by FIN answered on 1 to 5 of 8 QPs at random.

// readAll reads the stack's FPDUs until its FIN and returns the ULPDUs.
func (p *rawPeer) readAll(t *testing.T) [][]byte {
	t.Helper()
	var us [][]byte
	for {
		u, err := p.next()
		if err == io.EOF {
			return us
		}
		require.NoError(t, err, "after %d FPDUs", len(us))
		us = append(us, u)
	}
}

// wantReadResponse checks that us are the Read Response to a Read of src
// into sinkSTag at sinkTO, in order, and nothing else.
func wantReadResponse(t *testing.T, us [][]byte, sinkSTag uint32, sinkTO uint64, src []byte) {
	t.Helper()
	var got []byte
	for i, u := range us {
		require.GreaterOrEqual(t, len(u), ddp.TaggedHdrLen, "FPDU %d", i)
		h := ddp.Tagged(u[:ddp.TaggedHdrLen])
		require.Equal(t, rdmap.Ctrl(rdmap.OpReadResponse), h.ULPCtrl(), "FPDU %d: a Read Response", i)
		require.Equal(t, sinkSTag, h.STag(), "FPDU %d", i)
		require.Equal(t, sinkTO+uint64(len(got)), h.TO(), "FPDU %d", i)
		require.Equal(t, i == len(us)-1, u[0]&ddp.FlagLast != 0, "FPDU %d: L only on the last", i)
		got = append(got, u[ddp.TaggedHdrLen:]...)
	}
	require.True(t, bytes.Equal(src, got), "Read Response: %d octets, want %d, equal %v", len(got), len(src), bytes.Equal(src, got))
}

func TestPeerFINAfterReadRequest(t *testing.T) {
	checkRoutines(t)
	const qps, size, rounds = 8, 64 << 10, 3
	for r := range rounds {
		st := newStackSide(t, ConnConfig{})
		type conn struct {
			q   *stackQP
			p   *rawPeer
			src []byte
			mr  *MR
		}
		cs := make([]conn, qps)
		for i := range cs {
			c := &cs[i]
			c.q = st.newQP(t, 0, 0)
			c.src = make([]byte, size)
			for j := range c.src {
				c.src[j] = byte(i*7 + j*13 + r)
			}
			var err error
			c.mr, err = st.pd.RegMR(c.src, RemoteRead)
			require.NoError(t, err)
			c.p = st.acceptPeer(t, c.q, mpa.Config{IRD: 8, ORD: 8, P2P: mpa.P2POff})
		}
		// All eight at once: Read Request, then FIN.
		for i := range cs {
			c := &cs[i]
			c.p.send(t, readReqULPDU(1, 0xabc00100+uint32(i), 0x7000, size, c.mr.RKey(), c.mr.Addr()))
			c.p.closeWrite(t)
		}
		var wg sync.WaitGroup
		errs := make([]string, qps)
		for i := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := &cs[i]
				var us [][]byte
				for {
					u, err := c.p.next()
					if err == io.EOF {
						break
					}
					if err != nil {
						errs[i] = fmt.Sprintf("QP %d: after %d FPDUs: %v", i, len(us), err)
						return
					}
					us = append(us, u)
				}
				var got []byte
				for _, u := range us {
					if len(u) < ddp.TaggedHdrLen || ddp.Tagged(u[:ddp.TaggedHdrLen]).ULPCtrl() != rdmap.Ctrl(rdmap.OpReadResponse) {
						errs[i] = fmt.Sprintf("QP %d: not a Read Response: %x", i, u[:min(len(u), 32)])
						return
					}
					got = append(got, u[ddp.TaggedHdrLen:]...)
				}
				if !bytes.Equal(got, c.src) {
					errs[i] = fmt.Sprintf("QP %d: Read Response of %d octets, want %d", i, len(got), size)
				}
			}()
		}
		wg.Wait()
		for i := range cs {
			require.Empty(t, errs[i], "round %d", r)
			c := &cs[i]
			c.p.close()
			waitDone(t, c.q.qp, peerTimeout)
			require.ErrorIs(t, c.q.qp.Err(), ErrDisconnected, "QP %d: an orderly close", i)
		}
	}
}

// The siblings: an Atomic Response owed at the FIN, a Read Request behind
// a long Write of ours in progress, and our own posted WRs, which the FIN
// stops: those not started flush, deterministically.
func TestPeerFINSiblings(t *testing.T) {
	checkRoutines(t)
	t.Run("atomic response owed", func(t *testing.T) {
		st := newStackSide(t, ConnConfig{RFC7306: true})
		q := st.newQP(t, 0, 0)
		word := make([]byte, 8)
		binary.NativeEndian.PutUint64(word, 40) // atomics work on host-order words
		mr, err := st.pd.RegMR(word, LocalWrite|RemoteWrite|RemoteRead|RemoteAtomic)
		require.NoError(t, err)
		p := st.acceptPeer(t, q, mpa.Config{IRD: 8, ORD: 8, P2P: mpa.P2POff})
		h := ddp.AppendUntagged(nil, true, rdmap.Ctrl(rdmap.OpAtomicRequest), 0, rdmap.QNReadRequest, 1, 0)
		h = rdmap.AppendAtomicRequest(h, rdmap.AtomicFetchAdd, 77, mr.RKey(), mr.Addr(), 2, 0, 0, 0)
		p.send(t, h)
		p.closeWrite(t)
		us := p.readAll(t)
		require.Len(t, us, 1, "one Atomic Response")
		u := us[0]
		require.Equal(t, rdmap.Ctrl(rdmap.OpAtomicResponse), ddp.Untagged(u[:ddp.UntaggedHdrLen]).ULPCtrl())
		ar := rdmap.AtomicResponse(u[ddp.UntaggedHdrLen:])
		require.Equal(t, uint32(77), ar.ReqID())
		require.Equal(t, uint64(40), ar.Original())
		p.close()
		waitDone(t, q.qp, peerTimeout)
		require.ErrorIs(t, q.qp.Err(), ErrDisconnected)
		require.Equal(t, uint64(42), binary.NativeEndian.Uint64(word)) // ordered by Done

	})
	t.Run("our WRs at the FIN", func(t *testing.T) {
		st := newStackSide(t, ConnConfig{})
		q := st.newQP(t, 0, 0)
		src := bytes.Repeat([]byte{0x5a}, 4096)
		mr, err := st.pd.RegMR(src, RemoteRead|LocalWrite)
		require.NoError(t, err)
		p := st.acceptPeer(t, q, mpa.Config{IRD: 8, ORD: 8, P2P: mpa.P2POff})
		p.send(t, readReqULPDU(1, 0xabc00100, 0x7000, 4096, mr.RKey(), mr.Addr()))
		p.closeWrite(t)
		// Whatever the loops are doing when the FIN lands, the Read
		// Response is owed and sent; WRs posted now are not started.
		us := p.readAll(t)
		var rr [][]byte
		for _, u := range us {
			if u[0]&ddp.FlagTagged != 0 && ddp.Tagged(u[:ddp.TaggedHdrLen]).ULPCtrl() == rdmap.Ctrl(rdmap.OpReadResponse) {
				rr = append(rr, u)
			}
		}
		wantReadResponse(t, rr, 0xabc00100, 0x7000, src)
		p.close()
		waitDone(t, q.qp, peerTimeout)
		require.ErrorIs(t, q.qp.Err(), ErrDisconnected)
		_, err = q.qp.PostSend(SendWR{ID: 9, Opcode: OpSend, Flags: Signaled | Inline, InlineData: []byte("late")})
		require.NoError(t, err)
		require.Equal(t, WRFlushErr, waitWC(t, q.scq).Status, "a WR posted after the close flushes")
	})
}
