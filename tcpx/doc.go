// Package tcpx is the TCP transport under MPA: it dials, listens and tunes the
// ordinary, routable TCP connections that iWARP (RFC 5040, 5041, 5044) runs
// over between data centers.
//
// Dial and Listen set the socket options of a Config before the three-way
// handshake where that matters (buffer sizes, which fix the window scale in the
// SYN) and the rest right after it; Apply does the same for a connection made
// elsewhere. The zero Config is what iWARP wants: Nagle's algorithm off, as siw
// does, keep-alive probes on, kernel buffer autotuning and retransmission
// timeouts left alone. Config.LocalAddr binds Dial's source address, for a
// host with several interfaces or paths. Config.MultipathTCP asks for
// Multipath TCP (off unless asked, whatever Go's default for listeners), and
// Config.CongestionControl picks the algorithm (cubic, bbr, ...) per
// connection. docs/wan.md shows how to set them for a long path.
//
// EMSS reads the effective MSS, so MPA can size each FPDU to fit one TCP
// segment, as siw does by default and as hardware iWARP peers expect. Info
// reads TCP_INFO for humans and metrics, and Abort closes a connection with an
// RST, as a queue pair going to the Error state does.
//
// The socket options are set with setsockopt(2) on Linux. Elsewhere Dial,
// Listen, Apply, EMSS and Info return an error wrapping errors.ErrUnsupported.
package tcpx
