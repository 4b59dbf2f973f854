// Package transport is the part of the NVMe/RDMA transport binding that
// the host (nvmeof/host) and the target (nvmeof/target) share and that
// needs verbs: a queue's iWARP connection settings (ConnConfig), a post
// that waits out a full send queue (PostSend), and the transfer sizes both
// sides default to. The wire format they share is nvmeof/nvme; like
// Linux's drivers/nvme/common, this holds code, not protocol.
package transport

// Transfer sizes (MDTS and the host's largest command), of targets and
// hosts alike.
const (
	DefaultMaxTransfer = 128 << 10 // the default
	MaxMaxTransfer     = 1 << 20   // the largest accepted
)
