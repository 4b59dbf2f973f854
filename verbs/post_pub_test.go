package verbs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The transmit loop sees posted WRs through sqPub, which a poster stores
// every sqPubEvery WRs and when its post ends, also when the post stops
// early (a full queue, a bad WR). A WR left unpublished would never go out:
// every batch below must complete in full, in order, and land.
func TestPostPublishesEveryWR(t *testing.T) {
	checkRoutines(t)
	const depth = 2*sqPubEvery + 7 // a full SQ ends off a publishing point
	cp := defaultCap()
	cp.MaxSendWR = depth
	c, s := connect(t, pairOpts{cap: cp})
	const msg = 8
	src := c.regFilled(t, 4*depth*msg, 0, 1)
	dst := s.regMR(t, 4*depth*msg, LocalWrite|RemoteWrite)
	wr := func(i int) SendWR {
		return SendWR{ID: uint64(i), Opcode: OpRDMAWrite, Flags: Signaled, SGL: []SGE{src.SGE(i*msg, msg)},
			RemoteAddr: dst.Addr() + uint64(i*msg), RKey: dst.RKey()}
	}
	next := 0
	post := func(name string, n, want int, wantErr error, bad int) {
		t.Helper()
		wrs := make([]SendWR, n)
		for i := range wrs {
			wrs[i] = wr(next + i)
		}
		if bad >= 0 {
			wrs[bad].SGL = []SGE{{Addr: src.Addr(), Length: msg, LKey: src.LKey() + 1}}
		}
		got, err := c.qp.PostSend(wrs...)
		if wantErr != nil {
			require.ErrorIs(t, err, wantErr, name)
		} else {
			require.NoError(t, err, name)
		}
		require.Equal(t, want, got, name)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var wc [1]WC
		for i := range want {
			for c.scq.Poll(wc[:]) == 0 {
				require.NoError(t, c.scq.Wait(ctx), "%s: WR %d of %d never completed", name, i, want)
			}
			require.Equal(t, Success, wc[0].Status, name)
			require.Equal(t, uint64(next+i), wc[0].ID, name)
		}
		next += want
	}
	for _, n := range []int{1, sqPubEvery - 1, sqPubEvery, sqPubEvery + 1, 2*sqPubEvery + 3} {
		post(fmt.Sprint(n), n, n, nil, -1)
	}
	post("full", depth+5, depth, ErrQueueFull, -1)
	post("bad WR", sqPubEvery+5, sqPubEvery+3, ErrLocalProt, sqPubEvery+3)

	barrier(t, c, s)
	requireSame(t, src.Buf()[:next*msg], dst.Buf()[:next*msg])
}

// The SQ holds exactly MaxSendWR WRs, whatever that is: a post past it is
// refused, lap after lap (the poster reads the transmit side's head only
// when the head it saw last says the ring is full: sqFull), and every WR
// completes in order with its data.
func TestSQHoldsMaxSendWR(t *testing.T) {
	checkRoutines(t)
	for _, depth := range []int{1, 3, 5, 100, 128} {
		t.Run(fmt.Sprint(depth), func(t *testing.T) {
			cp := defaultCap()
			cp.MaxSendWR = depth
			c, s := connect(t, pairOpts{cap: cp})
			const msg, laps = 8, 3
			src := c.regFilled(t, laps*depth*msg, 0, 3)
			dst := s.regMR(t, laps*depth*msg, LocalWrite|RemoteWrite)
			var wc [1]WC
			for lap := range laps {
				wrs := make([]SendWR, depth+1)
				for i := range wrs {
					m := min(lap*depth+i, laps*depth-1) * msg
					wrs[i] = SendWR{ID: uint64(lap*depth + i), Opcode: OpRDMAWrite, Flags: Signaled,
						SGL: []SGE{src.SGE(m, msg)}, RemoteAddr: dst.Addr() + uint64(m), RKey: dst.RKey()}
				}
				n, err := c.qp.PostSend(wrs...)
				require.ErrorIs(t, err, ErrQueueFull, "lap %d", lap)
				require.Equal(t, depth, n, "lap %d", lap)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				for i := range depth {
					for c.scq.Poll(wc[:]) == 0 {
						require.NoError(t, c.scq.Wait(ctx), "lap %d: WR %d never completed", lap, i)
					}
					require.Equal(t, Success, wc[0].Status)
					require.Equal(t, uint64(lap*depth+i), wc[0].ID, "in posting order")
				}
				cancel()
			}
			barrier(t, c, s)
			requireSame(t, src.Buf(), dst.Buf())
		})
	}
}
