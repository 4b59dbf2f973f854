package target

import (
	"encoding/binary"
	"errors"

	"github.com/goiwarp/iwarp/nvmeof/internal/testhook"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// parseIO checks an NVM command set command that came through port p
// (namespace, its ANA state through p, LBA range, length) and chooses its
// executor. It keeps the namespace it checked against (r.ns), which
// execIO must find still there: an NSID removed and given to another
// namespace meanwhile (Subsystem.AddNamespaceConfig) must not take a
// command parsed for the first.
func (c *controller) parseIO(r *request, p *Port) nvme.Status {
	cmd := r.cmd
	r.nvm = true
	switch op := cmd.Opcode(); op {
	case nvme.IORead, nvme.IOWrite, nvme.IOWriteZeroes:
		ns := c.sub.Namespace(cmd.NSID())
		if ns == nil {
			return noNamespace(cmd.NSID())
		}
		if st := c.access(p, ns, op); !st.OK() {
			return st
		}
		slba, nlb := cmd.SLBA(), uint64(cmd.NLB())+1
		if slba+nlb < slba || slba+nlb > ns.Blocks() {
			return nvme.StatusLBARange | nvme.DNR
		}
		// The length in 64 bits: 65 536 blocks of 64 KiB is 4 GiB, which
		// a 32-bit int would wrap to 0. Past MDTS anyway.
		if n := nlb * uint64(ns.BlockSize); n > uint64(c.t.cfg.MaxTransfer) && op != nvme.IOWriteZeroes {
			return nvme.StatusInvalidField | nvme.DNR
		}
		r.ns = ns
		switch op {
		case nvme.IORead:
			r.execute, r.dir, r.need = execRead, dirOut, int(nlb)*ns.BlockSize
		case nvme.IOWrite:
			r.execute, r.dir, r.need = execWrite, dirIn, int(nlb)*ns.BlockSize
		default:
			r.execute = execWriteZeroes
		}
		return nvme.StatusSuccess
	case nvme.IOFlush:
		r.execute = execFlush
		if id := cmd.NSID(); id != nvme.NSIDAll {
			ns := c.sub.Namespace(id)
			if ns == nil {
				return noNamespace(id)
			}
			if st := c.access(p, ns, nvme.IOFlush); !st.OK() {
				return st
			}
			r.ns = ns
		}
		return nvme.StatusSuccess
	case nvme.IODSM:
		ns := c.sub.Namespace(cmd.NSID())
		if ns == nil {
			return noNamespace(cmd.NSID())
		}
		if st := c.access(p, ns, nvme.IODSM); !st.OK() {
			return st
		}
		r.execute, r.dir, r.need, r.ns = execDSM, dirIn, (int(cmd.CDW(10)&0xff)+1)*nvme.DSMRangeSize, ns
		return nvme.StatusSuccess
	case nvme.IOResvRegister, nvme.IOResvAcquire, nvme.IOResvRelease, nvme.IOResvReport:
		return c.parseResv(r, p)
	}
	return nvme.StatusInvalidOpcode | nvme.DNR
}

// execIO runs an NVM command set command: the checks every one passes as
// it runs, then its executor. Its namespace was there when parseIO looked
// (r.ns), but may have been removed while its data moved, and its NSID
// given to another.
func execIO(q *queue, r *request) (uint64, nvme.Status) {
	c, cmd := q.ctrl, r.cmd
	ns := c.sub.use(cmd.NSID())
	if ns != nil {
		defer ns.done()
	}
	if ns != r.ns && !(cmd.Opcode() == nvme.IOFlush && cmd.NSID() == nvme.NSIDAll) {
		if ns == nil {
			return 0, noNamespace(cmd.NSID()) // removed meanwhile: inactive now
		}
		// Given to another namespace meanwhile, perhaps of another
		// format: not the one the command was checked against.
		return 0, nvme.StatusInvalidNamespace | nvme.DNR
	}
	if h := testhook.IOStatus.Load(); h != nil {
		if st := (*h)(c.admin.port.ID(), cmd); st != nvme.StatusSuccess {
			return 0, st
		}
	}
	if ns != nil && wpRefuses(cmd.Opcode()) {
		c.awaitQuietWrite() // a stale copy on an ended path lands first (quiesce.go)
		// Protecting the namespace waits for a running write to end, so
		// that none lands after Set Features returns.
		if st := ns.admitWrite(c.t.done()); !st.OK() {
			return 0, st // protected while its data moved, or being protected for too long
		}
		defer ns.writing.Add(-1)
	}
	switch op := cmd.Opcode(); {
	case ns == nil || ns.resv == nil:
	case op == nvme.IORead, op == nvme.IOWrite, op == nvme.IOWriteZeroes, op == nvme.IODSM, op == nvme.IOFlush:
		// Checked again as it runs, and a reservation change (a fence)
		// waits until it is done: its data may have moved for long.
		if !ns.resv.admit(c.hostID, op) {
			return 0, nvme.StatusReservationConflict | nvme.DNR
		}
		defer ns.resv.done()
	}
	return r.execute(q, r)
}

// The NVM commands' executors, which execIO runs.

func execRead(q *queue, r *request) (uint64, nvme.Status) {
	c, ns := q.ctrl, r.ns
	off := int64(r.cmd.SLBA()) * int64(ns.BlockSize)
	if _, err := ns.Backend.ReadAt(r.out, off); err != nil {
		c.t.logf("nvmeof: namespace %d: read %d at %d: %v", ns.ID, len(r.out), off, err)
		return 0, nvme.StatusUnrecoveredRead | nvme.DNR
	}
	c.sub.count(false, len(r.out))
	return 0, nvme.StatusSuccess
}

func execWrite(q *queue, r *request) (uint64, nvme.Status) {
	c, ns := q.ctrl, r.ns
	off := int64(r.cmd.SLBA()) * int64(ns.BlockSize)
	var err error
	switch fw, ok := ns.Backend.(FUAWriter); {
	case !c.durable(r.cmd):
		_, err = ns.Backend.WriteAt(r.in, off)
	case ok:
		_, err = fw.WriteAtFUA(r.in, off)
	default:
		if _, err = ns.Backend.WriteAt(r.in, off); err == nil {
			err = ns.Backend.Flush()
		}
	}
	if err != nil {
		c.t.logf("nvmeof: namespace %d: write %d at %d: %v", ns.ID, len(r.in), off, err)
		return 0, nvme.StatusWriteFault | nvme.DNR
	}
	c.sub.count(true, len(r.in))
	return 0, nvme.StatusSuccess
}

// execFlush flushes r.ns, or every namespace (NSID FFFFFFFFh).
func execFlush(q *queue, r *request) (uint64, nvme.Status) {
	if r.ns != nil {
		return 0, q.ctrl.flush(r.ns, "")
	}
	return 0, q.ctrl.flushEach("")
}

func execWriteZeroes(q *queue, r *request) (uint64, nvme.Status) {
	st := zero(r.ns, r.cmd.SLBA(), uint64(r.cmd.NLB())+1, false)
	if st.OK() && q.ctrl.durable(r.cmd) {
		st = q.ctrl.flush(r.ns, " after Write Zeroes")
	}
	return 0, st
}

// execDSM serves Dataset Management: Deallocate makes the ranges read as
// zeros; the other attributes are hints, and need nothing.
func execDSM(q *queue, r *request) (uint64, nvme.Status) {
	c, ns := q.ctrl, r.ns
	if r.cmd.CDW(11)&(1<<2) == 0 {
		return 0, nvme.StatusSuccess
	}
	for i := 0; i+nvme.DSMRangeSize <= len(r.in); i += nvme.DSMRangeSize {
		n := uint64(binary.LittleEndian.Uint32(r.in[i+4:]))
		slba := binary.LittleEndian.Uint64(r.in[i+8:])
		if slba+n < slba || slba+n > ns.Blocks() {
			return 0, nvme.StatusLBARange | nvme.DNR
		}
	}
	for i := 0; i+nvme.DSMRangeSize <= len(r.in); i += nvme.DSMRangeSize {
		n := uint64(binary.LittleEndian.Uint32(r.in[i+4:]))
		if st := zero(ns, binary.LittleEndian.Uint64(r.in[i+8:]), n, true); !st.OK() {
			return 0, st
		}
	}
	if c.wcOff.Load() {
		return 0, c.flush(ns, " after Deallocate")
	}
	return 0, nvme.StatusSuccess
}

func execResvRegister(q *queue, r *request) (uint64, nvme.Status) {
	st, err := r.ns.resv.register(q.ctrl.hostID, r.cmd.CDW(10), r.in)
	return 0, q.ctrl.resvDone(r.ns, st, err)
}

func execResvAcquire(q *queue, r *request) (uint64, nvme.Status) {
	st, err := r.ns.resv.acquire(q.ctrl.hostID, r.cmd.CDW(10), r.in)
	return 0, q.ctrl.resvDone(r.ns, st, err)
}

func execResvRelease(q *queue, r *request) (uint64, nvme.Status) {
	st, err := r.ns.resv.release(q.ctrl.hostID, r.cmd.CDW(10), r.in)
	return 0, q.ctrl.resvDone(r.ns, st, err)
}

func execResvReport(_ *queue, r *request) (uint64, nvme.Status) {
	return 0, r.ns.resv.report(r.cmd.CDW(11), r.out)
}

// durable reports whether a Write or Write Zeroes must be on stable
// storage when it completes: it asks for Force Unit Access, or the host
// turned the controller's volatile write cache off. Linux's host sends its
// file systems' journal commits with FUA.
func (c *controller) durable(cmd nvme.Command) bool { return cmd.FUA() || c.wcOff.Load() }

// flush commits ns's written data (Backend.Flush): Write Fault if it
// cannot; when says why, for the log.
func (c *controller) flush(ns *Namespace, when string) nvme.Status {
	if err := ns.Backend.Flush(); err != nil {
		c.t.logf("nvmeof: controller %d: namespace %d: flush%s: %v", c.id, ns.ID, when, err)
		return nvme.StatusWriteFault | nvme.DNR
	}
	return nvme.StatusSuccess
}

// flushEach flushes every namespace of the subsystem, each held (use) so
// that one removed meanwhile is not flushed after its Backend was let go.
func (c *controller) flushEach(when string) nvme.Status {
	st := nvme.StatusSuccess
	for _, n := range c.sub.Namespaces() {
		if ns := c.sub.use(n.ID); ns != nil {
			if s := c.flush(ns, when); !s.OK() {
				st = s
			}
			ns.done()
		}
	}
	return st
}

var zeros = make([]byte, 64<<10)

// zero makes nlb blocks at slba read as zeros (deallocated: their storage
// may go): by the Backend's Zero if it has one, else by writing zeros.
func zero(ns *Namespace, slba, nlb uint64, deallocate bool) nvme.Status {
	off, n := int64(slba)*int64(ns.BlockSize), int64(nlb)*int64(ns.BlockSize)
	if z, ok := ns.Backend.(Zeroer); ok {
		err := z.Zero(off, n, deallocate)
		if err == nil {
			return nvme.StatusSuccess
		}
		if !errors.Is(err, errors.ErrUnsupported) {
			return nvme.StatusWriteFault | nvme.DNR
		}
	}
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := ns.Backend.WriteAt(zeros[:k], off); err != nil {
			return nvme.StatusWriteFault | nvme.DNR
		}
		off += k
		n -= k
	}
	return nvme.StatusSuccess
}
