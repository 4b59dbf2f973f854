package target

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// controller is a controller of the dynamic model: created by an admin
// queue's Connect (with a fresh controller ID), joined by I/O queues whose
// Connect names that ID, ended by its admin queue's end, a keep-alive
// timeout or the target's Close.
type controller struct {
	t       *Target
	id      uint16
	sub     *Subsystem // nil: the discovery controller
	hostNQN string
	hostID  [16]byte
	admin   *queue
	heldAER []int // slots of held Asynchronous Event Requests; the admin queue's goroutine owns it

	lastSeen atomic.Int64  // nanoseconds since the target started, at the last command
	kato     atomic.Uint32 // ms, 0: no keep-alive timeout

	mu       sync.Mutex
	cc, csts uint32
	ioq      map[uint16]*queue
	nrQueues int // I/O queues granted by Set Features, 0 until then
	aec      uint32
	// wcOff: the host turned the volatile write cache off (Set Features
	// 06h), so that every write this controller runs is durable when it
	// completes. Read by the I/O queues on each write, hence atomic.
	wcOff atomic.Bool
	// Events (events.go): the Changed Namespace List, whether the notice
	// is masked until the host reads it, and events waiting for an AER.
	changedNS  []uint32
	nsOverflow bool
	nsMasked   bool
	discMasked bool // the discovery log notice, until the log is read
	anaMasked  bool // the ANA Change notice, until the ANA log is read
	// Reservation notifications (resvlog.go): the pages not read yet,
	// the last page's count, and the notice's mask until the log is read
	// (the host's masks are the namespaces').
	resvLog    []resvLogPage
	resvCount  uint64
	resvMasked bool
	events     []uint32
	kaStop     chan struct{}
	kaPoke     chan struct{} // setKATO tells the keep-alive goroutine
	dead       bool
	shstDone   time.Time // testShutdownLag: when CSTS.SHST turns done

	// Commands in a Backend, those of them that may change what the host
	// reads (all but Reads), and the end that the host's new controllers
	// wait out (quiesce.go).
	inflight  atomic.Int64
	changing  atomic.Int64
	ended     atomic.Bool
	quiet     chan struct{} // closed once ended with no changing command in a Backend
	quietOnce sync.Once
}

func (c *controller) discovery() bool { return c.sub == nil }

func (c *controller) touch() { c.lastSeen.Store(int64(time.Since(c.t.start))) }

func (c *controller) ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cc&nvme.CCEnable != 0 && c.csts&nvme.CSTSReady != 0 && !c.dead
}

// maxQueues is how many I/O queues the controller allows.
func (c *controller) maxQueues() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nrQueues > 0 {
		return c.nrQueues
	}
	return c.t.cfg.MaxIOQueues
}

// queueGone is called by a queue's goroutine as it ends: an admin queue
// takes the controller with it, an I/O queue only itself.
func (c *controller) queueGone(q *queue, why error) {
	if q == c.admin {
		c.shutdown(fmt.Sprintf("admin queue ended (%v)", why))
		return
	}
	c.mu.Lock()
	if c.ioq[q.qid] == q {
		delete(c.ioq, q.qid)
	}
	c.mu.Unlock()
}

// shutdown ends the controller and every queue of it.
func (c *controller) shutdown(why string) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead = true
	if c.kaStop != nil {
		close(c.kaStop)
	}
	var qs []*queue // the I/O queues first: they end on their own goroutines (queue.end)
	for _, q := range c.ioq {
		qs = append(qs, q)
	}
	qs = append(qs, c.admin)
	c.mu.Unlock()
	c.endQuiesce()
	c.t.removeController(c)
	if c.sub != nil {
		c.sub.detach(c)
		c.forgetResvMasks()
	}
	c.t.logf("nvmeof: controller %d (%s, host %s) ended: %s", c.id, c.nqn(), c.hostNQN, why)
	for _, q := range qs {
		q.end()
	}
}

