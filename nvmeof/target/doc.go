// Package target is the NVMe over Fabrics target of nvmeof: it serves
// subsystems and their namespaces to hosts over the NVMe/RDMA transport
// (NVMe-oF 1.1, transport binding 1.0) on verbs queue pairs, as Linux's
// nvmet-rdma does, so that Linux's nvme-rdma host (or nvmeof/host)
// attaches to it. The package nvmeof says how the pieces fit; nvmeof/nvme
// has the wire format.
//
// New serves Subsystems, each with Namespaces over a Backend
// (MemBackend, FileBackend: pread and pwrite at the block's offset) and a
// host access list, plus the discovery controller
// (nqn.2014-08.org.nvmexpress.discovery) on every listener. Each RDMA
// connection is one queue: its CM private data (nvme.CMRequest: RECFMT, QID,
// HRQSIZE, HSQSIZE) is checked before the accept (nvme.CMReject statuses), and
// one goroutine owned by the Target serves it. The admin queue's Connect
// creates a controller with a dynamic ID; I/O queues join it by that ID.
// Commands arrive as Sends of 64-octet SQEs with in-capsule data (up to
// Config.InCapsuleData, IOCCSZ) or a keyed SGL: the target
// RDMA-Reads the host's data for writes and the admin Connect, RDMA-Writes
// read data, and answers with a 16-octet CQE by Send, or Send with
// Invalidate when the keyed SGL asked for it (as Linux's host does).
//
// Controllers implement Property Get/Set of CAP, VS, CC and CSTS with the
// enable and shutdown handshakes (a shutdown flushes every namespace, and
// sets CSTS.CFS if one cannot be flushed); Identify CNS 0 (namespace), 1
// (controller), 2 (active namespaces), 3 (NGUID and UUID descriptors) and
// 6 for the NVM command set (zeros, as nvmet);
// Get Log Page for error information, SMART / health, firmware slots, the
// Changed Namespace List, ANA and, on the discovery controller, the
// discovery log; Set/Get Features Number of Queues, Keep Alive Timer (traffic based,
// CTRATT.TBKAS: a controller that hears nothing for KATO is torn down),
// Async Event Configuration (the SMART warnings NVMe makes mandatory, never
// raised, and Namespace Attribute Notices, as Linux's nvmet; on the
// discovery controller Discovery Log Page Change Notices), Volatile
// Write Cache (on; a host that turns it off gets every write durable),
// Host Identifier (read only: the Connect's) and Namespace Write
// Protection (writeprotect.go: a host makes a namespace read-only for
// every host, and Linux's host turns its block device read-only);
// Asynchronous Event Requests, held until an event: a
// namespace added or removed while hosts are connected
// (Subsystem.AddNamespace, AddNamespaceConfig, RemoveNamespace) raises a
// Namespace Attribute Changed notice and is listed in the Changed
// Namespace List (log page 04h), upon which Linux's host rescans; a
// subsystem added or removed (Target.AddSubsystem, RemoveSubsystem) or an
// access list changed (Subsystem.AllowHost, SetAllowedHosts) raises a
// Discovery Log Page Change notice on discovery controllers, which Linux's
// host passes to udev for "nvme connect-all"; an ANA state changed
// (Port.SetANAState, Subsystem.SetANAGroup) raises an ANA Change notice
// on the controllers through that port, upon which Linux's multipath host
// moves its I/O; Keep Alive; Abort (never aborts).
// I/O queues implement Read, Write (with Force Unit Access: durable when
// it completes, FUAWriter; Linux's file systems send their journal
// commits so), Flush, Write Zeroes, the reservation
// commands (Register, Acquire, Release, Report: resv.go, on namespaces
// with NamespaceConfig.Reservations, as nvmet's resv_enable) and Dataset
// Management (Deallocate, with the 4 KiB range buffer Linux's host sends
// whatever the count: the range reads as zeros; a Backend may zero
// itself, Zeroer: memory is cleared, a file gets fallocate as in Linux's
// nvmet, zeroed in place or a hole punched). Bad input gets the status the
// specifications prescribe, with DNR: invalid opcodes, namespaces, fields,
// SGL types, offsets and lengths, LBAs out of range, transfers beyond MDTS,
// commands before Connect or before CC.EN (Command Sequence Error), Connect
// errors with the Invalid Parameter offset, and a host that overruns its
// SQ, which NVMe leaves undefined: an I/O queue takes a command only once
// the one before has its receive buffer posted again, so that each gets
// an answer, Command Sequence Error for one beyond the SQ's entries
// outstanding; an admin queue, which has no such pace, holds the SQ's
// entries and as many again (at most 32 more) unread, and one beyond them
// ends its connection (the DDP Terminate of a Send that found no
// buffer). A broken connection ends its queue, and an admin queue's its controller. A host's new controller on a subsystem waits, in its
// Connect, until the host's ended controllers there have no command but
// Reads left in their Backends (quiesce.go), so that a write the host
// sends again after a reset cannot be overtaken by its old copy; a write
// on another path of the host's waits for them as well.
//
// A port (Target.Listen, or ListenPort as a port of nvmet with the
// subsystems linked to it and the referrals its discovery log lists, which
// host.DiscoverAll and nvme-cli connect-all follow; Port.Close removes it)
// is a listener; a subsystem has a controller for each admin Connect,
// through any port that exposes it, and says so (CMIC multi-port and
// multi-controller, namespaces shared: NMIC), so that a host may reach it by
// several paths. Asymmetric Namespace Access says which paths to use, as in
// nvmet: each namespace is in an ANA group (NamespaceConfig.ANAGroup), and
// each port gives each group a state (PortConfig.ANA, Port.SetANAState):
// optimized, non-optimized, inaccessible, persistent loss or change. The ANA
// log page gives a controller its port's states; I/O through a port where
// its namespace's group is not accessible fails with the path status, which
// hosts retry down another path.
//
// A host retries down another path, or later, a command answered without
// DNR; nvmeof/host's Multipath and Linux's native multipath both do.
//
// Reservations (resv.go) are nvmet's: register, acquire, preempt, release,
// report and the six types' access rules, per namespace
// (NamespaceConfig.Reservations); the hosts a change takes something from
// are told by the Reservation Notification log and its notice
// (resvlog.go); with a reservation
// file (NamespaceConfig.ReservationFile) they persist through power loss
// while a host asks for it (resvptpl.go).
//
// Not implemented: in-band authentication, fused commands (refused),
// namespace management, metadata and protection information, SGL
// segments (MSDBD 1), asynchronous events but the notices above and the
// SMART warnings (never raised). MPA CRCs are asked for only with
// Config.AskCRC (docs/nvmeof-crc.md says why not by default).
//
// # Files
//
// target.go (Target, Config), port.go and referral.go (ports), subsystem.go
// and namespace.go, backend.go (MemBackend, FileBackend); queue.go is the
// RDMA queue (one per connection: capsules in, data by RDMA Read and
// Write, completions out), places.go the places MaxQueues gives queues
// (and which one a newcomer evicts), controller.go the controller and
// queue.parse, which chooses each command's executor; admin.go, nvm.go,
// resv.go are the command sets; events.go, ana.go, writeprotect.go,
// quiesce.go, resvlog.go and resvptpl.go the features of those names.
package target
