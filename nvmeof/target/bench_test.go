package target

import (
	"context"
	"io"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
)

// Benchmarks: a Go host and a Go target over loopback, a RAM namespace.
// Compare with BenchmarkTCPStream128K, plain TCP over loopback in the
// same run (go test -run XXX -bench . -benchtime 2s ./nvmeof/).

const benchNS = 256 << 20

func benchNamespace(b *testing.B, queues, depth int) *host.Namespace {
	b.Helper()
	sub, err := NewSubsystem(testNQN)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := sub.AddNamespace(NewMemBackend(benchNS), 512); err != nil {
		b.Fatal(err)
	}
	tg, err := New(Config{}, sub)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tg.Close() })
	addr, err := tg.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := host.Connect(ctx, "tcp", addr.String(), testNQN, host.Config{IOQueues: queues, QueueDepth: depth})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	ns, err := c.Namespace(ctx, 1)
	if err != nil {
		b.Fatal(err)
	}
	// Warm up: the target's data buffer pools grow to what completions in
	// flight need, then are reused (steady state allocates nothing).
	done := make(chan error, 16)
	for g := range 16 {
		go func() {
			buf := make([]byte, 128<<10)
			var err error
			for i := range 200 {
				off := int64(g*200+i) * (128 << 10) % benchNS
				if _, err = ns.WriteAt(buf[:4096], off); err == nil {
					_, err = ns.ReadAt(buf, off)
				}
				if err != nil {
					break
				}
			}
			done <- err
		}()
	}
	for range 16 {
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	return ns
}

// parallel runs fn from qd goroutines until b.N I/Os are done.
func parallel(b *testing.B, qd int, fn func(i int64) error) {
	var next atomic.Int64
	b.SetParallelism((qd + 1) / 2) // GOMAXPROCS 2 on this machine: qd goroutines
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := fn(next.Add(1)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func benchSeq(b *testing.B, write bool) {
	ns := benchNamespace(b, 2, 32)
	const size = 128 << 10
	b.SetBytes(size)
	b.ReportAllocs()
	bufs := make(chan []byte, 64)
	for range 64 {
		bufs <- make([]byte, size)
	}
	b.ResetTimer()
	parallel(b, 8, func(i int64) error {
		buf := <-bufs
		defer func() { bufs <- buf }()
		off := (i * size) % benchNS
		var err error
		if write {
			_, err = ns.WriteAt(buf, off)
		} else {
			_, err = ns.ReadAt(buf, off)
		}
		return err
	})
}

func BenchmarkSeqRead128K(b *testing.B)  { benchSeq(b, false) }
func BenchmarkSeqWrite128K(b *testing.B) { benchSeq(b, true) }

// BenchmarkRandRead4KQD32: 4 KiB reads at random offsets, 32 at once over
// two queues.
func BenchmarkRandRead4KQD32(b *testing.B) {
	ns := benchNamespace(b, 2, 32)
	b.ReportAllocs()
	bufs := make(chan []byte, 64)
	for range 64 {
		bufs <- make([]byte, 4096)
	}
	start := time.Now()
	b.ResetTimer()
	parallel(b, 32, func(i int64) error {
		buf := <-bufs
		defer func() { bufs <- buf }()
		off := int64(uint64(i)*0x9e3779b97f4a7c15%(benchNS/4096)) * 4096
		_, err := ns.ReadAt(buf, off)
		return err
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "IOPS")
}

// BenchmarkRead4KQD1: one 4 KiB read at a time; p50 and p99 latency.
func BenchmarkRead4KQD1(b *testing.B) {
	ns := benchNamespace(b, 1, 32)
	b.ReportAllocs()
	buf := make([]byte, 4096)
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if _, err := ns.ReadAt(buf, int64(i%1024)*4096); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkTCPStream128K is the baseline: 128 KiB writes over a loopback
// TCP connection to a reader that discards them.
func BenchmarkTCPStream128K(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(io.Discard, c)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 128<<10)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	c.Close()
	<-done
}

// BenchmarkTCPRoundTrip4K is the latency baseline: a 64-octet request and
// a 4 KiB answer over loopback TCP, one at a time.
func BenchmarkTCPRoundTrip4K(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		req, resp := make([]byte, 64), make([]byte, 4096)
		for {
			if _, err := io.ReadFull(c, req); err != nil {
				return
			}
			if _, err := c.Write(resp); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	req, resp := make([]byte, 64), make([]byte, 4096)
	lat := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, resp); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	b.StopTimer()
	c.Close()
	<-done
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
