package rmem

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/goiwarp/iwarp/verbs"
)

// Benchmarks over loopback TCP: a Buffer's ReadAt and WriteAt, called from
// benchDepth goroutines at once, against raw verbs (one goroutine keeping
// benchDepth signalled WRs in flight on the same kind of connection, each
// completion polled and counted, as a program without the package does).
// Compare the two in the same run: absolute numbers drift on shared
// machines, ratios do not.

const benchDepth = 16

func BenchmarkReadAt(b *testing.B) { benchOps(b, true) }

func BenchmarkWriteAt(b *testing.B) { benchOps(b, false) }

func benchOps(b *testing.B, read bool) {
	for _, size := range []int{4 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("%d/raw", size), func(b *testing.B) { benchRaw(b, size, read) })
		b.Run(fmt.Sprintf("%d/rmem", size), func(b *testing.B) { benchBuffer(b, size, read) })
	}
}

// benchPair connects a pair whose region holds benchDepth blocks of size.
func benchPair(b *testing.B, size int, buffer bool) *pair {
	return newPair(b, pairOpts{size: benchDepth * size, sendWR: benchDepth, ord: benchDepth, ird: benchDepth,
		cfg: Config{PieceSize: size}, noBuffer: !buffer})
}

func benchBuffer(b *testing.B, size int, read bool) {
	p := benchPair(b, size, true)
	op := p.b.WriteAt
	if read {
		op = p.b.ReadAt
	}
	var next atomic.Int64
	errc := make(chan error, benchDepth)
	ctx := context.Background()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range benchDepth {
		wg.Go(func() {
			buf := make([]byte, size)
			for next.Add(1) <= int64(b.N) {
				if _, err := op(ctx, buf, int64(g*size)); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errc)
	for err := range errc {
		b.Fatal(err)
	}
}

func benchRaw(b *testing.B, size int, read bool) {
	p := benchPair(b, size, false)
	cq := p.client.Config().SendCQ
	mr, err := p.client.PD().RegMR(make([]byte, benchDepth*size), verbs.LocalWrite)
	if err != nil {
		b.Fatal(err)
	}
	defer mr.Dereg()
	wr := verbs.SendWR{Opcode: verbs.OpRDMAWrite, Flags: verbs.Signaled, SGL: make([]verbs.SGE, 1), RKey: p.remote.RKey}
	if read {
		wr.Opcode = verbs.OpRDMARead
	}
	post := func(i int) {
		slot := i % benchDepth
		wr.ID = uint64(slot)
		wr.SGL[0] = mr.SGE(slot*size, size)
		wr.RemoteAddr = p.remote.Addr + uint64(slot*size)
		if _, err := p.client.PostSend(wr); err != nil {
			b.Fatal(err)
		}
	}
	wcs := make([]verbs.WC, benchDepth)
	ctx := context.Background()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	posted, done := 0, 0
	for done < b.N {
		for ; posted < b.N && posted-done < benchDepth; posted++ {
			post(posted)
		}
		n, err := cq.PollWait(ctx, wcs)
		if err != nil {
			b.Fatal(err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.Success {
				b.Fatalf("%v: %v", wc, p.client.Err())
			}
		}
		done += n
	}
	b.StopTimer()
}
