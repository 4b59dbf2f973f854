package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// ErrNoANA is ANALog's error on a controller that does not report ANA
// (Identify's CMIC bit 3 clear).
var ErrNoANA = errors.New("nvmeof: the controller does not report ANA")

// ANALog reads the controller's ANA log page: the state, through the path
// this controller is, of each ANA group and the namespaces in it. It reads
// the length Linux's host reads (NANAGRPID descriptors and MNAN NSIDs, at
// most the target's MDTS) in one command, so the log cannot change
// between pieces of it.
func (c *Controller) ANALog(ctx context.Context) (nvme.ANALog, error) {
	n, err := c.anaLogLen()
	if err != nil {
		return nvme.ANALog{}, err
	}
	buf := make([]byte, n)
	if err := c.GetLogPage(ctx, nvme.LogANA, nvme.NSIDAll, 0, buf); err != nil {
		return nvme.ANALog{}, err
	}
	return nvme.ParseANALog(buf, c.Info.ANAGRPMAX)
}

// anaLogLen is the length of the controller's ANA log, or why it cannot
// be read.
func (c *Controller) anaLogLen() (int, error) {
	ci := c.Info
	if ci.CMIC&nvme.CMICANA == 0 {
		return 0, ErrNoANA
	}
	if ci.MNAN == 0 || ci.MNAN > ci.NN || ci.NANAGRPID > ci.ANAGRPMAX {
		return 0, fmt.Errorf("nvmeof: ANA log: MNAN %d, NN %d, NANAGRPID %d, ANAGRPMAX %d", ci.MNAN, ci.NN, ci.NANAGRPID, ci.ANAGRPMAX)
	}
	n := uint64(nvme.ANAHeaderSize) + uint64(ci.NANAGRPID)*nvme.ANADescSize + uint64(ci.MNAN)*4
	if lim := uint64(min(c.maxData, c.admin.maxData)); n > lim {
		return 0, fmt.Errorf("nvmeof: an ANA log of %d octets is longer than a transfer (%d)", n, lim)
	}
	return int(n), nil
}
