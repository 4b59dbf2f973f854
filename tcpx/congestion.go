package tcpx

import (
	"fmt"
	"os"
	"strings"
)

// tcpCANameMax is the kernel's TCP_CA_NAME_MAX: an algorithm name is shorter.
const tcpCANameMax = 16

// CongestionControlError is the error of Dial, Listen or Apply when the
// kernel will not set Config.CongestionControl.
type CongestionControlError struct {
	Name string // the algorithm asked for
	// Available lists the algorithms the kernel has loaded
	// (net.ipv4.tcp_available_congestion_control); nil if unknown.
	Available []string
	// NotAllowed is true when the kernel has the algorithm but an
	// unprivileged process may not pick it: it is missing from
	// net.ipv4.tcp_allowed_congestion_control.
	NotAllowed bool
	Err        error // the setsockopt error
}

func (e *CongestionControlError) Error() string {
	if e.NotAllowed {
		return fmt.Sprintf("tcpx: congestion control %q is not in net.ipv4.tcp_allowed_congestion_control (%v)", e.Name, e.Err)
	}
	return fmt.Sprintf("tcpx: congestion control %q is not available (kernel has %s; load its module, e.g. modprobe tcp_%s): %v",
		e.Name, strings.Join(e.Available, " "), e.Name, e.Err)
}

func (e *CongestionControlError) Unwrap() error { return e.Err }

// AvailableCongestionControl returns the congestion control algorithms the
// kernel has loaded, from /proc/sys/net/ipv4/tcp_available_congestion_control.
func AvailableCongestionControl() ([]string, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	if err != nil {
		return nil, fmt.Errorf("tcpx: %w", err)
	}
	return strings.Fields(string(b)), nil
}
