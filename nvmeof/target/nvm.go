package target

import (
	"encoding/binary"
	"errors"

	"github.com/goiwarp/iwarp/nvmeof/internal/testhook"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// planIO checks an NVM command set command that came through port p:
// namespace, its ANA state through p, LBA range, length. It returns the
// namespace it checked against, which execIO must find still there: an
// NSID removed and given to another namespace meanwhile
// (Subsystem.AddNamespaceConfig) must not take a command planned for the
// first.
func (c *controller) planIO(cmd nvme.Command, p *Port) (dir, need int, st nvme.Status, ns *Namespace) {
	switch op := cmd.Opcode(); op {
	case nvme.IORead, nvme.IOWrite, nvme.IOWriteZeroes:
		ns := c.sub.Namespace(cmd.NSID())
		if ns == nil {
			return 0, 0, noNamespace(cmd.NSID()), nil
		}
		if st := c.access(p, ns, op); !st.OK() {
			return 0, 0, st, nil
		}
		slba, nlb := cmd.SLBA(), uint64(cmd.NLB())+1
		if slba+nlb < slba || slba+nlb > ns.Blocks() {
			return 0, 0, nvme.StatusLBARange | nvme.DNR, nil
		}
		// The length in 64 bits: 65 536 blocks of 64 KiB is 4 GiB, which
		// a 32-bit int would wrap to 0. Past MDTS anyway.
		if n := nlb * uint64(ns.BlockSize); n > uint64(c.t.cfg.MaxTransfer) && op != nvme.IOWriteZeroes {
			return 0, 0, nvme.StatusInvalidField | nvme.DNR, nil
		}
		switch op {
		case nvme.IORead:
			return dirOut, int(nlb) * ns.BlockSize, nvme.StatusSuccess, ns
		case nvme.IOWrite:
			return dirIn, int(nlb) * ns.BlockSize, nvme.StatusSuccess, ns
		}
		return dirNone, 0, nvme.StatusSuccess, ns
	case nvme.IOFlush:
		if id := cmd.NSID(); id != 0xffffffff {
			if ns := c.sub.Namespace(id); ns != nil {
				if st := c.access(p, ns, nvme.IOFlush); !st.OK() {
					return 0, 0, st, nil
				}
				return dirNone, 0, nvme.StatusSuccess, ns
			}
			return 0, 0, noNamespace(id), nil
		}
		return dirNone, 0, nvme.StatusSuccess, nil
	case nvme.IODSM:
		ns := c.sub.Namespace(cmd.NSID())
		if ns == nil {
			return 0, 0, noNamespace(cmd.NSID()), nil
		}
		if st := c.access(p, ns, nvme.IODSM); !st.OK() {
			return 0, 0, st, nil
		}
		return dirIn, (int(cmd.CDW(10)&0xff) + 1) * nvme.DSMRangeSize, nvme.StatusSuccess, ns
	case nvme.IOResvRegister, nvme.IOResvAcquire, nvme.IOResvRelease, nvme.IOResvReport:
		return c.planResv(cmd, p)
	}
	return 0, 0, nvme.StatusInvalidOpcode | nvme.DNR, nil
}

// execIO runs an NVM command set command. Its namespace was there when
// planIO looked (r.ns), but may have been removed while its data moved,
// and its NSID given to another.
func (c *controller) execIO(r *request) (uint64, nvme.Status, []byte) {
	cmd := r.cmd
	ns := c.sub.use(cmd.NSID())
	if ns != nil {
		defer ns.done()
	}
	if ns != r.ns && !(cmd.Opcode() == nvme.IOFlush && cmd.NSID() == 0xffffffff) {
		if ns == nil {
			return 0, noNamespace(cmd.NSID()), nil // removed meanwhile: inactive now
		}
		// Given to another namespace meanwhile, perhaps of another
		// format: not the one the command was checked against.
		return 0, nvme.StatusInvalidNamespace | nvme.DNR, nil
	}
	if h := testhook.IOStatus.Load(); h != nil {
		if st := (*h)(c.admin.port.ID(), cmd); st != nvme.StatusSuccess {
			return 0, st, nil
		}
	}
	if ns != nil && wpRefuses(cmd.Opcode()) {
		c.awaitQuietWrite() // a stale copy on an ended path lands first (quiesce.go)
		// Protecting the namespace waits for a running write to end, so
		// that none lands after Set Features returns.
		if st := ns.admitWrite(c.t.done()); !st.OK() {
			return 0, st, nil // protected while its data moved, or being protected for too long
		}
		defer ns.writing.Add(-1)
	}
	switch op := cmd.Opcode(); {
	case ns == nil || ns.resv == nil:
	case op == nvme.IORead, op == nvme.IOWrite, op == nvme.IOWriteZeroes, op == nvme.IODSM, op == nvme.IOFlush:
		// Checked again as it runs, and a reservation change (a fence)
		// waits until it is done: its data may have moved for long.
		if !ns.resv.admit(c.hostID, op) {
			return 0, nvme.StatusReservationConflict | nvme.DNR, nil
		}
		defer ns.resv.done()
	}
	switch cmd.Opcode() {
	case nvme.IORead:
		off := int64(cmd.SLBA()) * int64(ns.BlockSize)
		out := r.out(int(r.data.Len))
		if out == nil {
			return 0, nvme.StatusInternalError, nil
		}
		if _, err := ns.Backend.ReadAt(out, off); err != nil {
			c.t.logf("nvmeof: namespace %d: read %d at %d: %v", ns.ID, len(out), off, err)
			return 0, 0x281 | nvme.DNR, nil // media error: Unrecovered Read Error
		}
		c.sub.count(false, len(out))
		return 0, nvme.StatusSuccess, out
	case nvme.IOWrite:
		off := int64(cmd.SLBA()) * int64(ns.BlockSize)
		var err error
		switch fw, ok := ns.Backend.(FUAWriter); {
		case !c.durable(cmd):
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
			return 0, 0x280 | nvme.DNR, nil // media error: Write Fault
		}
		c.sub.count(true, len(r.in))
		return 0, nvme.StatusSuccess, nil
	case nvme.IOFlush:
		if ns != nil {
			return 0, c.flush(ns, ""), nil
		}
		return 0, c.flushEach(""), nil
	case nvme.IOWriteZeroes:
		st := zero(ns, cmd.SLBA(), uint64(cmd.NLB())+1, false)
		if st.OK() && c.durable(cmd) {
			st = c.flush(ns, " after Write Zeroes")
		}
		return 0, st, nil
	case nvme.IOResvRegister:
		st, err := ns.resv.register(c.hostID, cmd.CDW(10), r.in)
		return 0, c.resvDone(ns, st, err), nil
	case nvme.IOResvAcquire:
		st, err := ns.resv.acquire(c.hostID, cmd.CDW(10), r.in)
		return 0, c.resvDone(ns, st, err), nil
	case nvme.IOResvRelease:
		st, err := ns.resv.release(c.hostID, cmd.CDW(10), r.in)
		return 0, c.resvDone(ns, st, err), nil
	case nvme.IOResvReport:
		out := r.out(int(r.data.Len))
		if out == nil {
			return 0, nvme.StatusInternalError, nil
		}
		if st := ns.resv.report(cmd.CDW(11), out); !st.OK() {
			return 0, st, nil
		}
		return 0, nvme.StatusSuccess, out
	case nvme.IODSM:
		if cmd.CDW(11)&(1<<2) == 0 {
			return 0, nvme.StatusSuccess, nil // only hints: nothing to do
		}
		// Deallocate: the ranges read as zeros afterwards.
		for i := 0; i+nvme.DSMRangeSize <= len(r.in); i += nvme.DSMRangeSize {
			n := uint64(binary.LittleEndian.Uint32(r.in[i+4:]))
			slba := binary.LittleEndian.Uint64(r.in[i+8:])
			if slba+n < slba || slba+n > ns.Blocks() {
				return 0, nvme.StatusLBARange | nvme.DNR, nil
			}
		}
		for i := 0; i+nvme.DSMRangeSize <= len(r.in); i += nvme.DSMRangeSize {
			n := uint64(binary.LittleEndian.Uint32(r.in[i+4:]))
			if st := zero(ns, binary.LittleEndian.Uint64(r.in[i+8:]), n, true); !st.OK() {
				return 0, st, nil
			}
		}
		if c.wcOff.Load() {
			return 0, c.flush(ns, " after Deallocate"), nil
		}
		return 0, nvme.StatusSuccess, nil
	}
	return 0, nvme.StatusInvalidOpcode | nvme.DNR, nil
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
		return 0x280 | nvme.DNR
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
			return 0x280 | nvme.DNR
		}
	}
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := ns.Backend.WriteAt(zeros[:k], off); err != nil {
			return 0x280 | nvme.DNR
		}
		off += k
		n -= k
	}
	return nvme.StatusSuccess
}
