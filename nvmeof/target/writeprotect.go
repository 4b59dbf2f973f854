package target

import (
	"time"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// Namespace write protection (NVMe base 2.0 section 8.x, feature 84h), as
// Linux's nvmet offers it and one state more: a host sets a namespace write
// protected or not, or write protected until a power cycle (for a fabrics
// target, until it restarts: the state lives in memory), after which no Set
// Features changes it (Feature Not Changeable); "permanent" is not offered
// (NWPC bits 0 and 1). It holds for every host of the subsystem; the change is told to the
// controllers as a Namespace Attribute Changed notice, after which Linux's
// host reads NSATTR and turns the block device read-only. The state lives
// as long as the namespace, as nvmet's. Unlike nvmet, which refuses every
// command but Read and Flush, the reservation commands run (they change no
// data, and a fence must still be possible), and Namespace is Write
// Protected carries DNR: sending the write again cannot help. A write
// whose data was moving when protection was set is refused when it runs,
// and Set Features waits for those already running (nvmet does not: it
// checks before the data moves), so that none lands after it returns; if
// one is still running after 5 s (a Backend that hangs), the namespace is
// left as it was and Set Features fails with Command Interrupted, which a
// host may try again. A write that comes while protection is being turned
// on waits until it is decided, and is refused only if it was: a
// protection that fails refuses nothing.

// WriteProtected reports whether a host has set the namespace write
// protected (Set Features 84h), in either state: writes, Write Zeroes and
// Dataset Management fail with Namespace is Write Protected.
func (ns *Namespace) WriteProtected() bool { return ns.wp.Load() }

// WriteProtection returns the namespace's write protection state.
func (ns *Namespace) WriteProtection() nvme.WPState {
	switch {
	case ns.wpLocked.Load():
		return nvme.WPUntilPowerCycle
	case ns.wp.Load():
		return nvme.WPOn
	}
	return nvme.WPNone
}

// admitWrite counts a write of ns into those running, which protecting
// waits out, and returns StatusSuccess; or refuses it: the namespace is
// write protected. A write that comes while protection is being turned on
// waits until that is decided, for at most quiesceWait (a flush that
// hangs) or until done closes; then it is refused without DNR, so that the
// host tries again. StatusSuccess must be matched by ns.writing.Add(-1).
func (ns *Namespace) admitWrite(done <-chan struct{}) nvme.Status {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		// Counted before the checks, and settling read before wp, against
		// setWriteProtect's order (settling set, the count awaited, wp
		// set, settling cleared): a write that reads settling before it is
		// set was counted before protecting awaited the count; one that
		// reads it cleared reads wp as protecting left it.
		ns.writing.Add(1)
		ch := ns.settling.Load()
		if ch == nil && !ns.wp.Load() {
			return nvme.StatusSuccess
		}
		ns.writing.Add(-1)
		if ch == nil {
			if ns.wp.Load() {
				return nvme.StatusNSWriteProtected | nvme.DNR
			}
			continue // unprotected since
		}
		if timer == nil {
			timer = time.NewTimer(quiesceTimeout())
		}
		select {
		case <-*ch:
		case <-timer.C:
			return nvme.StatusCommandInterrupted
		case <-done:
			return nvme.StatusCommandInterrupted
		}
	}
}

// wpRefuses reports whether op may not run on a write-protected
// namespace: anything that changes its data. Reads, flushes and the
// reservation commands (which change no data) run.
func wpRefuses(op uint8) bool {
	switch op {
	case nvme.IOWrite, nvme.IOWriteZeroes, nvme.IODSM:
		return true
	}
	return false
}

// setWriteProtect serves Set Features 84h. Turning protection on first
// flushes what the namespace holds, as nvmet does, and fails (protection
// off) if it cannot. A namespace protected until a power cycle takes no
// other state (NVMe base 2.0: Feature Not Changeable).
func (c *controller) setWriteProtect(nsid, v uint32) (uint64, nvme.Status) {
	ns := c.sub.Namespace(nsid)
	if ns == nil {
		return 0, noNamespace(nsid)
	}
	s := nvme.WPState(v)
	if v > uint32(nvme.WPUntilPowerCycle) {
		// 3 (permanent) is not offered.
		return 0, nvme.StatusInvalidField | nvme.DNR
	}
	c.sub.wpMu.Lock()
	if ns.wpLocked.Load() {
		c.sub.wpMu.Unlock()
		return 0, nvme.StatusFeatureNotChangeable | nvme.DNR
	}
	switch s {
	case nvme.WPOn, nvme.WPUntilPowerCycle:
		// Writes that come meanwhile wait for the outcome (admitWrite);
		// the state reported (Identify, Get Features) is the old one
		// until then.
		ch := make(chan struct{})
		ns.settling.Store(&ch)
		settle := func() {
			ns.settling.Store(nil)
			close(ch)
		}
		if !awaitZero(&ns.writing) { // the writes already running end first
			settle()
			c.sub.wpMu.Unlock()
			c.t.logf("nvmeof: namespace %d: a write still running after %v: not protected", nsid, quiesceTimeout())
			return 0, nvme.StatusCommandInterrupted // no DNR: the host may try again
		}
		if st := c.flush(ns, " for write protection"); !st.OK() {
			settle() // a namespace protected before stays so
			c.sub.wpMu.Unlock()
			return 0, st
		}
		ns.wp.Store(true)
		ns.wpLocked.Store(s == nvme.WPUntilPowerCycle)
		settle()
	case nvme.WPNone:
		ns.wp.Store(false)
	}
	c.sub.mu.RLock()
	ctrls := c.sub.controllers()
	c.sub.mu.RUnlock()
	c.sub.wpMu.Unlock()
	for _, o := range ctrls {
		o.nsChanged(nsid)
	}
	return 0, nvme.StatusSuccess
}

// getWriteProtect serves Get Features 84h.
func (c *controller) getWriteProtect(nsid uint32) (uint64, nvme.Status) {
	ns := c.sub.Namespace(nsid)
	if ns == nil {
		return 0, noNamespace(nsid)
	}
	return uint64(ns.WriteProtection()), nvme.StatusSuccess
}
