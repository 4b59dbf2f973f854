package verbs

import (
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The concurrency contract for SRQ (package doc, "Concurrency"): PostRecv
// from several goroutines while its QPs take receives; ArmLimit, Len, Attr
// and Destroy at any time.

// Three goroutines stock an SRQ while three clients' Sends, over three
// QPs that share it, take its receives, and another goroutine arms its
// limit, reads Len and Attr and tries Destroy: every Send lands in exactly
// one receive, each QP's in the order sent, and no QP meets an empty SRQ.
// Each receive posted earns one Send (a credit), and each completion
// polled gives a slot back, so the SRQ is never over-filled or run dry.
func TestConcurrentSRQ(t *testing.T) {
	checkRoutines(t)
	d := openDev(DeviceAttr{})
	defer d.Close()
	pd := d.AllocPD()
	const depth, clients, per = 32, 3, 200
	const total = clients * per
	srq, err := pd.CreateSRQ(depth, 1)
	require.NoError(t, err)
	rcq, err := d.CreateCQ(4 * depth)
	require.NoError(t, err)
	cls := srqServer(t, srq, rcq, clients)
	rb, err := pd.RegMR(make([]byte, 8*total), LocalWrite)
	require.NoError(t, err)

	slots, credits := make(chan struct{}, depth), make(chan struct{}, total)
	for range depth {
		slots <- struct{}{}
	}
	stop, halt := halter(t)
	var next atomic.Int64 // the next receive's ID; its buffer is octets [8 ID, 8 ID + 8)
	var wg sync.WaitGroup
	for range 3 { // the stockers
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-slots:
				case <-stop:
					return
				}
				id := next.Add(1) - 1
				if id >= total {
					return
				}
				if _, err := srq.PostRecv(RecvWR{ID: uint64(id), SGL: []SGE{rb.SGE(8*int(id), 8)}}); err != nil {
					panic(err)
				}
				credits <- struct{}{}
			}
		}()
	}
	for i, c := range cls { // the senders
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < per; {
				select {
				case <-credits:
				case <-stop:
					return
				}
				for {
					_, err := c.qp.PostSend(SendWR{ID: uint64(j), Opcode: OpSend, Flags: Inline,
						InlineData: binary.BigEndian.AppendUint64(nil, uint64(i)<<32|uint64(j))})
					if err == ErrQueueFull {
						time.Sleep(100 * time.Microsecond)
						continue
					}
					if err != nil {
						panic(err)
					}
					break
				}
				j++
			}
		}()
	}
	watched := make(chan int, 1)
	go func() { // the SRQ's other methods, at any time
		fired := 0
		var armed <-chan struct{}
		for {
			select {
			case <-stop:
				watched <- fired
				return
			case <-armed:
				fired++
				armed = nil
			default:
			}
			if armed == nil {
				ch, err := srq.ArmLimit(depth / 2)
				if err != nil {
					panic(err)
				}
				armed = ch
			}
			if n := srq.Len(); n < 0 || n > depth {
				panic("SRQ Len outside 0..depth")
			}
			if a := srq.Attr(); a.MaxWR != depth || a.MaxSGE != 1 {
				panic("SRQ Attr changed")
			}
			if err := srq.Destroy(); !errors.Is(err, ErrBusy) {
				panic("SRQ Destroy with QPs on it: not ErrBusy")
			}
			runtime.Gosched()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seen := map[uint64]bool{} // (client, sequence) received
	last := map[*QP]uint64{}  // per server QP: its last (client, sequence)
	ids := map[uint64]bool{}  // receive IDs completed
	wcs := make([]WC, 16)
	for len(ids) < total {
		n, err := rcq.PollWait(ctx, wcs)
		require.NoError(t, err, "%d of %d receives completed", len(ids), total)
		for _, wc := range wcs[:n] {
			require.Equal(t, wcString(wc.ID, WCRecv, Success), wcOf(wc))
			require.EqualValues(t, 8, wc.ByteLen)
			require.False(t, ids[wc.ID], "receive %d completed twice", wc.ID)
			ids[wc.ID] = true
			v := binary.BigEndian.Uint64(rb.Buf()[8*wc.ID:])
			require.False(t, seen[v], "Send %#x received twice", v)
			seen[v] = true
			if l, ok := last[wc.QP]; ok {
				require.Equal(t, l>>32, v>>32, "one client per QP")
				require.Equal(t, l+1, v, "a QP's Sends in the order sent")
			} else {
				require.Zero(t, uint32(v), "a QP's first Send first")
			}
			last[wc.QP] = v
			slots <- struct{}{}
		}
	}
	halt()
	wg.Wait()
	fired := <-watched
	require.Len(t, seen, total)
	require.Len(t, last, clients, "each client's QP")
	require.Zero(t, srq.Len(), "every receive posted was taken")
	for qp := range last {
		require.NoError(t, qp.Err())
		require.NoError(t, qp.Close())
	}
	require.NoError(t, srq.Destroy(), "no QP uses it now")
	_, err = srq.PostRecv(RecvWR{SGL: []SGE{rb.SGE(0, 8)}})
	require.ErrorIs(t, err, ErrClosed)
	t.Logf("limit event fired %d times", fired)
}
