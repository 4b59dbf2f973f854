// Package wan tests the stack where networks fail and paths are long: a
// peer killed or resetting mid-transfer, a partition found by
// TCP_USER_TIMEOUT or keep-alive, 1 GiB over a 50 ms, 1 Gbit/s path with
// loss against plain TCP on the same path, and many QPs under load; one QP
// over Multipath TCP on two paths that survives the loss of one; and, on
// request, the table of congestion control against loss (TestWANTable).
//
// Each test builds its own pair of network namespaces, joined by a veth
// pair (with a netem qdisc when the kernel has sch_netem) or by two TUN
// devices and Emulator, a netem stand-in in the test process; TwoPath
// joins them by two veth pairs, for Multipath TCP. No packet
// leaves those namespaces. The tests need root and iproute2, so they are
// behind the build tag "netns":
//
//	sudo go test -tags netns ./interop/wan/
//
// See README.md for what each test shows, the knobs, and figures measured.
package wan
