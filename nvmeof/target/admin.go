package target

import (
	"encoding/binary"
	"slices"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// Controller limits this target reports.
const (
	aerl    = 3    // 0's based: four AERs held at most
	maxNSID = 1024 // NN
	// CTRATT: 128-bit host identifiers (HIDS) and traffic based keep alive
	// (TBKAS: any command, not only Keep Alive, restarts the timer).
	ctrattr = 1<<0 | 1<<6
)

// parseAdmin checks an admin command and chooses its executor.
func (c *controller) parseAdmin(r *request) nvme.Status {
	cmd := r.cmd
	switch cmd.Opcode() {
	case nvme.AdminIdentify:
		r.execute, r.dir, r.need = execIdentify, dirOut, nvme.IdentifySize
	case nvme.AdminGetLogPage:
		n := cmd.LogLen()
		if n > uint64(c.t.cfg.MaxTransfer) {
			return nvme.StatusInvalidField | nvme.DNR
		}
		r.execute, r.dir, r.need = execGetLogPage, dirOut, int(n)
	case nvme.AdminGetFeatures:
		r.execute = execGetFeatures
		if uint8(cmd.CDW(10)) == nvme.FeatHostID && !c.discovery() {
			r.execute, r.dir, r.need = execGetHostID, dirOut, len(c.hostID)
		}
	case nvme.AdminSetFeatures:
		r.execute = execSetFeatures
	case nvme.AdminAER:
		r.execute = execAER
	case nvme.AdminKeepAlive:
		r.execute = execKeepAlive
	case nvme.AdminAbort:
		if c.discovery() {
			return nvme.StatusInvalidOpcode | nvme.DNR
		}
		r.execute = execAbort
	default:
		return nvme.StatusInvalidOpcode | nvme.DNR
	}
	return nvme.StatusSuccess
}

// The admin commands' executors.

func execIdentify(q *queue, r *request) (uint64, nvme.Status) { return 0, q.ctrl.identify(r) }

func execGetLogPage(q *queue, r *request) (uint64, nvme.Status) { return 0, q.ctrl.getLogPage(r) }

func execSetFeatures(q *queue, r *request) (uint64, nvme.Status) { return q.ctrl.setFeatures(r.cmd) }

func execGetFeatures(q *queue, r *request) (uint64, nvme.Status) { return q.ctrl.getFeatures(r.cmd) }

func execGetHostID(q *queue, r *request) (uint64, nvme.Status) { return 0, q.ctrl.getHostID(r) }

func execKeepAlive(q *queue, _ *request) (uint64, nvme.Status) {
	q.ctrl.touch()
	return 0, nvme.StatusSuccess
}

// execAbort aborts nothing (result 1): commands here finish without
// waiting on anything abortable.
func execAbort(*queue, *request) (uint64, nvme.Status) { return 1, nvme.StatusSuccess }

// execAER completes an Asynchronous Event Request with a waiting event,
// or holds it (r.held) until an event (events.go) or the controller's
// end.
func execAER(q *queue, r *request) (uint64, nvme.Status) {
	c := q.ctrl
	if len(c.heldAER) > aerl {
		return 0, nvme.StatusAERLimitExceeded | nvme.DNR // as nvmet: retrying cannot help
	}
	if ev, ok := c.takeEvent(); ok {
		return ev, nvme.StatusSuccess
	}
	c.heldAER = append(c.heldAER, r.idx)
	r.held = true
	return 0, nvme.StatusSuccess
}

// controllerInfo is the Identify Controller data of c.
func (c *controller) controllerInfo() nvme.ControllerInfo {
	t := c.t
	mdts := uint8(0)
	for 4096<<mdts < t.cfg.MaxTransfer {
		mdts++
	}
	ci := nvme.ControllerInfo{
		Firmware: "1.0", MDTS: mdts, CntlID: c.id, Version: nvme.Version13,
		AERL: aerl, LPA: nvme.LPAExtendedData, KAS: 1, SQES: 0x66, CQES: 0x44,
		MaxCmd: uint16(t.cfg.MaxQueueSize), SGLS: nvme.SGLSSupported | nvme.SGLSKeyed | nvme.SGLSOffset,
		IOCCSZ: uint32(nvme.CommandSize+t.cfg.InCapsuleData) / 16, IORCSZ: nvme.CompletionSize / 16, MSDBD: 1,
		CTRATT: ctrattr,
	}
	if c.discovery() {
		ci.Serial, ci.Model = "discovery", "goiwarp NVMe/iWARP discovery"
		ci.CtrlType, ci.SubNQN, ci.OAES = nvme.ControllerDisc, nvme.DiscoveryNQN, nvme.AECDiscChange
		return ci
	}
	// Several controllers, through several ports, on one subsystem (one
	// for each admin Connect): Linux refuses a second controller of a
	// subsystem whose CMIC says otherwise. ANA reporting (ana.go), whose
	// log Linux's host sizes by NANAGRPID and MNAN (which must be 1 ..
	// NN). OAES: a namespace added, and an ANA state changed, raise a
	// notice (events.go).
	ci.Serial, ci.Model, ci.SubNQN = c.sub.Serial, c.sub.Model, c.sub.NQN
	ci.CtrlType, ci.CMIC, ci.OAES = nvme.ControllerIO, nvme.CMICMultiPort|nvme.CMICMultiCtrl, nvme.AECNSAttr
	ci.NN, ci.MNAN, ci.ONCS, ci.VWC = maxNSID, maxNSID, nvme.ONCSDSM|nvme.ONCSWriteZeroes|nvme.ONCSResv, 1
	ci.NWPC = nvme.NWPCWriteProtect | nvme.NWPCUntilPowerCycle
	if c.ana() {
		ci.CMIC |= nvme.CMICANA
		ci.OAES |= nvme.AECANAChange
		ci.ANATT, ci.ANACAP, ci.ANAGRPMAX, ci.NANAGRPID = anaTT, anaCap, nvme.MaxANAGroup, nvme.MaxANAGroup
	}
	return ci
}

// identify serves Identify: CNS 1 everywhere, CNS 0, 2 and 3 on NVM
// controllers.
func (c *controller) identify(r *request) nvme.Status {
	cmd := r.cmd
	cns, nsid := uint8(cmd.CDW(10)), cmd.NSID()
	if c.discovery() && cns != nvme.CNSController {
		return nvme.StatusInvalidField | nvme.DNR
	}
	out := r.out
	if out == nil {
		return nvme.StatusInternalError
	}
	switch cns {
	case nvme.CNSController:
		ci := c.controllerInfo()
		ci.Append(out[:0])
	case nvme.CNSNamespace:
		if nsid == 0 || nsid > maxNSID {
			return nvme.StatusInvalidNamespace | nvme.DNR
		}
		clear(out)
		if ns := c.sub.Namespace(nsid); ns != nil {
			b := ns.Blocks()
			ni := nvme.NamespaceInfo{Size: b, Capacity: b, Utilization: b, LBADS: ns.lbads(), NMIC: nvme.NMICShared, NGUID: ns.NGUID}
			if ns.wp.Load() {
				ni.NSATTR = nvme.NSATTRWriteProtect
			}
			if ns.resv != nil {
				ni.RESCAP = rescapAll
				if ns.resv.file != "" {
					ni.RESCAP |= nvme.RESCAPPTPL
				}
			}
			if c.ana() {
				ni.ANAGroup = ns.ANAGroup()
				if s := c.admin.port.ANAState(ni.ANAGroup); s == nvme.ANAInaccessible || s == nvme.ANAPersistentLoss {
					ni.Utilization = 0 // as nvmet: no space is in use through this path
				}
			}
			ni.Append(out[:0])
		} // an inactive NSID reads as zeros
	case nvme.CNSActiveNSList:
		if nsid >= 0xfffffffe {
			return nvme.StatusInvalidNamespace | nvme.DNR
		}
		clear(out)
		i := 0
		for _, ns := range c.sub.Namespaces() {
			if ns.ID > nsid && i < nvme.IdentifySize/4 {
				binary.LittleEndian.PutUint32(out[4*i:], ns.ID)
				i++
			}
		}
	case nvme.CNSIOCtrlCSI:
		// The NVM command set's (CSI in CDW11 bits 31:24): no limits
		// beyond MDTS to report, so zeros, as nvmet answers. Linux's host
		// asks for it at every connect.
		if cmd.CDW(11)>>24 != nvme.CSINVM {
			return nvme.StatusInvalidField | nvme.DNR
		}
		clear(out)
	case nvme.CNSNSDescriptors:
		ns := c.sub.Namespace(nsid)
		if ns == nil {
			return noNamespace(nsid)
		}
		nvme.AppendNSDescriptors(out[:0], ns.NGUID, ns.UUID)
	default:
		return nvme.StatusInvalidField | nvme.DNR
	}
	return nvme.StatusSuccess
}

// getLogPage serves Get Log Page: error information, SMART / health and
// firmware slots on NVM controllers, the discovery log on discovery ones.
func (c *controller) getLogPage(r *request) nvme.Status {
	cmd := r.cmd
	lid := uint8(cmd.CDW(10))
	off := uint64(cmd.CDW(12)) | uint64(cmd.CDW(13))<<32
	n := int(cmd.LogLen())
	var log []byte
	switch {
	case lid == nvme.LogDiscovery && c.discovery():
		// Unmasked before the log is built, as nvmet clears the event
		// with the log under one lock: a change after this read raises a
		// notice even if the log shows it already, and none is lost.
		c.discLogRead(cmd.CDW(10)&(1<<15) != 0)
		genctr, ents := c.t.discoveryEntries(c.hostNQN, c.admin.qp.LocalAddr(), c.admin.port)
		log = nvme.AppendDiscoveryLog(nil, genctr, ents)
		if testDiscoveryLog != nil {
			testDiscoveryLog(n)
		}
	case lid == nvme.LogError:
		log = make([]byte, nvme.ErrorLogEntrySize*(1)) // no errors recorded
	case lid == nvme.LogSMART && !c.discovery():
		if id := cmd.NSID(); id != 0 && id != nvme.NSIDAll {
			return nvme.StatusInvalidField | nvme.DNR // the log is the controller's: LPA bit 0 is clear
		}
		c.sub.countMu.Lock()
		cnt := c.sub.counters
		c.sub.countMu.Unlock()
		log = nvme.AppendSMARTLog(nil, cnt, uint64(time.Since(c.t.start).Hours()))
	case lid == nvme.LogChangedNS && !c.discovery():
		// Reading the list empties it, so it is read whole or not at
		// all (nvmet refuses any other length too).
		if n != 4*nvme.MaxChangedNS || off != 0 {
			return nvme.StatusInvalidField | nvme.DNR
		}
		out := r.out
		if out == nil {
			return nvme.StatusInternalError
		}
		c.changedNSLog(out, cmd.CDW(10)&(1<<15) != 0)
		return nvme.StatusSuccess
	case lid == nvme.LogANA && c.ana():
		// LSP bit 0 (CDW10 bit 8): Return Groups Only. The page is as long
		// as Identify makes it (NANAGRPID descriptors, MNAN NSIDs), zeros
		// past its groups: nvme-cli reads that length in 4 KiB pieces,
		// and a piece past the groups is not past the page.
		log = c.anaLog(cmd.CDW(10)&(1<<8) != 0, cmd.CDW(10)&(1<<15) != 0)
		log = append(log, make([]byte, anaLogMax-len(log))...)
	case lid == nvme.LogResvNotice && !c.discovery():
		// One page a read, which takes it: read from its start, or not
		// at all (a refused read must not lose it).
		if off != 0 {
			return nvme.StatusInvalidField | nvme.DNR
		}
		log = c.resvLogRead(cmd.CDW(10)&(1<<15) != 0)
	case lid == nvme.LogFirmware && !c.discovery():
		log = make([]byte, nvme.FirmwareLogSize)
		log[0] = 1 // slot 1 active
		nvme.PutASCII(log[8:16], "1.0")
	default:
		return nvme.StatusInvalidLogPage | nvme.DNR
	}
	if off&3 != 0 || off > uint64(len(log)) {
		return nvme.StatusInvalidField | nvme.DNR
	}
	out := r.out
	if out == nil {
		return nvme.StatusInternalError
	}
	clear(out[copy(out, log[off:]):])
	return nvme.StatusSuccess
}

// setFeatures serves Set Features.
func (c *controller) setFeatures(cmd nvme.Command) (uint64, nvme.Status) {
	fid, v := uint8(cmd.CDW(10)), cmd.CDW(11)
	if cmd.CDW(10)&(1<<31) != 0 {
		return 0, nvme.StatusFeatureNotSaveable | nvme.DNR
	}
	switch {
	case fid == nvme.FeatKATO:
		c.setKATO(v)
		return 0, nvme.StatusSuccess
	case fid == nvme.FeatAsyncEvent:
		// Only events a controller may raise can be enabled, as in Linux's
		// nvmet: on an NVM controller the SMART / health critical
		// warnings, which NVMe makes mandatory (never raised here),
		// Namespace Attribute and ANA Change Notices (OAES); on a discovery controller
		// Discovery Log Page Change Notices.
		mask := nvme.AECSMART | nvme.AECNSAttr | nvme.AECANAChange
		switch {
		case c.discovery():
			mask = nvme.AECDiscChange
		case !c.ana():
			mask &^= nvme.AECANAChange
		}
		if v&^mask != 0 {
			return 0, nvme.StatusInvalidField | nvme.DNR
		}
		c.mu.Lock()
		c.aec = v
		c.mu.Unlock()
		return uint64(v), nvme.StatusSuccess
	case c.discovery():
	case fid == nvme.FeatNumQueues:
		nsqr, ncqr := v&0xffff, v>>16
		if nsqr == 0xffff || ncqr == 0xffff {
			return 0, nvme.StatusInvalidField | nvme.DNR
		}
		n := min(int(max(nsqr, ncqr))+1, c.t.cfg.MaxIOQueues)
		c.mu.Lock()
		if len(c.ioq) > 0 { // NVMe base: only before any I/O queue exists
			c.mu.Unlock()
			return 0, nvme.StatusCommandSequenceError | nvme.DNR
		}
		c.nrQueues = n
		c.mu.Unlock()
		return uint64(n-1) | uint64(n-1)<<16, nvme.StatusSuccess
	case fid == nvme.FeatVWC:
		if v&1 == 0 && !c.wcOff.Swap(true) {
			// What the cache holds becomes durable now, as the writes
			// from here on will be.
			if st := c.flushEach(" as the write cache is turned off"); !st.OK() {
				c.wcOff.Store(false)
				return 0, st
			}
		}
		c.wcOff.Store(v&1 == 0)
		return 0, nvme.StatusSuccess
	case fid == nvme.FeatResvMask:
		if st := c.setResvMask(cmd.NSID(), v); !st.OK() {
			return 0, st
		}
		return uint64(v), nvme.StatusSuccess
	case fid == nvme.FeatResvPersist:
		return c.setResvPersist(cmd.NSID(), v)
	case fid == nvme.FeatWriteProtect:
		return c.setWriteProtect(cmd.NSID(), v)
	case fid == nvme.FeatHostID:
		// Over fabrics the host ID is the Connect's (NVMe base 2.0
		// section 5.27.1.26), as nvmet answers.
		return 0, nvme.StatusCommandSequenceError | nvme.DNR
	}
	return 0, nvme.StatusInvalidField | nvme.DNR
}

// getHostID serves Get Features Host Identifier: the 128-bit host ID
// the host connected with, which only an extended (EXHID, CDW11 bit 0)
// request may read, as nvmet.
func (c *controller) getHostID(r *request) nvme.Status {
	if r.cmd.CDW(11)&1 == 0 {
		return nvme.StatusInvalidField | nvme.DNR
	}
	out := r.out
	if out == nil {
		return nvme.StatusInternalError
	}
	copy(out, c.hostID[:])
	return nvme.StatusSuccess
}

// getFeatures serves Get Features (current values).
func (c *controller) getFeatures(cmd nvme.Command) (uint64, nvme.Status) {
	fid := uint8(cmd.CDW(10))
	switch {
	case fid == nvme.FeatResvMask && !c.discovery():
		return c.getResvMask(cmd.NSID())
	case fid == nvme.FeatResvPersist && !c.discovery():
		return c.getResvPersist(cmd.NSID())
	case fid == nvme.FeatWriteProtect && !c.discovery():
		return c.getWriteProtect(cmd.NSID())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case fid == nvme.FeatKATO:
		return uint64(c.kato.Load()), nvme.StatusSuccess
	case fid == nvme.FeatAsyncEvent:
		return uint64(c.aec), nvme.StatusSuccess
	case c.discovery():
	case fid == nvme.FeatNumQueues:
		n := c.nrQueues
		if n == 0 {
			n = c.t.cfg.MaxIOQueues
		}
		return uint64(n-1) | uint64(n-1)<<16, nvme.StatusSuccess
	case fid == nvme.FeatVWC:
		if c.wcOff.Load() {
			return 0, nvme.StatusSuccess
		}
		return 1, nvme.StatusSuccess
	case fid == nvme.FeatArbitration, fid == nvme.FeatPowerMgmt:
		return 0, nvme.StatusSuccess
	}
	return 0, nvme.StatusInvalidField | nvme.DNR
}

// sortedSubs returns the subsystems in NQN order.
// testDiscoveryLog, if set, is called with the length asked for once a
// discovery log is built, before it is served (tests: a log that changes between reads).
var testDiscoveryLog func(n int)

func sortedSubs(m map[string]*Subsystem) []*Subsystem {
	s := make([]*Subsystem, 0, len(m))
	for _, v := range m {
		s = append(s, v)
	}
	slices.SortFunc(s, func(a, b *Subsystem) int {
		switch {
		case a.NQN < b.NQN:
			return -1
		case a.NQN > b.NQN:
			return 1
		}
		return 0
	})
	return s
}
