package target

import (
	"context"
	"encoding/binary"
	"slices"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// Asynchronous events: a namespace added to a subsystem while hosts are
// connected raises a Namespace Attribute Changed notice on each of its
// controllers that enabled it (Async Event Configuration bit 8), completing
// a held Asynchronous Event Request, as Linux's nvmet does. The host then
// reads the Changed Namespace List (log page 04h) and rescans.

// discChanged raises a Discovery Log Page Change notice on the discovery
// controllers whose log changed, that enabled it and have read the log
// since their last one, as Linux's nvmet does when a subsystem or host
// access changes (nvmet_port_disc_changed): those that came through port
// only or, with port nil, through any port that exposes subsystem nqn.
// Linux's host reports it to udev (NVME_AEN=0x70f002), whose rules run
// "nvme connect-all". The change itself moved the log's generation
// counter, under t.mu with the change, so that a host that reads the log
// in pieces sees that it changed between them.
func (t *Target) discChanged(only *Port, nqn string) {
	t.mu.Lock()
	var ctrls []*controller
	for _, c := range t.ctrls {
		p := c.admin.port
		if c.discovery() && (only == p || only == nil && p.serves(nqn)) {
			ctrls = append(ctrls, c)
		}
	}
	t.mu.Unlock()
	for _, c := range ctrls {
		c.mu.Lock()
		raise := !c.dead && c.aec&nvme.AECDiscChange != 0 && !c.discMasked
		if raise {
			c.discMasked = true
			c.events = append(c.events, nvme.AERDiscChanged)
		}
		c.mu.Unlock()
		if raise {
			c.admin.kick()
		}
	}
}

// discLogRead unmasks the discovery notice: the log was read without
// Retain Asynchronous Event.
func (c *controller) discLogRead(rae bool) {
	if !rae {
		c.mu.Lock()
		c.discMasked = false
		c.mu.Unlock()
	}
}

// nsChanged records that namespace id appeared and raises the notice if
// the host enabled it and has read the log since the last one (a notice
// is masked until then, as in Linux's nvmet).
func (c *controller) nsChanged(id uint32) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	switch {
	case c.changedNS == nil && c.nsOverflow:
	case slices.Contains(c.changedNS, id): // removed and added again: listed once, as nvmet
	case len(c.changedNS) == nvme.MaxChangedNS:
		c.changedNS, c.nsOverflow = nil, true
	default:
		c.changedNS = append(c.changedNS, id)
	}
	raise := c.aec&nvme.AECNSAttr != 0 && !c.nsMasked
	if raise {
		c.nsMasked = true
		c.events = append(c.events, nvme.AERNSChanged)
	}
	c.mu.Unlock()
	if raise {
		c.admin.kick()
	}
}

// takeEvent returns an event waiting for an AER, if any.
func (c *controller) takeEvent() (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.events) == 0 {
		return 0, false
	}
	ev := c.events[0]
	c.events = c.events[1:]
	return uint64(ev), true
}

// changedNSLog puts the Changed Namespace List in log (4 KiB) and empties
// it; a read without Retain Asynchronous Event (rae) unmasks the notice.
func (c *controller) changedNSLog(log []byte, rae bool) {
	clear(log)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nsOverflow {
		binary.LittleEndian.PutUint32(log, nvme.NSIDAll)
	}
	for i, id := range c.changedNS {
		binary.LittleEndian.PutUint32(log[4*i:], id)
	}
	c.changedNS, c.nsOverflow = nil, false
	if !rae {
		c.nsMasked = false
	}
}

// kick wakes the admin queue's goroutine to deliver events (deliver).
func (q *queue) kick() {
	q.kickMu.Lock()
	q.kicked = true
	if q.kickCancel != nil {
		q.kickCancel()
	}
	q.kickMu.Unlock()
}

// takeKick reports whether a kick came since it last looked.
func (q *queue) takeKick() bool {
	q.kickMu.Lock()
	defer q.kickMu.Unlock()
	k := q.kicked
	q.kicked = false
	return k
}

// kickable returns the context an admin queue waits for completions in:
// parent, also ended by a kick, at once if one came since takeKick.
func (q *queue) kickable(parent context.Context) (context.Context, context.CancelFunc) {
	q.kickMu.Lock()
	defer q.kickMu.Unlock()
	ctx, cancel := context.WithCancel(parent)
	q.kickCancel = cancel
	if q.kicked {
		cancel()
	}
	return ctx, func() {
		q.kickMu.Lock()
		q.kickCancel = nil
		q.kickMu.Unlock()
		cancel()
	}
}

// abandon frees the slot of a held AER without answering it (a reset).
func (q *queue) abandon(idx int) {
	s := &q.slots[idx]
	q.active--
	s.busy = false
	q.free = append(q.free, idx)
}

// deliver completes held AERs with the events waiting for them; false
// ends the queue.
func (q *queue) deliver() bool {
	c := q.ctrl
	for len(c.heldAER) > 0 {
		ev, ok := c.takeEvent()
		if !ok {
			return true
		}
		idx := c.heldAER[0]
		c.heldAER = c.heldAER[1:]
		if !q.respond(idx, ev, nvme.StatusSuccess, nil) {
			return false
		}
	}
	return true
}
