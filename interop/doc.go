// Package interop tests the stack against implementations nobody here
// wrote: Wireshark's iWARP dissectors judge captures of our traffic, and
// (with the harness under siw/) the Linux kernel's siw driver and perftest.
//
// The tests need root (tcpdump on the loopback interface) and Debian's
// tshark and tcpdump packages, so they are behind the build tag "interop":
//
//	sudo apt-get install tshark tcpdump
//	go test -tags interop ./interop/
//
// A missing tool fails the test loudly; it never passes silently.
package interop
