package host

import (
	"context"
	"fmt"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// AdminCommand sends an admin command of the caller's, as nvme-cli's
// admin-passthru: build fills in the SQE (its CID and SGL are the host's
// to set), and data, if not empty, receives up to len(data) octets that
// the controller sends (at most 128 KiB, the admin queue's transfer size).
// It returns the completion's result, and
// a *nvme.StatusError for a status other than Success. A command the host
// runs itself (Connect, Property Set of CC) may leave the host and the
// controller at odds; an Asynchronous Event Request waits until the
// controller has an event, or the controller ends.
func (c *Controller) AdminCommand(ctx context.Context, build func(nvme.Command), data []byte) (uint64, error) {
	if len(data) > c.admin.maxData {
		return 0, fmt.Errorf("nvmeof: %d octets of admin data, more than %d", len(data), c.admin.maxData)
	}
	var get func([]byte)
	if len(data) > 0 {
		get = func(b []byte) { copy(data, b) }
	}
	return c.admin.adminCmd(ctx, build, len(data), "admin command", get)
}

// Abort ends the controller's connections at once, without the shutdown
// that Close performs: what a host that crashes or loses its network does
// to the target, which then ends the controller when it sees the queues
// go. Commands in flight fail with ErrQueueDead. Close is still to be
// called; it then only releases what the controller holds.
func (c *Controller) Abort() {
	if c.admin != nil {
		c.admin.qp.Abort()
	}
	for _, q := range c.io {
		q.qp.Abort()
	}
}
