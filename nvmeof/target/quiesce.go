package target

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// A host that loses its connection to a controller, or resets it, sends
// the commands it had outstanding again on a new association. One of them
// may still be running in a Backend on the old controller's queue (that
// queue's goroutine sees the end only when the Backend returns), and would
// then land after the new copy and after whatever the host wrote next. So
// a host's new controller on a subsystem waits, in its Connect, until the
// host's ended controllers there have no command but Reads in a Backend (a
// stale Read changes nothing, and its data goes nowhere): the rule
// NVMe 2.1's Command Quiesce Time asks hosts to keep, kept here because
// Linux's host (6.1) does not. A Backend that takes longer than
// quiesceWait gets the Connect Controller Busy, without DNR, which a
// reconnecting host tries again later.
//
// A host with another live controller (a second path) does not connect
// again: it sends the command down that path. So a command that changes
// data waits too, on any controller of the host, for the host's ended
// controllers (at most quiesceWait, then it runs: only the stale copy's
// order is at stake, not the command's own data).
//
// A reset in place (CC.EN 1 → 0 on the same admin queue) clears CSTS.RDY
// only once the dropped I/O queues' commands have left the Backends, for
// the same reason. What the target cannot wait for is a controller it
// does not know has ended: a path cut without a FIN lives on until its
// keep-alive timeout, and a write the host sends down another path before
// then is not held back (NVMe 2.1's Command Quiesce Time, on the host's
// side, covers that case).

// quiesceWait bounds how long a Connect waits for the host's ended
// controllers, and the other waits here (nanoseconds; tests change it
// while targets run, hence atomic).
var quiesceWait atomic.Int64

func init() { quiesceWait.Store(int64(5 * time.Second)) }

// quiesceTimeout returns quiesceWait.
func quiesceTimeout() time.Duration { return time.Duration(quiesceWait.Load()) }

// changes reports whether an I/O command may change what the host reads:
// every command but a Read, which a stale copy may finish at any time.
func changes(op uint8) bool { return op != nvme.IORead }

// enter counts a command of an I/O queue into the Backend, and into the
// commands that change data if change; false: the controller has ended,
// and the command must not run.
func (c *controller) enter(change bool) bool {
	c.inflight.Add(1)
	if change {
		c.changing.Add(1)
	}
	if c.ended.Load() {
		c.leave(change)
		return false
	}
	return true
}

// leave counts a command out of the Backend. Ended, the controller is
// quiet once the last command that changes data has left.
func (c *controller) leave(change bool) {
	if change && c.changing.Add(-1) == 0 && c.ended.Load() {
		c.quiesced()
	}
	c.inflight.Add(-1)
}

// endQuiesce marks the controller ended (shutdown): from now on no command
// enters a Backend, and quiet closes once the last that changes data has
// left.
func (c *controller) endQuiesce() {
	if c.sub != nil {
		c.sub.mu.Lock()
		if c.sub.ending == nil {
			c.sub.ending = map[*controller]struct{}{}
		}
		c.sub.ending[c] = struct{}{}
		c.sub.endingN.Store(int64(len(c.sub.ending)))
		c.sub.mu.Unlock()
	}
	c.ended.Store(true)
	if c.changing.Load() == 0 {
		c.quiesced()
	}
}

// quiesced closes quiet, once, and takes the controller off the
// subsystem's list of ended controllers.
func (c *controller) quiesced() {
	c.quietOnce.Do(func() {
		close(c.quietCh())
		if c.sub != nil {
			c.sub.mu.Lock()
			delete(c.sub.ending, c)
			c.sub.endingN.Store(int64(len(c.sub.ending)))
			c.sub.mu.Unlock()
		}
	})
}

func (c *controller) quietCh() chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.quiet == nil {
		c.quiet = make(chan struct{})
	}
	return c.quiet
}

// errNotQuiet: a host's ended controller still has a command that changes
// data in a Backend.
var errNotQuiet = errors.New("a command of the host's ended controller is still running")

// awaitQuiet waits until host's ended controllers on sub, but self, have
// no command that changes data in a Backend, for at most quiesceWait, or
// until done closes (the target closing). waited says whether it had to.
func awaitQuiet(done <-chan struct{}, sub *Subsystem, hostNQN string, hostID [16]byte, self *controller) (waited bool, err error) {
	var ended []*controller
	sub.mu.RLock()
	for c := range sub.ending {
		if c != self && c.hostNQN == hostNQN && c.hostID == hostID {
			ended = append(ended, c)
		}
	}
	sub.mu.RUnlock()
	if len(ended) == 0 {
		return false, nil
	}
	timer := time.NewTimer(quiesceTimeout())
	defer timer.Stop()
	for _, c := range ended {
		select {
		case <-c.quietCh():
			continue
		default:
			waited = true
		}
		select {
		case <-c.quietCh():
		case <-timer.C:
			return true, errNotQuiet
		case <-done:
			return true, errNotQuiet
		}
	}
	return waited, nil
}

// awaitQuietWrite holds a command that changes data while the host has
// ended controllers with such commands in a Backend.
func (c *controller) awaitQuietWrite() {
	if c.sub == nil || c.sub.endingN.Load() == 0 {
		return
	}
	if _, err := awaitQuiet(c.t.done(), c.sub, c.hostNQN, c.hostID, c); err != nil {
		c.t.logf("nvmeof: controller %d: %v after %v: running a write anyway", c.id, err, quiesceTimeout())
	}
}

// awaitIdle waits, for at most quiesceWait, until no command of the
// controller's I/O queues is in a Backend: after a reset in place, those
// of the queues it dropped and of any that ended before it. None starts
// meanwhile (CC.EN is 0), so a poll does.
func (c *controller) awaitIdle() {
	if !awaitZero(&c.inflight) {
		c.t.logf("nvmeof: controller %d: reset: a command still in a Backend after %v", c.id, quiesceTimeout())
	}
}

// awaitZero waits until n is 0, for at most quiesceWait; false if it is
// not. Its callers wait for commands that no longer start, and seldom (a
// reset, protecting a namespace), so a poll does.
func awaitZero(n *atomic.Int64) bool {
	for end := time.Now().Add(quiesceTimeout()); n.Load() > 0; {
		if time.Now().After(end) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// done is closed when the target closes (nil for a Target not made by
// New: tests).
func (t *Target) done() <-chan struct{} {
	if t.ctx == nil {
		return nil
	}
	return t.ctx.Done()
}
