package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// ErrNoWatch is WaitNamespaceChange's error on a controller that does not
// watch for namespace changes (Config.WatchNamespaces was not set, or
// the controller does not announce Namespace Attribute Notices in OAES),
// and the other Wait methods' on one that does not watch what they wait
// for (its discovery log, ANA states, reservation notifications).
var ErrNoWatch = errors.New("nvmeof: not watching for changes")

// events is a Controller's watch for Namespace Attribute Changed
// notices (Config.WatchNamespaces), ANA Change notices (WatchANA) or,
// on a discovery controller, Discovery Log Page Change notices
// (WatchDiscovery): one Asynchronous Event Request kept outstanding on
// the admin queue, and what the log each notice names gave since its
// Wait call last returned: the NSIDs of the Changed Namespace List, the
// ANA log, or the discovery log.
type events struct {
	wg     sync.WaitGroup
	mu     sync.Mutex
	aec    uint32 // the notices enabled
	ids    []uint32
	all    bool // the list overflowed: any namespace may have changed
	disc   []nvme.DiscoveryEntry
	discOK bool // disc is new
	ana    nvme.ANALog
	anaOK  bool                     // ana is new
	resv   []nvme.ReservationNotice // Config.WatchReservations: not taken yet
	err    error                    // why the watch ended, if it did while the queue lives
	// changed is closed, and replaced, whenever something comes: every
	// waiter looks again, each for its own kind of notice (one wake-up
	// token shared by the kinds was taken by the wrong waiter).
	changed chan struct{}
}

// watch enables the notices aec and starts the goroutine that keeps an
// AER outstanding; Close (or the admin queue's end) stops it.
func (c *Controller) watch(ctx context.Context, aec uint32) error {
	if _, err := c.SetFeatures(ctx, nvme.FeatAsyncEvent, aec&^watchResv); err != nil {
		return err
	}
	c.events.aec = aec
	c.events.changed = make(chan struct{})
	c.events.wg.Add(1)
	go c.eventLoop()
	return nil
}

// eventLoop posts an AER, and when it completes with the notice reads the
// log it names (which unmasks the next notice) and posts another.
func (c *Controller) eventLoop() {
	defer c.events.wg.Done()
	ev := &c.events
	log := make([]byte, 4*nvme.MaxChangedNS)
	for {
		// Not bounded: the AER is outstanding until an event or the
		// queue's end (Close), which wakes this wait.
		res, err := c.admin.standingCmd(context.Background(), func(cmd nvme.Command) { nvme.NewAdmin(cmd, nvme.AdminAER, 0, 0, 0, 0) },
			"Asynchronous Event Request")
		if err != nil {
			ev.end(err) // the queue ended, or the controller refused AERs
			return
		}
		if ev.aec&nvme.AECANAChange != 0 && res&0xffffff == nvme.AERANAChanged {
			l, err := c.ANALog(context.Background()) // unmasks the next notice
			if err != nil {
				ev.end(fmt.Errorf("nvmeof: watching ANA states: %w", err))
				return
			}
			ev.mu.Lock()
			ev.ana, ev.anaOK = l, true
			ev.wakeLocked()
			ev.mu.Unlock()
			continue
		}
		if ev.aec&watchResv != 0 && res&0xffffff == nvme.AERResvLog {
			ns, err := c.ReservationNotices(context.Background()) // unmasks the next notice
			if len(ns) > 0 {                                      // taken from the target: kept, even if a later read failed
				ev.mu.Lock()
				ev.resv = append(ev.resv, ns...)
				ev.wakeLocked()
				ev.mu.Unlock()
			}
			if err != nil {
				ev.end(fmt.Errorf("nvmeof: watching reservation notifications: %w", err))
				return
			}
			continue
		}
		if ev.aec == nvme.AECDiscChange && res&0xffffff == nvme.AERDiscChanged {
			ents, err := c.DiscoveryLog(context.Background())
			if err != nil {
				ev.end(fmt.Errorf("nvmeof: watching the discovery log: %w", err))
				return
			}
			ev.mu.Lock()
			ev.disc, ev.discOK = ents, true
			ev.wakeLocked()
			ev.mu.Unlock()
			continue
		}
		if ev.aec&nvme.AECNSAttr == 0 || res&0xffffff != nvme.AERNSChanged {
			continue // another event (none is enabled): ask again
		}
		if err := c.GetLogPage(context.Background(), nvme.LogChangedNS, nvme.NSIDAll, 0, log); err != nil {
			ev.end(fmt.Errorf("nvmeof: watching namespaces: %w", err))
			return
		}
		ev.mu.Lock()
		if binary.LittleEndian.Uint32(log) == nvme.NSIDAll {
			ev.all = true
		}
		for i := 0; i < len(log) && !ev.all; i += 4 {
			id := binary.LittleEndian.Uint32(log[i:])
			if id == 0 {
				break
			}
			ev.ids = append(ev.ids, id)
		}
		ev.wakeLocked()
		ev.mu.Unlock()
	}
}

