package verbs

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestIdleQPMemory reports what an idle connected QP costs — its rings, the
// MPA reader and writer, two goroutines, the socket's Go-side state — with
// the CQs shared, and keeps it from growing unnoticed (issue #15: at most
// 32 KiB with SQ and RQ of 128).
func TestIdleQPMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("measures memory of 64 connections")
	}
	checkRoutines(t)
	const pairs = 64
	d := openDev(DeviceAttr{})
	pd := d.AllocPD()
	cq, err := d.CreateCQ(1024)
	require.NoError(t, err)
	ln, err := d.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{})
	require.NoError(t, err)
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	newQP := func() *QP {
		qp, err := pd.CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 128, MaxRecvWR: 128}})
		require.NoError(t, err)
		t.Cleanup(func() { qp.Close() })
		return qp
	}
	// Two collections before each reading: sync.Pool keeps a victim
	// generation for one GC, and what the pools hold (transmit arenas and
	// read buffers that connecting used) is shared, not any QP's.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	var clients []*QP
	for i := 0; i < pairs; i++ {
		c, s := newQP(), newQP()
		go func() {
			if req, err := ln.GetRequest(ctx); err == nil {
				req.Accept(ctx, s, nil)
			}
		}()
		err := c.Dial(ctx, "tcp", ln.Addr().String(), ConnConfig{})
		require.NoError(t, err)
		clients = append(clients, c)
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	perQP := (after.HeapInuse + after.StackInuse - before.HeapInuse - before.StackInuse) / (2 * pairs)
	t.Logf("idle connected QP (SQ/RQ 128, 1 SGE): %d KiB of heap and stack", perQP>>10)
	require.Less(t, perQP, uint64(40<<10), "an idle QP takes %d KiB", perQP>>10)

	// After a burst of traffic a QP goes idle again: the transmit arena
	// (256 KiB) and the reader's grown buffer (64 KiB, receivers only) go
	// back to their shared pools.
	const burst = 512 << 10
	src, err := pd.RegMR(make([]byte, burst), LocalWrite)
	require.NoError(t, err)
	dst, err := pd.RegMR(make([]byte, burst*pairs), LocalWrite|RemoteWrite) // a region of its own for each
	require.NoError(t, err)
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i, c := range clients {
		_, err := c.PostSend(SendWR{ID: uint64(i), Opcode: OpRDMAWrite, Flags: Signaled, SGL: []SGE{src.SGE(0, burst)},
			RemoteAddr: dst.Addr() + uint64(i*burst), RKey: dst.RKey()})
		require.NoError(t, err)
	}
	for range clients {
		wc := waitWC(t, cq)
		require.Equal(t, Success, wc.Status)
	}
	// Until every Write has been placed (its receiver's reader then waits
	// for more with no buffer) and every transmit loop has gone idle (and
	// given its arena back).
	for end := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
		parked := dst.Placed() == pairs
		for _, c := range clients {
			parked = parked && c.txParked.Load()
		}
		if parked {
			break
		}
		require.True(t, time.Now().Before(end), "transmit loops still busy")
	}
	runtime.GC()
	runtime.GC() // sync.Pool keeps a victim generation for one GC
	runtime.ReadMemStats(&after)
	perQP = (after.HeapInuse + after.StackInuse - before.HeapInuse - before.StackInuse) / (2 * pairs)
	t.Logf("after a %d KiB write each and idle again: %d KiB more per QP", burst>>10, perQP>>10)
	require.Less(t, perQP, uint64(16<<10), "a QP holds %d KiB more after traffic", perQP>>10)
}
