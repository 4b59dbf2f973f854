package perf

import (
	"fmt"
	"runtime/debug"
)

// version is what -V prints: perftest prints its own version; iwarp-perf
// prints the module's and the perftest version it speaks to peers.
func version() string {
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	return fmt.Sprintf("iwarp-perf %s (github.com/goiwarp/iwarp), perftest %s's exchange", v, perftestVersion)
}