// stopKeepAlive stops the keep-alive goroutine (Target.Close).
func (c *controller) stopKeepAlive() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kaStop != nil && !c.dead {
		close(c.kaStop)
		c.kaStop = nil
	}
}

func (c *controller) nqn() string {
	if c.sub == nil {
		return nvme.DiscoveryNQN
	}
	return c.sub.NQN
}

// startKeepAlive starts the keep-alive timer's goroutine, once.
func (c *controller) startKeepAlive() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kaStop != nil || c.dead {
		return
	}
	t := c.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	stop := make(chan struct{})
	c.kaStop = stop
	c.kaPoke = make(chan struct{}, 1)
	t.wg.Add(1)
	go c.keepAlive(stop, c.kaPoke)
}

// keepAlive ends the controller when no command has come for KATO
// (traffic based: any command on any of its queues counts, as CTRATT.TBKAS
// says). It checks every KATO/4, so a timeout is noticed within 1.25 KATO.
func (c *controller) keepAlive(stop, poke chan struct{}) {
	defer c.t.wg.Done()
	period := func() time.Duration {
		kato := time.Duration(c.kato.Load()) * time.Millisecond
		if kato == 0 {
			return time.Hour // no timeout: nothing to check until a KATO is set (and pokes)
		}
		return max(kato/4, 10*time.Millisecond)
	}
	cur := period()
	tick := time.NewTicker(cur)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-poke: // KATO changed: check at its period from now
			cur = period()
			tick.Reset(cur)
			continue
		case <-tick.C:
		}
		kato := time.Duration(c.kato.Load()) * time.Millisecond
		if kato == 0 {
			continue
		}
		if idle := time.Since(c.t.start) - time.Duration(c.lastSeen.Load()); idle > kato {
			c.shutdown(fmt.Sprintf("keep alive timeout: nothing for %v (KATO %v)", idle.Round(time.Millisecond), kato))
			return
		}
		if p := period(); p != cur {
			cur = p
			tick.Reset(p)
		}
	}
}

// setKATO sets the keep-alive timeout in ms.
func (c *controller) setKATO(ms uint32) {
	c.touch()
	c.kato.Store(ms)
	if ms != 0 {
		c.startKeepAlive()
	}
	c.mu.Lock()
	poke := c.kaPoke
	c.mu.Unlock()
	if poke != nil {
		select {
		case poke <- struct{}{}:
		default:
		}
	}
}

// addIOQueue joins q to the controller.
func (c *controller) addIOQueue(q *queue) (uint64, nvme.Status) {
	c.mu.Lock()
	defer c.mu.Unlock()
	limit := c.t.cfg.MaxIOQueues
	if c.nrQueues > 0 {
		limit = c.nrQueues
	}
	switch {
	case c.dead || c.cc&nvme.CCEnable == 0 || c.csts&nvme.CSTSReady == 0:
		return 0, nvme.StatusCommandSequenceError | nvme.DNR
	case int(q.qid) > limit:
		return invalidParam(false, 42)
	case c.ioq[q.qid] != nil:
		return invalidParam(false, 42)
	}
	c.ioq[q.qid] = q
	return uint64(c.id), nvme.StatusSuccess
}

// invalidParam is a Connect's failure with the Invalid Parameter Offset
// and the attribute saying whether it is in the SQE or the data.
func invalidParam(inData bool, off uint16) (uint64, nvme.Status) {
	var attr uint64
	if inData {
		attr = 1
	}
	return attr<<16 | uint64(off), nvme.StatusConnectInvalidParm | nvme.DNR
}

