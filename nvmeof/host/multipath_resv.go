package host

import (
	"context"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// PathNotice is a reservation notification as a Multipath's path received
// it: each path's controller records its own page of each notification.
type PathNotice struct {
	Addr string // the path's address
	nvme.ReservationNotice
}

// mpathResv is what a Multipath's paths' reservation watches gathered
// (under Multipath.mu).
type mpathResv struct {
	notes   []PathNotice
	changed chan struct{} // closed, and replaced, when notes grow or the Multipath closes
}

// watchResv follows a path's controller c's reservation notifications
// (Config.WatchReservations) until it ends; the path's ANA watch
// takes care of the ending.
func (m *Multipath) watchResv(p *mpath, c *Controller) {
	defer m.wg.Done()
	for {
		ns, err := c.WaitReservationNotice(context.Background()) // ends with the controller
		if err != nil {
			return
		}
		m.mu.Lock()
		for _, n := range ns {
			m.resv.notes = append(m.resv.notes, PathNotice{p.addr, n})
		}
		m.wakeResvLocked()
		m.mu.Unlock()
	}
}

// wakeResvLocked wakes WaitReservationNotice's callers (m.mu held).
func (m *Multipath) wakeResvLocked() {
	if m.resv.changed != nil {
		close(m.resv.changed)
	}
	m.resv.changed = make(chan struct{})
}

// WaitReservationNotice waits until a path (watching reservation
// notifications: MultipathConfig's Config.WatchReservations) has
// some, and returns those every path received since the last call, in
// the order they came: how a fenced cluster node learns it was fenced,
// from any path that still reaches the subsystem. It returns ctx's error,
// ErrNoWatch without the watch, ErrClosed once the Multipath is closed.
func (m *Multipath) WaitReservationNotice(ctx context.Context) ([]PathNotice, error) {
	if !m.cfg.WatchReservations {
		return nil, ErrNoWatch
	}
	for {
		m.mu.Lock()
		ns, closed := m.resv.notes, m.closed
		if m.resv.changed == nil {
			m.resv.changed = make(chan struct{})
		}
		changed := m.resv.changed
		m.resv.notes = nil
		m.mu.Unlock()
		switch {
		case len(ns) > 0:
			return ns, nil
		case closed:
			return nil, ErrClosed
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
