package perf

import (
	"time"

	"golang.org/x/sys/windows"
)

// cpuTime returns the CPU time this process has used so far
// (GetProcessTimes).
func cpuTime() cpuUse {
	var created, exited, kernel, user windows.Filetime
	if err := windows.GetProcessTimes(windows.CurrentProcess(), &created, &exited, &kernel, &user); err != nil {
		return cpuUse{}
	}
	return cpuUse{filetimeSpan(user), filetimeSpan(kernel)}
}

// filetimeSpan is a FILETIME that counts a span, in 100 ns units.
func filetimeSpan(f windows.Filetime) time.Duration {
	return time.Duration(int64(f.HighDateTime)<<32|int64(f.LowDateTime)) * 100
}