// connect serves a Fabrics Connect: a new controller on an admin queue,
// an I/O queue joining one otherwise.
func (q *queue) connect(r *request) (uint64, nvme.Status) {
	cmd, t := r.cmd, q.t
	switch {
	case cmd.RecFmt() != 0:
		return 0, nvme.StatusConnectIncompatFmt | nvme.DNR
	case cmd.QID() != q.qid:
		return invalidParam(false, 42)
	case int(cmd.SQSize())+1 != q.depth:
		// The binding: HSQSIZE in the CM request is the Connect's SQSIZE.
		return invalidParam(false, 44)
	}
	cd, err := nvme.ParseConnectData(r.in)
	if err != nil {
		return 0, nvme.StatusSGLInvalidData | nvme.DNR
	}
	if !nvme.ValidNQN(cd.HostNQN) {
		return invalidParam(true, nvme.ConnectOffHostNQN)
	}
	var sub *Subsystem
	if cd.SubNQN != nvme.DiscoveryNQN {
		// Only the subsystems linked to the port the queue came
		// through, as nvmet_find_get_subsys.
		if sub = t.portSubsystem(q.port, cd.SubNQN); sub == nil {
			q.logf("host %s: no subsystem %q on this port", cd.HostNQN, cd.SubNQN)
			return invalidParam(true, nvme.ConnectOffSubNQN)
		}
		if !sub.Allowed(cd.HostNQN) {
			q.logf("host %s may not connect to %s", cd.HostNQN, sub.NQN)
			return 0, nvme.StatusConnectInvalidHost | nvme.DNR
		}
	}
	if q.qid == 0 {
		if cd.CntlID != nvme.DynamicCntlID {
			return invalidParam(true, nvme.ConnectOffCntlID)
		}
		if sub != nil {
			start := time.Now()
			waited, err := awaitQuiet(t.done(), sub, cd.HostNQN, cd.HostID, nil)
			if err != nil {
				q.logf("host %s: %v: Controller Busy", cd.HostNQN, err)
				return 0, nvme.StatusConnectCtrlBusy // no DNR: a reconnecting host tries again
			}
			if waited {
				q.logf("host %s: Connect held %v until its ended controller's writes left the Backend",
					cd.HostNQN, time.Since(start).Round(time.Millisecond))
			}
		}
		c := &controller{t: t, sub: sub, hostNQN: cd.HostNQN, hostID: cd.HostID, admin: q, ioq: map[uint16]*queue{}}
		switch t.addController(c, q.port) {
		case addBusy:
			return 0, nvme.StatusConnectCtrlBusy | nvme.DNR
		case addUnlinked: // the port let go of the subsystem since the look-up
			return invalidParam(true, nvme.ConnectOffSubNQN)
		case addHostLimit:
			q.logf("host %s has %d controllers (MaxControllersPerHost): Controller Busy", cd.HostNQN, t.cfg.MaxControllersPerHost)
			return 0, nvme.StatusConnectCtrlBusy
		case addEvicted: // the queue is ending
			return 0, nvme.StatusConnectCtrlBusy
		}
		if sub != nil && !sub.attach(c) { // before the keep-alive timer, whose expiry detaches it
			t.removeController(c)
			t.unbindQueue(q)
			return invalidParam(true, nvme.ConnectOffSubNQN)
		}
		q.ctrl = c // only now: a refused Connect leaves the queue with none
		q.noSQFlow = cmd.CATTR()&4 != 0
		c.setKATO(cmd.KATO())
		t.logf("nvmeof: controller %d: host %s (%v) connected to %s, KATO %d ms", c.id, cd.HostNQN, q.qp.RemoteAddr(), c.nqn(), cmd.KATO())
		return uint64(c.id), nvme.StatusSuccess
	}
	if sub == nil {
		return invalidParam(true, nvme.ConnectOffSubNQN) // discovery controllers have no I/O queues
	}
	// The association's host, subsystem and controller, and its port (NVMe
	// Base 2.0 section 3.3.2.1: I/O queues join a controller through the
	// port of its admin queue). Through another port the queue's I/O would
	// follow that port's ANA state while the controller reports its own.
	c := t.controller(cd.CntlID)
	if c == nil || c.sub != sub || c.hostNQN != cd.HostNQN || c.hostID != cd.HostID || c.admin.port != q.port {
		return invalidParam(true, nvme.ConnectOffCntlID)
	}
	// Bound before it joins, under t.mu as an eviction: a queue is
	// either evicted or connected (places.go).
	t.mu.Lock()
	bound := t.bindQueue(q)
	t.mu.Unlock()
	if !bound {
		return 0, nvme.StatusConnectCtrlBusy // the queue is ending
	}
	res, st := c.addIOQueue(q)
	if !st.OK() {
		t.unbindQueue(q)
		return res, st
	}
	q.ctrl = c
	q.noSQFlow = cmd.CATTR()&4 != 0
	c.touch()
	return res, st
}

