package nvmeof

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
)

// ErrNoWatch is WaitNamespaceChange's error on a controller that does not
// watch for namespace changes: HostConfig.WatchNamespaces was not set, or
// the controller does not announce Namespace Attribute Notices (OAES).
var ErrNoWatch = errors.New("nvmeof: not watching for namespace changes")

// hostEvents is a Controller's watch for Namespace Attribute Changed
// notices (HostConfig.WatchNamespaces): one Asynchronous Event Request
// kept outstanding on the admin queue, and the NSIDs the Changed
// Namespace List gave since WaitNamespaceChange last returned.
type hostEvents struct {
	wg     sync.WaitGroup
	mu     sync.Mutex
	ids    []uint32
	all    bool          // the list overflowed: any namespace may have changed
	signal chan struct{} // capacity 1: something is pending
}

// watchNamespaces enables the notice and starts the goroutine that keeps
// an AER outstanding; Close (or the admin queue's end) stops it.
func (c *Controller) watchNamespaces(ctx context.Context) error {
	if _, err := c.SetFeatures(ctx, FeatAsyncEvent, aecNSAttr); err != nil {
		return err
	}
	c.events.signal = make(chan struct{}, 1)
	c.events.wg.Add(1)
	go c.eventLoop()
	return nil
}

// eventLoop posts an AER, and when it completes with the notice reads the
// Changed Namespace List (which unmasks the next notice) and posts another.
func (c *Controller) eventLoop() {
	defer c.events.wg.Done()
	ev := &c.events
	log := make([]byte, 4*maxChangedNS)
	for {
		// Not bounded: the AER is outstanding until an event or the
		// queue's end (Close), which wakes this wait.
		res, err := c.admin.standingCmd(context.Background(), func(cmd Command) { NewAdmin(cmd, AdminAER, 0, 0, 0, 0) },
			"Asynchronous Event Request")
		if err != nil {
			return // the queue ended, or the controller refused AERs
		}
		if res&0xffffff != aerNSChanged {
			continue // another event (none is enabled): ask again
		}
		if err := c.GetLogPage(context.Background(), LogChangedNS, 0xffffffff, 0, log); err != nil {
			return
		}
		ev.mu.Lock()
		if binary.LittleEndian.Uint32(log) == 0xffffffff {
			ev.all = true
		}
		for i := 0; i < len(log) && !ev.all; i += 4 {
			id := binary.LittleEndian.Uint32(log[i:])
			if id == 0 {
				break
			}
			ev.ids = append(ev.ids, id)
		}
		ev.mu.Unlock()
		select {
		case ev.signal <- struct{}{}:
		default:
		}
	}
}

// WaitNamespaceChange waits until the controller reports that namespaces
// changed (with HostConfig.WatchNamespaces) and returns the NSIDs it
// listed since the last call, nil when it listed more than its log holds
// (rescan them all: Identify CNS 2). It returns ctx's error, or the
// controller's once it has ended.
func (c *Controller) WaitNamespaceChange(ctx context.Context) ([]uint32, error) {
	ev := &c.events
	if ev.signal == nil {
		return nil, ErrNoWatch
	}
	for {
		ev.mu.Lock()
		if ev.all || len(ev.ids) > 0 {
			ids := ev.ids
			if ev.all {
				ids = nil
			}
			ev.ids, ev.all = nil, false
			ev.mu.Unlock()
			return ids, nil
		}
		ev.mu.Unlock()
		select {
		case <-ev.signal:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.admin.dead:
			return nil, c.admin.err
		}
	}
}
