package verbs

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
)

// Benchmarks over loopback TCP. Compare each with BenchmarkRawTCP at the same
// size in the same run: absolute numbers drift on shared machines, ratios do
// not.

const benchDepth = 128

// benchStream keeps benchDepth WRs in flight, signalling every 16th, and
// reports octets moved per second.
func benchStream(b *testing.B, size int, op SendOpcode) {
	benchStreamWith(b, pairOpts{ird: 16, ord: 16}, size, op, nil)
}

// benchStreamWith is benchStream on a pair made with o; pr, if not nil,
// measures the timed part.
func benchStreamWith(b *testing.B, o pairOpts, size int, op SendOpcode, pr *benchProbe) *side {
	c, s := connect(b, o)
	defer c.qp.Close()
	defer s.qp.Close()
	src := c.regMR(nil, size, LocalWrite)
	dst := s.regMR(nil, size, LocalWrite|RemoteWrite|RemoteRead)
	wr := SendWR{Opcode: op, SGL: []SGE{src.SGE(0, size)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}
	depth := benchDepth
	if op == OpRDMARead {
		depth = 16
	}
	const every = 16
	wcs := make([]WC, 32)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	pr.start(c.qp)
	posted, done := 0, 0
	for done < b.N {
		for posted-done < depth && posted < b.N {
			wr.Flags = 0
			if posted%every == every-1 || posted == b.N-1 {
				wr.Flags = Signaled
			}
			if _, err := c.qp.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		n := c.scq.Poll(wcs)
		if n == 0 {
			// Block rather than spin: on two cores a spinning poller takes
			// the CPU the QP loops need.
			c.scq.Wait(context.Background())
			continue
		}
		for _, wc := range wcs[:n] {
			if wc.Status != Success {
				b.Fatalf("%v: %v (server: %v)", wc, c.qp.Err(), s.qp.Err())
			}
			done = min(posted, (done/every+1)*every)
			if done > b.N {
				done = b.N
			}
		}
	}
	b.StopTimer()
	pr.stop(c.qp)
	return c
}

// benchSend streams Sends; the receiver reposts each buffer as it completes.
func benchSend(b *testing.B, size int) { benchSendWith(b, pairOpts{}, size, nil) }

func benchSendWith(b *testing.B, o pairOpts, size int, pr *benchProbe) *side {
	c, s := connect(b, o)
	defer c.qp.Close()
	defer s.qp.Close()
	src := c.regMR(nil, size, LocalWrite)
	const rx = 256
	dst := s.regMR(nil, size*rx, LocalWrite)
	for i := 0; i < rx; i++ {
		if _, err := s.qp.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{dst.SGE(i*size, size)}}); err != nil {
			b.Fatal(err)
		}
	}
	wr := SendWR{Opcode: OpSend, Flags: Signaled, SGL: []SGE{src.SGE(0, size)}}
	wcs := make([]WC, 64)
	rwcs := make([]WC, 64)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	pr.start(c.qp)
	posted, sent, recvd := 0, 0, 0
	for recvd < b.N {
		// Never more in flight than receives posted: iWARP has no RNR retry.
		for posted-recvd < rx-8 && posted-sent < benchDepth && posted < b.N {
			if _, err := c.qp.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		k := c.scq.Poll(wcs)
		sent += k
		n := s.rcq.Poll(rwcs)
		if n == 0 && k == 0 {
			// Nothing moved: block on whichever completion comes next.
			if posted-sent >= benchDepth {
				c.scq.Wait(context.Background())
			} else {
				s.rcq.Wait(context.Background())
			}
			continue
		}
		for _, wc := range rwcs[:n] {
			if wc.Status != Success {
				b.Fatalf("%v: %v", wc, s.qp.Err())
			}
			if _, err := s.qp.PostRecv(RecvWR{ID: wc.ID, SGL: []SGE{dst.SGE(int(wc.ID)*size, size)}}); err != nil {
				b.Fatal(err)
			}
		}
		recvd += n
	}
	b.StopTimer()
	pr.stop(c.qp)
	return c
}

func BenchmarkRDMAWrite(b *testing.B) {
	for _, size := range []int{64, 64 << 10} {
		b.Run(fmt.Sprint(size), func(b *testing.B) { benchStream(b, size, OpRDMAWrite) })
	}
}

func BenchmarkRDMARead(b *testing.B) {
	b.Run(fmt.Sprint(64<<10), func(b *testing.B) { benchStream(b, 64<<10, OpRDMARead) })
}

func BenchmarkSend(b *testing.B) {
	for _, size := range []int{64, 64 << 10} {
		b.Run(fmt.Sprint(size), func(b *testing.B) { benchSend(b, size) })
	}
}

// BenchmarkRawTCP is the baseline: one stream of size-octet writes over
// loopback, the reader draining into a buffer.
func BenchmarkRawTCP(b *testing.B) {
	for _, size := range []int{64, 64 << 10} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			done := make(chan int64)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					done <- 0
					return
				}
				n, _ := io.CopyBuffer(io.Discard, c, make([]byte, 256<<10))
				c.Close()
				done <- n
			}()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			c.Close()
			<-done
			b.StopTimer()
		})
	}
}