// capability returns CAP: MQES, CQR, TO 7.5 s, the NVM command set.
func (t *Target) capability() uint64 {
	return uint64(t.cfg.MaxQueueSize-1) | 1<<16 | 15<<24 | 1<<37
}

// propertyGet serves Property Get.
func (q *queue) propertyGet(r *request) (uint64, nvme.Status) {
	c, cmd := q.ctrl, r.cmd
	c.mu.Lock()
	defer c.mu.Unlock()
	switch size, off := cmd.PropSize(), cmd.PropOffset(); {
	case size == 8 && off == nvme.PropCAP:
		return q.t.capability(), nvme.StatusSuccess
	case size == 4 && off == nvme.PropVS:
		return nvme.Version13, nvme.StatusSuccess
	case size == 4 && off == nvme.PropCC:
		return uint64(c.cc), nvme.StatusSuccess
	case size == 4 && off == nvme.PropCSTS:
		if c.csts&nvme.CSTSShstMask == cstsShstBusy && !time.Now().Before(c.shstDone) {
			c.csts = c.csts&^nvme.CSTSShstMask | nvme.CSTSShstDone
		}
		return uint64(c.csts), nvme.StatusSuccess
	}
	return 0, nvme.StatusInvalidField | nvme.DNR
}

// propertySet serves Property Set: CC, whose EN and SHN drive CSTS.
func (q *queue) propertySet(r *request) (uint64, nvme.Status) {
	cmd := r.cmd
	if cmd.PropSize() != 4 || cmd.PropOffset() != nvme.PropCC {
		return 0, nvme.StatusInvalidField | nvme.DNR
	}
	c := q.ctrl
	v := uint32(cmd.PropValue())
	c.mu.Lock()
	old := c.cc
	c.cc = v
	var drop []*queue
	resetMasks, reset := false, false
	switch {
	case v&nvme.CCEnable != 0 && old&nvme.CCEnable == 0:
		// Entry sizes 64 and 16, the NVM (or no I/O) command set, 4 KiB
		// pages (MPS 0, CAP.MPSMIN = MPSMAX) and round robin arbitration
		// (AMS 0): anything else is a fatal status, as in Linux's nvmet.
		if nvme.CCIOSQES(v) != 6 || nvme.CCIOCQES(v) != 4 || v>>4&7 != 0 && v>>4&7 != 6 || v>>7&0xf != 0 || v>>11&7 != 0 {
			c.csts = nvme.CSTSFatal
		} else {
			c.csts = nvme.CSTSReady
		}
	case v&nvme.CCEnable == 0 && old&nvme.CCEnable != 0:
		// A reset: the I/O queues go, CSTS.RDY clears once their
		// commands have left the Backends (below: a write the host sends
		// again after the reset must not be overtaken by its old copy,
		// as quiesce.go keeps for a new controller), and the held AERs
		// are aborted with every other outstanding command (the host
		// reposts its own; one answered later would carry a CID the host
		// may have reused).
		c.csts &^= nvme.CSTSFatal
		reset = true
		for _, q := range c.ioq {
			drop = append(drop, q)
		}
		clear(c.ioq)
		// The events go with the reset; so do their masks, or the next
		// change of each kind would raise nothing until the host read
		// the log.
		c.events = nil
		c.nsMasked, c.discMasked, c.anaMasked = false, false, false
		// The reservation log starts again at count 0, and the masks go
		// back to none (the feature does not persist across a reset:
		// forgetResvMasks, once c.mu is released).
		c.resvLog, c.resvCount, c.resvMasked = nil, 0, false
		resetMasks = true
		for _, idx := range c.heldAER { // this is the admin queue's goroutine
			q.abandon(idx)
		}
		c.heldAER = nil
	}
	shn := v&nvme.CCShnMask != 0 && old&nvme.CCShnMask == 0
	if shn {
		for _, q := range c.ioq {
			drop = append(drop, q)
		}
		clear(c.ioq)
	} else if v&nvme.CCShnMask == 0 && old&nvme.CCShnMask != 0 {
		c.csts &^= nvme.CSTSShstMask
	}
	id := c.id
	c.mu.Unlock()
	if resetMasks && c.sub != nil {
		c.forgetResvMasks()
	}
	if len(drop) > 0 {
		q.t.logf("nvmeof: controller %d: CC %#x: closing %d I/O queues", id, v, len(drop))
	}
	for _, d := range drop {
		d.end()
	}
	if reset {
		c.awaitIdle()
		c.mu.Lock()
		if c.cc&nvme.CCEnable == 0 {
			c.csts &^= nvme.CSTSReady
		}
		c.mu.Unlock()
	}
	if shn {
		// Shutdown processing commits the volatile write cache: a host
		// may disconnect without a Flush once CSTS.SHST says done. The
		// I/O queues closed above may be amid a backend write: it lands
		// before the flush.
		for _, d := range drop {
			<-d.ended
		}
		fatal := !c.flushAll()
		c.mu.Lock()
		if testShutdownLag > 0 {
			c.csts |= cstsShstBusy
			c.shstDone = time.Now().Add(testShutdownLag)
		} else {
			c.csts |= nvme.CSTSShstDone
		}
		if fatal {
			c.csts |= nvme.CSTSFatal
		}
		c.mu.Unlock()
	}
	return 0, nvme.StatusSuccess
}

