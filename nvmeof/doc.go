// Package nvmeof is NVMe over Fabrics on this repository's iWARP stack: a
// target and a host of the NVMe/RDMA transport (NVMe-oF 1.1, the NVMe/RDMA
// transport binding 1.0, NVMe base 1.3 as VS says) over verbs queue pairs,
// which the Linux kernel's nvme-rdma host and nvmet-rdma target (over siw
// or an iWARP NIC) interoperate with. This package holds no code; it says
// how the pieces fit, and its three packages hold them:
//
//   - nvmeof/nvme is the wire format both sides share, as Linux's
//     include/linux/nvme.h: commands, completions, statuses, SGLs, the
//     Fabrics commands, Identify structures, log pages, features and the
//     RDMA CM private data. It does no I/O and imports no verbs.
//   - nvmeof/target serves subsystems to hosts, as Linux's
//     drivers/nvme/target (nvmet).
//   - nvmeof/host connects to subsystems and reads and writes their
//     namespaces, as Linux's drivers/nvme/host.
//
// The target and the host meet only in nvmeof/nvme (and share the few
// verbs settings of nvmeof/internal/transport): either one works with
// Linux's other half.
//
// # The model
//
// A subsystem (target.Subsystem), named by an NQN, holds namespaces: a
// namespace (target.Namespace) is a backend (memory, a file or a block
// device) cut into logical blocks and numbered by an NSID. A port
// (target.Port) is a TCP address the target listens on and the subsystems
// it exposes; every port also serves the discovery controller, whose log
// lists what a host may connect to.
//
// A host reaches a subsystem through a controller: one per host and path,
// created by the host's first Connect. A controller is a set of queues,
// each one RDMA connection (one verbs QP): the admin queue (QID 0) for
// Identify, Get Log Page, features and events, and I/O queues for Read,
// Write and the rest. The host side of a controller is host.Controller;
// host.Namespace is its io.ReaderAt and io.WriterAt over one namespace;
// host.Multipath is one subsystem through several ports, with the I/O going
// down the paths that Asymmetric Namespace Access calls optimized.
//
// # What runs where
//
// A command is a 64-octet SQE that the host sends in a Send, with its data
// either in the same capsule (small writes) or in a buffer of the host's
// named by a keyed SGL (address, length, STag). The target parses the
// command once (which checks it and chooses what executes it), fetches the
// host's data by RDMA Read, executes it against the namespace's backend,
// RDMA-Writes any data for the host, and answers with a 16-octet
// completion in a Send (Send with Invalidate when the host asked). The host
// never sees an RDMA operation of its own: it posts Sends and receive
// buffers, and its memory is written and read by the target.
//
// On the target, one goroutine owned by the target serves each queue; an
// I/O queue serves the commands where they arrive, on its QP's receive
// goroutine, and a command whose backend call blocks holds its queue, not
// the others. On the host, each queue has a fixed set of command slots,
// each with its registered buffer: a call takes a slot, sends, and waits
// for its completion, so that several goroutines share the queues and a
// Namespace keeps several commands in flight.
//
// # Interoperability and limits
//
// Linux's host attaches to the target (nvme discover, nvme connect,
// multipath, reservations with nvme-cli, a file system on top), and the
// host attaches to Linux's target: interop/ has the tests, run against a
// real kernel. Not implemented: in-band authentication, fused commands
// (refused), namespace management, metadata and protection information,
// SGL segments (MSDBD 1), asynchronous events but namespace, discovery,
// ANA and reservation notices; MPA CRCs are not asked for by default
// (docs/nvmeof-crc.md says why).
package nvmeof
