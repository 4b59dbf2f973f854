package perf

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"time"
)

// lastCPU is the CPU cost of the last bandwidth test this process ran, for
// the demo's comparison line.
var lastCPU atomic.Pointer[cpuCost]

// cpuTime is the user+sys CPU time this process has used (getrusage).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuCost is the CPU a bandwidth measurement took in this process and the
// octets it moved (each direction of a bidirectional test counts).
type cpuCost struct {
	start time.Duration // cpuTime when the measurement began
	cpu   time.Duration
	bytes float64
}

// perGiB is CPU seconds per GiB moved.
func (c cpuCost) perGiB() float64 {
	if c.bytes <= 0 {
		return 0
	}
	return c.cpu.Seconds() / (c.bytes / (1 << 30))
}

// measureCPU runs fn, a bandwidth measurement, and returns its report
// with the CPU it cost this process: with --loopback both sides.
func measureCPU(fn func() (Report, error)) (Report, cpuCost, error) {
	t0 := cpuTime()
	r, err := fn()
	c := cpuCost{start: t0, cpu: cpuTime() - t0, bytes: float64(r.Iters) * float64(r.Size)}
	return r, c, err
}

// cpuLine is the CPU cost line under a bandwidth table.
func cpuLine(c cpuCost, loopback bool) string {
	who := "this process"
	if loopback {
		who = "both sides, in this process"
	}
	return fmt.Sprintf(" CPU       : %.2f s user+sys for %.2f GiB = %.3f s/GiB (%s)", c.cpu.Seconds(), c.bytes/(1<<30), c.perGiB(), who)
}
