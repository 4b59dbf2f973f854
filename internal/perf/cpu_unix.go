//go:build unix

package perf

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time this process has used so far (getrusage).
func cpuTime() cpuUse {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuUse{}
	}
	return cpuUse{time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())}
}
