package host

import (
	"context"
	"fmt"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// watchResv stands for Config.WatchReservations among the watched
// notices' Async Event Configuration bits: it has none (reservation
// notices are always enabled, masked per namespace), so it is never sent.
const watchResv = uint32(1) << 30

// maxResvReads bounds how many pages ReservationNotices reads at once: a
// target keeps a bounded queue (nvmet and this one 64), which a target that
// keeps answering with pages must not turn into an endless loop.
const maxResvReads = 1024

// ReservationNotices reads the controller's Reservation Notification log
// until it is empty: what reservation commands of other hosts took from
// this one, on any namespace, since the last read (oldest first). Each
// read takes its page, and unmasks the next Reservation Log Page
// Available notice; on a controller watching them
// (Config.WatchReservations) the watch reads them, and
// WaitReservationNotice is the way to have them. After an error it
// returns the pages it read before.
func (c *Controller) ReservationNotices(ctx context.Context) ([]nvme.ReservationNotice, error) {
	var ns []nvme.ReservationNotice
	page := make([]byte, nvme.ResvNoticeSize)
	for range maxResvReads {
		if err := c.GetLogPage(ctx, nvme.LogResvNotice, nvme.NSIDAll, 0, page); err != nil {
			return ns, err
		}
		n, err := nvme.ParseReservationNotice(page)
		if err != nil {
			return ns, err
		}
		if n.Count == 0 {
			return ns, nil // empty: none waits
		}
		ns = append(ns, n)
		if n.More == 0 {
			return ns, nil
		}
	}
	return ns, fmt.Errorf("nvmeof: the reservation notification log did not empty in %d reads", maxResvReads)
}

// WaitReservationNotice waits until a controller watching for reservation
// notifications (Config.WatchReservations) has some, and returns those
// that came since the last call, oldest first. It returns ctx's error, or
// the controller's once it has ended.
func (c *Controller) WaitReservationNotice(ctx context.Context) ([]nvme.ReservationNotice, error) {
	ev := &c.events
	var ns []nvme.ReservationNotice
	err := c.waitEvent(ctx, watchResv, func() bool {
		if len(ev.resv) == 0 {
			return false
		}
		ns, ev.resv = ev.resv, nil
		return true
	})
	return ns, err
}

// SetReservationNoticeMask sets which reservation notifications this
// controller does not record for the namespace: masked lists them, none
// records every one (the default).
func (n *Namespace) SetReservationNoticeMask(ctx context.Context, masked ...nvme.ReservationNoticeType) error {
	var v uint32
	for _, t := range masked {
		v |= 1 << t
	}
	_, err := n.c.admin.adminCmd(ctx, func(cmd nvme.Command) { nvme.NewAdmin(cmd, nvme.AdminSetFeatures, 0, n.ID, nvme.FeatResvMask, v) }, 0,
		"Set Features, Reservation Notification Mask", nil)
	if err != nil {
		return fmt.Errorf("namespace %d: %w", n.ID, err)
	}
	return nil
}

// ReservationNoticeMask returns the reservation notifications this
// controller does not record for the namespace.
func (n *Namespace) ReservationNoticeMask(ctx context.Context) ([]nvme.ReservationNoticeType, error) {
	res, err := n.c.admin.adminCmd(ctx, func(cmd nvme.Command) { nvme.NewAdmin(cmd, nvme.AdminGetFeatures, 0, n.ID, nvme.FeatResvMask, 0) }, 0,
		"Get Features, Reservation Notification Mask", nil)
	if err != nil {
		return nil, fmt.Errorf("namespace %d: %w", n.ID, err)
	}
	var ts []nvme.ReservationNoticeType
	for t := nvme.ResvNoticeRegPreempted; t <= nvme.ResvNoticePreempted; t++ {
		if res&(1<<t) != 0 {
			ts = append(ts, t)
		}
	}
	return ts, nil
}
