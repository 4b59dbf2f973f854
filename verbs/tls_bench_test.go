//go:build unix

package verbs

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// BenchmarkTLS runs write_bw, read_bw and send_bw with 64 KiB messages in
// cleartext and inside TLS in the same run, for the ratio. Besides MB/s it
// reports the CPU time of both ends per GiB moved (getrusage of the
// process, which holds both QPs) and the allocations per FPDU sent.
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
				var ms0, ms1 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				cpu0 := processCPU()
				var c *side
				switch op {
				case "write":
					c = benchStreamWith(b, o, size, OpRDMAWrite)
				case "read":
					c = benchStreamWith(b, o, size, OpRDMARead)
				case "send":
					c = benchSendWith(b, o, size)
				}
				cpu := processCPU() - cpu0
				runtime.ReadMemStats(&ms1)
				st := c.qp.Stats()
				fpdus := st.FPDUsSent + st.FPDUsReceived
				gib := float64(b.N) * size / (1 << 30)
				b.ReportMetric(cpu.Seconds()/gib, "cpu-s/GiB")
				if fpdus > 0 {
					b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(fpdus), "allocs/FPDU")
				}
				if (mode == "tls") != st.TLS {
					b.Fatalf("Stats.TLS %v in %s mode", st.TLS, mode)
				}
			})
		}
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(fmt.Sprint("getrusage: ", err))
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
