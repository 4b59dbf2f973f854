package target

import (
	"encoding/binary"
	"slices"
	"sync"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// Reservations (NVMe base 2.0 section 8.19), as Linux's nvmet has them
// (drivers/nvme/target/pr.c): the fencing that shared-storage clusters
// build on. A host registers a key with a namespace; a registrant takes a
// reservation of one of six types, which limits what the other hosts may
// read and write; another registrant may preempt it (the way a cluster
// fences a failed node). A registrant is a host (its host identifier from
// Connect), whichever of its controllers it came through. Enabled per
// namespace (NamespaceConfig.Reservations), as nvmet's resv_enable.
//
// As nvmet: the registrations last as long as the namespace, unless it
// has a reservation file and a host asked for persistence through power
// loss (PTPL, resvptpl.go: nvmet has none); a reservation change (Preempt
// and Abort among them) completes only once the I/O commands it admitted
// before have finished, and those executed after it see it; of an
// all-registrants type, the registrant that acquired it is the one that
// may release it or acquire it again (the others get Reservation
// Conflict, or a release that releases nothing); the hosts a change takes
// something from are told (resvlog.go). Flush of every namespace (NSID
// FFFFFFFFh) is not checked: it changes no data.

// resv is a namespace's reservation state. I/O commands hold mu's read
// lock while they run (admit), reservation commands its write lock: a
// preempt waits for the commands that the old state admitted.
type resv struct {
	mu     sync.RWMutex
	gen    uint32
	keys   map[[16]byte]uint64 // registrants: host identifier → key
	order  [][16]byte          // registrants in the order they registered
	holder [16]byte
	rtype  nvme.ReservationType // nvme.ResvNone: no reservation
	// notify delivers a notification (resvlog.go), under mu so that the
	// pages follow the changes' order and are recorded before the
	// command that made them completes; nil: none (tests). pending holds
	// a change's until it stands (change).
	notify  func(nvme.ReservationNoticeType, [][16]byte)
	pending []resvNote
	// file is the reservation file ("": none) and ptpl whether the state
	// persists in it (resvptpl.go). fileMu is held while the file is
	// written, and detached (under it) once the namespace is taken out:
	// a namespace added again in its place owns the file then.
	file     string
	ptpl     bool
	fileMu   sync.Mutex
	detached bool
	// Each controller's Reservation Notification Mask for the namespace
	// (under maskMu, which may be taken under mu).
	maskMu sync.Mutex
	masks  map[*controller]uint32
}

func newResv(notify func(nvme.ReservationNoticeType, [][16]byte)) *resv {
	if notify == nil {
		notify = func(nvme.ReservationNoticeType, [][16]byte) {}
	}
	return &resv{keys: map[[16]byte]uint64{}, notify: notify}
}

// resvNote is a notification a change owes: type t to the controllers of
// hosts.
type resvNote struct {
	t     nvme.ReservationNoticeType
	hosts [][16]byte
}

// holds reports whether host holds the reservation (r.mu held): its
// holder, or any registrant of an all-registrants type.
func (r *resv) holds(host [16]byte) bool {
	if r.rtype == nvme.ResvNone {
		return false
	}
	if r.rtype.AllRegistrants() {
		_, reg := r.keys[host]
		return reg
	}
	return r.holder == host
}

// allows reports whether host may run I/O command op on the namespace:
// the early check, when the command is parsed (before its data moves).
// While a reservation change waits for the commands admitted before it,
// the check is left to admit rather than stall the queue.
func (r *resv) allows(host [16]byte, op uint8) bool {
	if !r.mu.TryRLock() {
		return true
	}
	defer r.mu.RUnlock()
	return r.allowsLocked(host, op)
}

// admit checks again, as the command runs, and if it may keeps the read
// lock until done: a reservation change waits for it.
func (r *resv) admit(host [16]byte, op uint8) bool {
	r.mu.RLock()
	if !r.allowsLocked(host, op) {
		r.mu.RUnlock()
		return false
	}
	return true
}

func (r *resv) done() { r.mu.RUnlock() }

// allowsLocked is nvmet's access check (r.mu held): the write group is
// Flush, Write, Write Zeroes and Dataset Management, the read group Read.
func (r *resv) allowsLocked(host [16]byte, op uint8) bool {
	if r.rtype == nvme.ResvNone || r.holds(host) {
		return true
	}
	write := op == nvme.IOFlush || op == nvme.IOWrite || op == nvme.IOWriteZeroes || op == nvme.IODSM
	read := op == nvme.IORead
	_, reg := r.keys[host]
	switch r.rtype {
	case nvme.ResvWriteExclusive:
		return !write
	case nvme.ResvExclusiveAccess:
		return !write && !read
	case nvme.ResvWriteExclusiveRegsOnly, nvme.ResvWriteExclusiveAllRegs:
		return reg || !write
	default: // the exclusive access registrants types
		return reg || !write && !read
	}
}

// hasKey reports whether host is registered with key (r.mu held).
func (r *resv) hasKey(host [16]byte, key uint64) bool {
	k, reg := r.keys[host]
	return reg && k == key
}

// unregister removes host's registration (r.mu held); a holder that goes
// takes a reservation of types 1 to 4 with it (the other registrants of a
// registrants-only type are told it was released), and passes one of the
// all-registrants types to the first remaining registrant.
func (r *resv) unregister(host [16]byte) {
	delete(r.keys, host)
	r.order = slices.DeleteFunc(r.order, func(h [16]byte) bool { return h == host })
	if r.rtype == nvme.ResvNone || r.holder != host {
		return
	}
	if r.rtype.AllRegistrants() && len(r.order) > 0 {
		r.holder = r.order[0]
		return
	}
	if r.rtype == nvme.ResvWriteExclusiveRegsOnly || r.rtype == nvme.ResvExclusiveAccessRegsOnly {
		r.noteLocked(nvme.ResvNoticeReleased, r.othersLocked(host)...)
	}
	r.rtype, r.holder = nvme.ResvNone, [16]byte{}
}

// preemptKey removes every registrant with key k, for a preempt by host
// (r.mu held): each other host is told its registration was preempted.
// It reports whether there was one.
func (r *resv) preemptKey(host [16]byte, k uint64) bool {
	var hit [][16]byte
	for _, h := range r.order {
		if r.keys[h] == k {
			hit = append(hit, h)
		}
	}
	for _, h := range hit {
		r.preemptOne(host, h)
	}
	return len(hit) > 0
}

// preemptOne removes victim's registration for a preempt by host (r.mu
// held), and tells it unless it is host.
func (r *resv) preemptOne(host, victim [16]byte) {
	r.unregister(victim)
	if victim != host {
		r.noteLocked(nvme.ResvNoticeRegPreempted, victim)
	}
}

// register serves Reservation Register, and its Change Persist Through
// Power Loss State (CPTPL) if it succeeds. Without a reservation file
// CPTPL is not looked at, as nvmet never does: Linux's host asks for
// persistence with every registration it makes for the block layer
// (nvme_pr_register), and a target that cannot persist must not fail
// them. The error is the reservation file's, if the change could not be
// written there.
func (r *resv) register(host [16]byte, cdw10 uint32, data []byte) (nvme.Status, error) {
	cptpl := cdw10 >> 30
	if r.file == "" {
		cptpl = nvme.ResvCPTPLNoChange
	}
	if cptpl == 1 { // reserved
		return nvme.StatusInvalidField | nvme.DNR, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.change(func() nvme.Status {
		st := r.registerLocked(host, cdw10, data)
		if st.OK() && cptpl != nvme.ResvCPTPLNoChange {
			r.ptpl = cptpl == nvme.ResvCPTPLSet
		}
		return st
	})
}

func (r *resv) registerLocked(host [16]byte, cdw10 uint32, data []byte) nvme.Status {
	crkey, nrkey := binary.LittleEndian.Uint64(data), binary.LittleEndian.Uint64(data[8:])
	iekey := cdw10&nvme.ResvIEKEY != 0
	key, reg := r.keys[host]
	switch cdw10 & 7 {
	case nvme.ResvRegister: // CRKEY and IEKEY are not looked at (as nvmet)
		if reg && key != nrkey {
			return nvme.StatusReservationConflict | nvme.DNR
		}
		if !reg {
			r.keys[host] = nrkey
			r.order = append(r.order, host)
		}
	case nvme.ResvUnregister, nvme.ResvReplace:
		if !reg || !iekey && key != crkey {
			return nvme.StatusReservationConflict | nvme.DNR
		}
		if cdw10&7 == nvme.ResvUnregister {
			r.unregister(host)
		} else {
			r.keys[host] = nrkey
		}
	default:
		return nvme.StatusInvalidOpcode | nvme.DNR
	}
	r.gen++
	return nvme.StatusSuccess
}

// acquire serves Reservation Acquire: acquire, preempt, preempt and
// abort.
func (r *resv) acquire(host [16]byte, cdw10 uint32, data []byte) (nvme.Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.change(func() nvme.Status { return r.acquireLocked(host, cdw10, data) })
}

func (r *resv) acquireLocked(host [16]byte, cdw10 uint32, data []byte) nvme.Status {
	crkey, prkey := binary.LittleEndian.Uint64(data), binary.LittleEndian.Uint64(data[8:])
	t := nvme.ReservationType(cdw10 >> 8)
	if cdw10&nvme.ResvIEKEY != 0 || t < nvme.ResvWriteExclusive || t > nvme.MaxResvType {
		return nvme.StatusInvalidField | nvme.DNR
	}
	if !r.hasKey(host, crkey) {
		return nvme.StatusReservationConflict | nvme.DNR
	}
	switch cdw10 & 7 {
	case nvme.ResvAcquire:
		switch {
		case r.rtype == nvme.ResvNone:
			r.holder, r.rtype = host, t
		case r.holder == host && r.rtype == t:
		default: // held by another, or in another type (nvmet: for the all-registrants types too)
			return nvme.StatusReservationConflict | nvme.DNR
		}
		return nvme.StatusSuccess
	case nvme.ResvPreempt, nvme.ResvPreemptAbort:
	default:
		return nvme.StatusInvalidOpcode | nvme.DNR
	}
	switch old := r.rtype; {
	case old == nvme.ResvNone:
		if !r.preemptKey(host, prkey) {
			return nvme.StatusReservationConflict | nvme.DNR
		}
	case old.AllRegistrants() && prkey == 0:
		// The caller the holder first (so that no registrant going
		// passes it on), then every other registrant out.
		r.holder, r.rtype = host, t
		for _, h := range slices.Clone(r.order) {
			if h != host {
				r.preemptOne(host, h)
			}
		}
	case old.AllRegistrants():
		if !r.preemptKey(host, prkey) {
			return nvme.StatusReservationConflict | nvme.DNR
		}
	case r.holder == host:
		r.rtype = t // only the type changes
		if t != old {
			r.noteLocked(nvme.ResvNoticeReleased, r.othersLocked(host)...)
		}
	case prkey == r.keys[r.holder]:
		// The holder preempted: the caller holds, then the registrants
		// with the holder's key (the holder among them) are out.
		r.holder, r.rtype = host, t
		for _, h := range slices.Clone(r.order) {
			if h != host && r.keys[h] == prkey {
				r.preemptOne(host, h)
			}
		}
		if t != old {
			r.noteLocked(nvme.ResvNoticeReleased, r.othersLocked(host)...)
		}
	case prkey != 0:
		if !r.preemptKey(host, prkey) {
			return nvme.StatusReservationConflict | nvme.DNR
		}
	default:
		return nvme.StatusInvalidField | nvme.DNR
	}
	r.gen++
	return nvme.StatusSuccess
}

// release serves Reservation Release: release, clear.
func (r *resv) release(host [16]byte, cdw10 uint32, data []byte) (nvme.Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.change(func() nvme.Status { return r.releaseLocked(host, cdw10, data) })
}

func (r *resv) releaseLocked(host [16]byte, cdw10 uint32, data []byte) nvme.Status {
	crkey := binary.LittleEndian.Uint64(data)
	if cdw10&nvme.ResvIEKEY != 0 {
		return nvme.StatusInvalidField | nvme.DNR
	}
	if !r.hasKey(host, crkey) {
		return nvme.StatusReservationConflict | nvme.DNR
	}
	switch cdw10 & 7 {
	case nvme.ResvRelease:
		switch {
		case r.rtype == nvme.ResvNone || r.holder != host: // nothing to release (as nvmet, for every type)
		case nvme.ReservationType(cdw10>>8) != r.rtype:
			return nvme.StatusReservationConflict | nvme.DNR
		default:
			if t := r.rtype; t != nvme.ResvWriteExclusive && t != nvme.ResvExclusiveAccess {
				r.noteLocked(nvme.ResvNoticeReleased, r.othersLocked(host)...)
			}
			r.rtype, r.holder = nvme.ResvNone, [16]byte{}
		}
	case nvme.ResvClear:
		for _, h := range r.othersLocked(host) {
			r.noteLocked(nvme.ResvNoticePreempted, h)
		}
		clear(r.keys)
		r.order, r.rtype, r.holder = nil, nvme.ResvNone, [16]byte{}
		r.gen++
	default:
		return nvme.StatusInvalidOpcode | nvme.DNR
	}
	return nvme.StatusSuccess
}

// report serves Reservation Report into out (its whole length, NUMD): the
// extended data structure only, as nvmet, since host identifiers are 128
// bits here.
func (r *resv) report(cdw11 uint32, out []byte) nvme.Status {
	if cdw11&nvme.ResvReportEDS == 0 {
		return nvme.StatusHostIDInconsistent | nvme.DNR
	}
	if len(out) < nvme.ResvStatusEntrySize {
		return nvme.StatusInvalidField | nvme.DNR
	}
	clear(out)
	le := binary.LittleEndian
	r.mu.RLock()
	defer r.mu.RUnlock()
	le.PutUint32(out[0:], r.gen)
	out[4] = byte(r.rtype)
	if r.ptpl {
		out[9] = 1 // PTPLS
	}
	le.PutUint16(out[5:], uint16(len(r.order)))
	for i, h := range r.order {
		e := out[nvme.ResvStatusEntrySize*(i+1):]
		if len(e) < nvme.ResvStatusEntrySize {
			break // REGCTL counts them all; those that do not fit are left out
		}
		le.PutUint16(e[0:], nvme.DynamicCntlID)
		if r.holds(h) {
			e[2] = 1
		}
		le.PutUint64(e[8:], r.keys[h])
		copy(e[16:32], h[:])
	}
	return nvme.StatusSuccess
}

// access is the status of I/O command op on ns through port p: its ANA
// state there, then its reservation (as nvmet checks them).
func (c *controller) access(p *Port, ns *Namespace, op uint8) nvme.Status {
	if st := c.anaStatus(p, ns); !st.OK() {
		return st
	}
	if ns.wp.Load() && wpRefuses(op) { // while protection is being decided, the write waits in admitWrite
		return nvme.StatusNSWriteProtected | nvme.DNR
	}
	if ns.resv != nil && !ns.resv.allows(c.hostID, op) {
		return nvme.StatusReservationConflict | nvme.DNR
	}
	return nvme.StatusSuccess
}

// parseResv checks a reservation command and chooses its executor: its namespace has reservations
// and is accessible through p; the data is the keys (16 octets, or 8 for
// Release as nvme-cli sends it; a longer buffer, as Linux's host sends
// for Release, is taken: queue.longerData) or, for Report, NUMD's length.
func (c *controller) parseResv(r *request, p *Port) nvme.Status {
	cmd := r.cmd
	ns := c.sub.Namespace(cmd.NSID())
	switch {
	case ns == nil:
		return noNamespace(cmd.NSID())
	case ns.resv == nil:
		return nvme.StatusInvalidOpcode | nvme.DNR
	}
	if st := c.anaStatus(p, ns); !st.OK() {
		return st
	}
	r.ns, r.dir, r.need = ns, dirIn, nvme.ResvKeysDataSize
	switch cmd.Opcode() {
	case nvme.IOResvReport:
		n := 4 * (uint64(cmd.CDW(10)) + 1)
		if n > uint64(c.t.cfg.MaxTransfer) {
			return nvme.StatusInvalidField | nvme.DNR
		}
		r.execute, r.dir, r.need = execResvReport, dirOut, int(n)
	case nvme.IOResvRegister:
		r.execute = execResvRegister
	case nvme.IOResvAcquire:
		r.execute = execResvAcquire
	case nvme.IOResvRelease:
		r.execute, r.need = execResvRelease, nvme.ResvKeyDataSize
	}
	return nvme.StatusSuccess
}

// rescapAll is the RESCAP this target reports: the six types and IEKEY
// (PTPL only with a reservation file).
const rescapAll = 0xfe
