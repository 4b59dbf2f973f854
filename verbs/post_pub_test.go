package verbs

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
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

// Two posters share one QP's SQ with WRs of every path the transmit side
// takes them by: Writes that complete when written (signaled or not),
// fenced Writes and Reads, which nextSQ may hold back (ORD 1), and fast
// registrations, which complete where they run. The transmit side stores
// how far it has taken WRs (sqNext) only when that matters to others
// (txPublish): every signaled WR must still complete, with success, in
// posting order, and the data of every Write and Read must land.
func TestMixedSQFromTwoPosters(t *testing.T) {
	checkRoutines(t)
	cp := defaultCap()
	cp.MaxSendWR = 64
	c, s := connect(t, pairOpts{cap: cp, ird: 1, ord: 1})
	const msg, perPoster = 64, 602 // the last WR (1203) a fast registration
	const total = 2 * perPoster
	src := c.regFilled(t, total*msg, 0, 5)
	sink := c.regMR(t, total*msg, LocalWrite)
	dst := s.regMR(t, total*msg, LocalWrite|RemoteWrite)
	peer := s.regFilled(t, total*msg, RemoteRead, 6)
	fr, err := c.pd.AllocMR()
	require.NoError(t, err)
	frBuf := make([]byte, 4096)

	var mu sync.Mutex // IDs in posting order: taken and posted under mu
	next, signaled := 0, 0
	kinds := make([]int, total)
	post := func() error {
		mu.Lock()
		defer mu.Unlock()
		i := next
		off := uint64(i * msg)
		var err error
		switch k := i % 7; k {
		case 0, 4: // a Read: held back while another is outstanding (ORD 1)
			_, err = c.qp.PostSend(SendWR{ID: uint64(i), Opcode: OpRDMARead, Flags: Signaled,
				SGL: []SGE{sink.SGE(int(off), msg)}, RemoteAddr: peer.Addr() + off, RKey: peer.RKey()})
		case 6: // a fast registration, completed by the transmit side itself
			_, err = c.qp.PostRegMR(uint64(i), Signaled, fr, frBuf, LocalWrite)
		default: // Writes: 1 unsignaled, 2 fenced behind the Reads, 3 and 5 signaled
			f := Signaled
			switch k {
			case 1:
				f = 0
			case 2:
				f |= Fence
			}
			_, err = c.qp.PostSend(SendWR{ID: uint64(i), Opcode: OpRDMAWrite, Flags: f,
				SGL: []SGE{src.SGE(int(off), msg)}, RemoteAddr: dst.Addr() + off, RKey: dst.RKey()})
		}
		if err == nil {
			kinds[i] = i%7 + 1
			if i%7 != 1 {
				signaled++
			}
			next++
		}
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for posted := 0; posted < perPoster; {
				switch err := post(); {
				case err == nil:
					posted++
				case errors.Is(err, ErrQueueFull):
					runtime.Gosched()
				default:
					errc <- err
					return
				}
				if ctx.Err() != nil {
					errc <- ctx.Err()
					return
				}
			}
		}()
	}
	// The completions, polled while the posters run.
	var wc [16]WC
	last, got := -1, 0
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	finished := func() bool {
		select {
		case <-done:
			mu.Lock()
			defer mu.Unlock()
			return got == signaled
		default:
			return false
		}
	}
	for !finished() {
		k := c.scq.Poll(wc[:])
		for _, w := range wc[:k] {
			require.Equal(t, Success, w.Status, "WR %d: %v", w.ID, c.qp.Err())
			require.Greater(t, int(w.ID), last, "completions in posting order")
			last = int(w.ID)
			got++
		}
		if k == 0 {
			waitCtx, stop := context.WithTimeout(ctx, 50*time.Millisecond)
			c.scq.Wait(waitCtx) // a completion, or look again whether the posters are done
			stop()
			require.NoError(t, ctx.Err(), "%d of the signaled WRs completed", got)
		}
	}
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}
	require.Equal(t, total, next)
	barrier(t, c, s)
	for i, k := range kinds {
		b := i * msg
		switch k {
		case 1, 5:
			require.Equal(t, peer.Buf()[b:b+msg], sink.Buf()[b:b+msg], "Read %d", i)
		case 2, 3, 4, 6:
			require.Equal(t, src.Buf()[b:b+msg], dst.Buf()[b:b+msg], "Write %d", i)
		}
	}
}