// testShutdownLag, if set, keeps CSTS.SHST at "occurring" this long after
// the shutdown's work is done, as a controller slower to shut down
// (tests).
var testShutdownLag time.Duration

// cstsShstBusy is CSTS.SHST's "shutdown processing occurring".
const cstsShstBusy = 1 << 2

// flushAll makes every namespace's written data durable; false if one
// could not be.
func (c *controller) flushAll() bool {
	if c.sub == nil {
		return true
	}
	return c.flushEach(" at shutdown").OK()
}

// parse checks a command before its data moves, as Linux's
// nvmet_req_init: whether the queue and controller may run it, the
// direction and length of its data, and what executes it (r.execute). It
// is the only place that looks at the opcode.
func (q *queue) parse(r *request) nvme.Status {
	c := q.ctrl
	if r.cmd.IsFabrics() {
		switch fc := r.cmd.FCType(); {
		case fc == nvme.FabricsConnect:
			if c != nil {
				return nvme.StatusCommandSequenceError | nvme.DNR
			}
			r.execute, r.dir, r.need = (*queue).connect, dirIn, nvme.ConnectDataSize
			return nvme.StatusSuccess
		case q.qid != 0:
			return nvme.StatusInvalidOpcode | nvme.DNR
		case fc == nvme.FabricsPropertyGet || fc == nvme.FabricsPropertySet:
			if c == nil {
				return nvme.StatusCommandSequenceError | nvme.DNR
			}
			r.execute = (*queue).propertyGet
			if fc == nvme.FabricsPropertySet {
				r.execute = (*queue).propertySet
			}
			return nvme.StatusSuccess
		}
		return nvme.StatusInvalidOpcode | nvme.DNR
	}
	if c == nil || !c.ready() {
		return nvme.StatusCommandSequenceError | nvme.DNR
	}
	if q.qid == 0 {
		return c.parseAdmin(r)
	}
	return c.parseIO(r, q.port)
}
