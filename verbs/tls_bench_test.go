//go:build unix

package verbs

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// BenchmarkTLS runs write_bw, read_bw and send_bw with 64 KiB messages in
// cleartext and inside TLS in the same run, for the ratio. Besides MB/s it
// reports the CPU time of both ends per GiB moved (getrusage of the
// process, which holds both QPs) and the allocations per FPDU the client
// sent or received, both over the timed part only.
func BenchmarkTLS(b *testing.B) {
	p := newTestPKI(b)
	const size = 64 << 10
	for _, op := range []string{"write", "read", "send"} {
		for _, mode := range []string{"clear", "tls"} {
			b.Run(op+"/"+mode, func(b *testing.B) {
				o := pairOpts{ird: 16, ord: 16}
				if mode == "tls" {
					o = p.tlsOpts(b, "bench")
					o.ird, o.ord = 16, 16
				}
				pr := &benchProbe{}
				var c *side
				switch op {
				case "write":
					c = benchStreamWith(b, o, size, OpRDMAWrite, pr)
				case "read":
					c = benchStreamWith(b, o, size, OpRDMARead, pr)
				case "send":
					c = benchSendWith(b, o, size, pr)
				}
				gib := float64(b.N) * size / (1 << 30)
				b.ReportMetric(pr.cpu.Seconds()/gib, "cpu-s/GiB")
				if pr.fpdus > 0 {
					b.ReportMetric(float64(pr.mallocs)/float64(pr.fpdus), "allocs/FPDU")
				}
				st := c.qp.Stats()
				if (mode == "tls") != st.TLS {
					b.Fatalf("Stats.TLS %v in %s mode", st.TLS, mode)
				}
			})
		}
	}
}

// benchProbe measures the timed part of a benchmark: the process's CPU
// time, its allocations, and the FPDUs the client QP sent and received.
type benchProbe struct {
	cpu0, cpu     time.Duration
	mallocs0      uint64
	mallocs       uint64
	fpdus0, fpdus uint64
	ms            runtime.MemStats
}

func (p *benchProbe) start(qp *QP) {
	if p == nil {
		return
	}
	st := qp.Stats()
	p.fpdus0 = st.FPDUsSent + st.FPDUsReceived
	runtime.ReadMemStats(&p.ms)
	p.mallocs0 = p.ms.Mallocs
	p.cpu0 = processCPU()
}

func (p *benchProbe) stop(qp *QP) {
	if p == nil {
		return
	}
	p.cpu = processCPU() - p.cpu0
	runtime.ReadMemStats(&p.ms)
	p.mallocs = p.ms.Mallocs - p.mallocs0
	st := qp.Stats()
	p.fpdus = st.FPDUsSent + st.FPDUsReceived - p.fpdus0
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(fmt.Sprint("getrusage: ", err))
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRawTLS is TLS's own floor next to BenchmarkTLS: one stream of
// 64 KiB writes over loopback, plain TCP and crypto/tls (TLS 1.3, the
// same certificates), the reader draining into a buffer, with the CPU of
// both ends per GiB.
func BenchmarkRawTLS(b *testing.B) {
	p := newTestPKI(b)
	const size = 64 << 10
	for _, mode := range []string{"clear", "tls"} {
		b.Run(mode, func(b *testing.B) {
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
				if mode == "tls" {
					c = tls.Server(c, p.serverConfig(false))
				}
				n, _ := io.CopyBuffer(io.Discard, struct{ io.Reader }{c}, make([]byte, 256<<10))
				c.Close()
				done <- n
			}()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			if mode == "tls" {
				cfg := p.clientConfig(b, "")
				cfg.ServerName = "127.0.0.1"
				tc := tls.Client(c, cfg)
				if err := tc.Handshake(); err != nil {
					b.Fatal(err)
				}
				c = tc
			}
			buf := make([]byte, size)
			b.SetBytes(size)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			c.Close()
			<-done
			cpu := processCPU() - cpu0
			b.StopTimer()
			b.ReportMetric(cpu.Seconds()/(float64(b.N)*size/(1<<30)), "cpu-s/GiB")
		})
	}
}