// end records why the watch stopped, for the Wait calls.
func (ev *events) end(err error) {
	ev.mu.Lock()
	ev.err = err
	ev.wakeLocked()
	ev.mu.Unlock()
}

// wakeLocked wakes every waiter (ev.mu held).
func (ev *events) wakeLocked() {
	close(ev.changed)
	ev.changed = make(chan struct{})
}

// WaitNamespaceChange waits until the controller reports that namespaces
// changed (with Config.WatchNamespaces) and returns the NSIDs it
// listed since the last call, nil when it listed more than its log holds
// (rescan them all: Identify CNS 2). It returns ctx's error, or the
// controller's once it has ended.
func (c *Controller) WaitNamespaceChange(ctx context.Context) ([]uint32, error) {
	ev := &c.events
	var ids []uint32
	err := c.waitEvent(ctx, nvme.AECNSAttr, func() bool {
		if !ev.all && len(ev.ids) == 0 {
			return false
		}
		if !ev.all {
			ids = ev.ids
		}
		ev.ids, ev.all = nil, false
		return true
	})
	return ids, err
}

// WaitDiscoveryChange waits until a discovery controller watching its log
// (Config.WatchDiscovery) reports that the log changed, and returns
// the log as read then: the subsystems this host may reach now. It
// returns ctx's error, or the controller's once it has ended.
func (c *Controller) WaitDiscoveryChange(ctx context.Context) ([]nvme.DiscoveryEntry, error) {
	ev := &c.events
	var ents []nvme.DiscoveryEntry
	err := c.waitEvent(ctx, nvme.AECDiscChange, func() bool {
		if !ev.discOK {
			return false
		}
		ents, ev.disc, ev.discOK = ev.disc, nil, false
		return true
	})
	return ents, err
}

// WaitANAChange waits until a controller watching its ANA states
// (Config.WatchANA) reports that they changed, and returns its ANA
// log as read then. It returns ctx's error, or the controller's once it
// has ended.
func (c *Controller) WaitANAChange(ctx context.Context) (nvme.ANALog, error) {
	ev := &c.events
	var l nvme.ANALog
	err := c.waitEvent(ctx, nvme.AECANAChange, func() bool {
		if !ev.anaOK {
			return false
		}
		l, ev.ana, ev.anaOK = ev.ana, nvme.ANALog{}, false
		return true
	})
	return l, err
}

// waitEvent waits until take, called with the events' mutex held, finds
// what the watch for notice aec gathered; or returns why the watch ended.
func (c *Controller) waitEvent(ctx context.Context, aec uint32, take func() bool) error {
	ev := &c.events
	if ev.aec&aec == 0 { // aec is set before the controller is returned, and not after
		return ErrNoWatch
	}
	for {
		ev.mu.Lock()
		ok, err, changed := take(), ev.err, ev.changed
		ev.mu.Unlock()
		if ok {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.admin.dead:
			return c.admin.err
		}
	}
}
