// Package host is the NVMe over Fabrics host of nvmeof: it connects to
// subsystems over the NVMe/RDMA transport (NVMe-oF 1.1, transport binding
// 1.0) on verbs queue pairs, as Linux's nvme-rdma does, and reads and
// writes their namespaces, of nvmeof/target or of Linux's nvmet-rdma. The
// package nvmeof says how the pieces fit; nvmeof/nvme has the wire format.
//
// Connect opens a controller of a subsystem (the admin queue, Connect,
// CC.EN, Identify, Number of Queues, then the I/O queues); Discover reads a
// discovery log, and DiscoverAll follows its referrals as nvme-cli's
// connect-all. Controller.Namespace returns a Namespace, an io.ReaderAt and
// io.WriterAt over one namespace that spreads commands over the I/O queues,
// with Flush, Write Zeroes, Deallocate, Force Unit Access writes,
// reservations and write protection. Offsets and lengths are multiples of
// the block size, as with O_DIRECT; Namespace.Bytes gives a ByteView that
// takes any, by read-modify-write of partial blocks (not atomic). The host's data buffers are registered
// once per command slot (keyed SGL, address subtype: no invalidation) and
// small writes go in the capsule.
//
// Events: with Config.WatchNamespaces, WatchDiscovery, WatchANA or
// WatchReservations the controller keeps an Asynchronous Event Request
// outstanding, and Controller.WaitNamespaceChange, WaitDiscoveryChange,
// WaitANAChange and WaitReservationNotice return what changed.
//
// ConnectMultipath is Linux's native multipath: one host through several
// ports, I/O down an optimized path (else a non-optimized one; round-robin
// or where the fewest commands wait: MultipathConfig.Policy), moved by ANA
// Change notices, sent again down another path on a path status or a
// broken path, held while no path is usable; a lost path is connected again
// (MultipathConfig.ReconnectDelay, LossTimeout). Any host sends an I/O
// command again, up to 5 times, when the target answers it with a status
// that allows it (no DNR), as Linux's host does.
//
// Failures: a call whose context ends returns at once and abandons its
// commands, whose slots come back when the target answers them; other
// calls go on. A command unanswered for Config.IOTimeout (30 s), or a Keep
// Alive for KATO, ends the controller's queues: Err and the commands then
// return ErrCommandTimeout or ErrKeepAliveExpired, with ErrQueueDead,
// never the context errors of callers.
//
// Controller.Close shuts down as NVMe asks and Linux's host does: new
// commands fail with ErrClosed, those in flight finish (not the standing
// AER), the I/O queues disconnect, then CC.SHN and the admin queue's
// disconnect. Controller.Abort cuts the connections instead, as a host that
// crashes does. AdminCommand sends an admin command of the caller's, as
// nvme-cli's admin-passthru.
//
// # Files
//
// controller.go (Connect, Config, Controller), queue.go (one RDMA queue:
// command slots, capsules out, completions in, timeouts), errors.go,
// namespace.go, byteview.go, multipath.go,
// discovery.go, events.go, and ana.go, resv.go, resvlog.go,
// writeprotect.go and multipath_resv.go for the features of those names.
package host
