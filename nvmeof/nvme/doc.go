// Package nvme is the NVMe over Fabrics wire format that the target and the
// host share, as Linux keeps it in include/linux/nvme.h: the 64-octet
// submission queue entry (Command) and the 16-octet completion
// (Completion) as views over bytes, every status (Status), SGL
// descriptors, the Fabrics commands (Connect and its data, Property Get and
// Set), the Identify structures, log pages (discovery, SMART, ANA,
// reservation notifications), feature identifiers, Asynchronous Event
// bits, and the NVMe/RDMA transport binding's RDMA CM private data
// (NVMe base 2.0, NVMe-oF 1.1, NVMe/RDMA transport binding 1.0).
//
// It holds no state and does no I/O: decoders check lengths and return an
// error or false on short input, never panic; encoders append to a slice.
package nvme
