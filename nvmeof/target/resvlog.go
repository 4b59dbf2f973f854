package target

import (
	"encoding/binary"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// Reservation notifications (NVMe base 2.0: the Reservation Notification
// log page and the Reservation Notification Mask feature), as Linux's
// nvmet raises them (pr.c): a host learns that a reservation command of
// another host took something from it. Each controller keeps a queue of
// Reservation Notification log pages (80h), one notification a page, read
// one page per Get Log Page; a new page raises a Reservation Log Page
// Available notice (an AEN of type I/O command specific status). Which
// notifications a controller records is set per namespace with the
// Reservation Notification Mask feature (82h).
//
// When (nvmet's choices, which follow the specification):
//   - Registration Preempted: to the controllers of each host whose
//     registration a Preempt (or Preempt and Abort) of another host ended.
//   - Reservation Released: to the controllers of the other registrants,
//     when the holder releases a reservation of a registrants-only or
//     all-registrants type, when the holder of a registrants-only type
//     unregisters, and when a Preempt changes the reservation's type.
//   - Reservation Preempted: to the controllers of the other registrants,
//     when a Clear ends every registration.
//
// Unlike nvmet: the mask is each controller's own, where nvmet's is the
// namespace's for every controller (one host's setting should not silence
// another's); and a notice is masked until the host reads the log without
// Retain Asynchronous Event, as the specification has it for every event,
// where nvmet raises one for each page.

// noteLocked records notification t to the controllers of hosts (r.mu
// held), for change to deliver once the change stands.
func (r *resv) noteLocked(t nvme.ReservationNoticeType, hosts ...[16]byte) {
	if len(hosts) > 0 {
		r.pending = append(r.pending, resvNote{t, hosts})
	}
}

// othersLocked returns the registrants other than host (r.mu held).
func (r *resv) othersLocked(host [16]byte) [][16]byte {
	var hs [][16]byte
	for _, h := range r.order {
		if h != host {
			hs = append(hs, h)
		}
	}
	return hs
}

// masked reports whether controller c masked notifications of type t
// for the namespace.
func (r *resv) masked(c *controller, t nvme.ReservationNoticeType) bool {
	r.maskMu.Lock()
	defer r.maskMu.Unlock()
	return r.masks[c]&(1<<t) != 0
}

// resvNotify delivers notification t for namespace ns to the
// subsystem's controllers of hosts that did not mask it (ns.resv.mu held:
// the reservation change that owes it).
func (s *Subsystem) resvNotify(ns *Namespace, t nvme.ReservationNoticeType, hosts [][16]byte) {
	s.mu.RLock()
	ctrls := s.controllers()
	s.mu.RUnlock()
	for _, c := range ctrls {
		for _, h := range hosts {
			if c.hostID == h {
				if !ns.resv.masked(c, t) {
					c.resvNotice(ns.ID, t)
				}
				break
			}
		}
	}
}

// resvLogPage is a queued Reservation Notification log page.
type resvLogPage struct {
	count uint64
	t     nvme.ReservationNoticeType
	nsid  uint32
}

// resvNotice records a notification, and raises the notice unless it is
// masked until the log is read.
func (c *controller) resvNotice(nsid uint32, t nvme.ReservationNoticeType) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	if c.resvCount++; c.resvCount == 0 {
		c.resvCount = 1 // 0 is the empty page
	}
	if len(c.resvLog) == resvLogQueue {
		// Lost: the last page kept takes the new count, so that the
		// host sees the gap before it (as nvmet counts the lost).
		c.resvLog[len(c.resvLog)-1].count = c.resvCount
	} else {
		c.resvLog = append(c.resvLog, resvLogPage{c.resvCount, t, nsid})
	}
	raise := !c.resvMasked
	if raise {
		c.resvMasked = true
		c.events = append(c.events, nvme.AERResvLog)
	}
	c.mu.Unlock()
	if raise {
		c.admin.kick()
	}
}

// resvLogRead takes the oldest page (an empty one if none waits) into a
// new log; a read without Retain Asynchronous Event unmasks the notice.
func (c *controller) resvLogRead(rae bool) []byte {
	log := make([]byte, nvme.ResvNoticeSize)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !rae {
		c.resvMasked = false
	}
	if len(c.resvLog) == 0 {
		return log
	}
	p := c.resvLog[0]
	c.resvLog = c.resvLog[1:]
	if len(c.resvLog) == 0 {
		c.resvLog = nil
	}
	binary.LittleEndian.PutUint64(log, p.count)
	log[8], log[9] = byte(p.t), byte(min(len(c.resvLog), 255))
	binary.LittleEndian.PutUint32(log[12:], p.nsid)
	return log
}

// setResvMask serves Set Features, Reservation Notification Mask: for
// namespace nsid, or every namespace with reservations (FFFFFFFFh).
func (c *controller) setResvMask(nsid, v uint32) nvme.Status {
	if v&^nvme.ResvMaskAll != 0 {
		return nvme.StatusInvalidField | nvme.DNR
	}
	var nss []*Namespace
	if nsid == nvme.NSIDAll {
		for _, ns := range c.sub.Namespaces() {
			if ns.resv != nil {
				nss = append(nss, ns)
			}
		}
	} else {
		ns, st := c.resvNamespace(nsid)
		if !st.OK() {
			return st
		}
		nss = []*Namespace{ns}
	}
	for _, ns := range nss {
		r := ns.resv
		r.maskMu.Lock()
		if r.masks == nil {
			r.masks = map[*controller]uint32{}
		}
		if v == 0 {
			delete(r.masks, c)
		} else {
			r.masks[c] = v
		}
		r.maskMu.Unlock()
	}
	c.mu.Lock()
	dead := c.dead
	c.mu.Unlock()
	if dead { // ended meanwhile, perhaps after its end forgot its masks
		c.forgetResvMasks()
	}
	return nvme.StatusSuccess
}

// getResvMask serves Get Features, Reservation Notification Mask, of one
// namespace with reservations (FFFFFFFFh is not one).
func (c *controller) getResvMask(nsid uint32) (uint64, nvme.Status) {
	ns, st := c.resvNamespace(nsid)
	if !st.OK() {
		return 0, st
	}
	ns.resv.maskMu.Lock()
	defer ns.resv.maskMu.Unlock()
	return uint64(ns.resv.masks[c]), nvme.StatusSuccess
}

// forgetResvMasks drops c's masks from every namespace: a reset, or the
// controller's end. A namespace removed takes its masks with it, so a
// new one with its NSID starts with none.
func (c *controller) forgetResvMasks() {
	for _, ns := range c.sub.Namespaces() {
		if r := ns.resv; r != nil {
			r.maskMu.Lock()
			delete(r.masks, c)
			r.maskMu.Unlock()
		}
	}
}

// resvLogQueue is how many pages a controller keeps, as nvmet's.
const resvLogQueue = 64
