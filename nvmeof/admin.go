package nvmeof

import (
	"encoding/binary"
	"slices"
	"time"
)

// Feature identifiers.
const (
	FeatArbitration = 0x01
	FeatPowerMgmt   = 0x02
	FeatVWC         = 0x06
	FeatNumQueues   = 0x07
	FeatAsyncEvent  = 0x0b
	FeatKATO        = 0x0f
	FeatHostID      = 0x81
)

// Controller limits this target reports.
const (
	aerl    = 3    // 0's based: four AERs held at most
	maxNSID = 1024 // NN
	// CTRATT: 128-bit host identifiers (HIDS) and traffic based keep alive
	// (TBKAS: any command, not only Keep Alive, restarts the timer).
	ctrattr = 1<<0 | 1<<6
	// aecSMART: the Async Event Configuration bits of the SMART / health
	// critical warnings (spare, temperature, reliability, read only,
	// volatile memory backup).
	aecSMART = 0x1f
)

// numd returns a Get Log Page's length in octets.
func logLen(cmd Command) uint64 {
	return (uint64(cmd.CDW(11)&0xffff)<<16 | uint64(cmd.CDW(10)>>16) + 1) * 4
}

// planAdmin checks an admin command.
func (c *controller) planAdmin(cmd Command) (dir, need int, st Status) {
	switch cmd.Opcode() {
	case AdminIdentify:
		return dirOut, IdentifySize, StatusSuccess
	case AdminGetLogPage:
		n := logLen(cmd)
		if n > uint64(c.t.cfg.MaxTransfer) {
			return 0, 0, StatusInvalidField | DNR
		}
		return dirOut, int(n), StatusSuccess
	case AdminGetFeatures:
		if uint8(cmd.CDW(10)) == FeatHostID && !c.discovery() {
			return dirOut, len(c.hostID), StatusSuccess
		}
		return dirNone, 0, StatusSuccess
	case AdminSetFeatures, AdminAER, AdminKeepAlive:
		return dirNone, 0, StatusSuccess
	case AdminAbort:
		if !c.discovery() {
			return dirNone, 0, StatusSuccess
		}
	}
	return 0, 0, StatusInvalidOpcode | DNR
}

// execAdmin runs an admin command.
func (c *controller) execAdmin(r *request) (res uint64, st Status, out []byte, held bool) {
	cmd := r.cmd
	switch cmd.Opcode() {
	case AdminIdentify:
		out, st = c.identify(r)
	case AdminGetLogPage:
		out, st = c.getLogPage(r)
	case AdminSetFeatures:
		res, st = c.setFeatures(cmd)
	case AdminGetFeatures:
		if uint8(cmd.CDW(10)) == FeatHostID && !c.discovery() {
			out, st = c.getHostID(r)
		} else {
			res, st = c.getFeatures(cmd)
		}
	case AdminKeepAlive:
		c.touch()
	case AdminAbort:
		res = 1 // not aborted: commands here finish without waiting on anything abortable
	case AdminAER:
		if len(c.heldAER) > aerl {
			return 0, StatusAERLimitExceeded | DNR, nil, false // as nvmet: retrying cannot help
		}
		if ev, ok := c.takeEvent(); ok {
			return ev, StatusSuccess, nil, false
		}
		// Held until an event (events.go) or the controller's end.
		c.heldAER = append(c.heldAER, r.idx)
		return 0, StatusSuccess, nil, true
	}
	return res, st, out, false
}

// controllerInfo is the Identify Controller data of c.
func (c *controller) controllerInfo() ControllerInfo {
	t := c.t
	mdts := uint8(0)
	for 4096<<mdts < t.cfg.MaxTransfer {
		mdts++
	}
	ci := ControllerInfo{
		Firmware: "1.0", MDTS: mdts, CntlID: c.id, Version: Version13,
		AERL: aerl, LPA: lpaExtendedData, KAS: 1, SQES: 0x66, CQES: 0x44,
		MaxCmd: uint16(t.cfg.MaxQueueSize), SGLS: sglsSupported | sglsKeyed | sglsOffset,
		IOCCSZ: uint32(CommandSize+t.cfg.InCapsuleData) / 16, IORCSZ: CompletionSize / 16, MSDBD: 1,
		CTRATT: ctrattr,
	}
	if c.discovery() {
		ci.Serial, ci.Model = "discovery", "goiwarp NVMe/iWARP discovery"
		ci.CtrlType, ci.SubNQN, ci.OAES = ControllerDisc, DiscoveryNQN, aecDiscChange
		return ci
	}
	// Several controllers, through several ports, on one subsystem (one
	// for each admin Connect): Linux refuses a second controller of a
	// subsystem whose CMIC says otherwise. ANA reporting (ana.go), whose
	// log Linux's host sizes by NANAGRPID and MNAN (which must be 1 ..
	// NN). OAES: a namespace added, and an ANA state changed, raise a
	// notice (events.go).
	ci.Serial, ci.Model, ci.SubNQN = c.sub.Serial, c.sub.Model, c.sub.NQN
	ci.CtrlType, ci.CMIC, ci.OAES = ControllerIO, cmicMultiPort|cmicMultiCtrl, aecNSAttr
	ci.NN, ci.MNAN, ci.ONCS, ci.VWC = maxNSID, maxNSID, oncsDSM|oncsWriteZeroes|oncsResv, 1
	ci.NWPC = nwpcWriteProtect | nwpcUntilPowerCyle
	if c.ana() {
		ci.CMIC |= cmicANA
		ci.OAES |= aecANAChange
		ci.ANATT, ci.ANACAP, ci.ANAGRPMAX, ci.NANAGRPID = anaTT, anaCap, MaxANAGroup, MaxANAGroup
	}
	return ci
}

// identify serves Identify: CNS 1 everywhere, CNS 0, 2 and 3 on NVM
// controllers.
func (c *controller) identify(r *request) ([]byte, Status) {
	cmd := r.cmd
	cns, nsid := uint8(cmd.CDW(10)), cmd.NSID()
	if c.discovery() && cns != CNSController {
		return nil, StatusInvalidField | DNR
	}
	out := r.out(IdentifySize)
	if out == nil {
		return nil, StatusInternalError
	}
	switch cns {
	case CNSController:
		ci := c.controllerInfo()
		ci.Append(out[:0])
	case CNSNamespace:
		if nsid == 0 || nsid > maxNSID {
			return nil, StatusInvalidNamespace | DNR
		}
		clear(out)
		if ns := c.sub.namespace(nsid); ns != nil {
			b := ns.Blocks()
			ni := NamespaceInfo{Size: b, Capacity: b, Utilization: b, LBADS: ns.lbads(), NMIC: nmicShared, NGUID: ns.NGUID}
			if ns.wp.Load() {
				ni.NSATTR = nsattrWP
			}
			if ns.resv != nil {
				ni.RESCAP = rescapAll
				if ns.resv.file != "" {
					ni.RESCAP |= rescapPTPL
				}
			}
			if c.ana() {
				ni.ANAGroup = ns.ANAGroup()
				if s := c.admin.port.ANAState(ni.ANAGroup); s == ANAInaccessible || s == ANAPersistentLoss {
					ni.Utilization = 0 // as nvmet: no space is in use through this path
				}
			}
			ni.Append(out[:0])
		} // an inactive NSID reads as zeros
	case CNSActiveNSList:
		if nsid >= 0xfffffffe {
			return nil, StatusInvalidNamespace | DNR
		}
		clear(out)
		i := 0
		for _, ns := range c.sub.namespaces() {
			if ns.ID > nsid && i < IdentifySize/4 {
				binary.LittleEndian.PutUint32(out[4*i:], ns.ID)
				i++
			}
		}
	case CNSIOCtrlCSI:
		// The NVM command set's (CSI in CDW11 bits 31:24): no limits
		// beyond MDTS to report, so zeros, as nvmet answers. Linux's host
		// asks for it at every connect.
		if cmd.CDW(11)>>24 != CSINVM {
			return nil, StatusInvalidField | DNR
		}
		clear(out)
	case CNSNSDescriptors:
		ns := c.sub.namespace(nsid)
		if ns == nil {
			return nil, noNamespace(nsid)
		}
		appendNSDescriptors(out[:0], ns.NGUID, ns.UUID)
	default:
		return nil, StatusInvalidField | DNR
	}
	return out, StatusSuccess
}

// getLogPage serves Get Log Page: error information, SMART / health and
// firmware slots on NVM controllers, the discovery log on discovery ones.
func (c *controller) getLogPage(r *request) ([]byte, Status) {
	cmd := r.cmd
	lid := uint8(cmd.CDW(10))
	off := uint64(cmd.CDW(12)) | uint64(cmd.CDW(13))<<32
	n := int(logLen(cmd))
	var log []byte
	switch {
	case lid == LogDiscovery && c.discovery():
		// Unmasked before the log is built, as nvmet clears the event
		// with the log under one lock: a change after this read raises a
		// notice even if the log shows it already, and none is lost.
		c.discLogRead(cmd.CDW(10)&(1<<15) != 0)
		genctr, ents := c.t.discoveryEntries(c.hostNQN, c.admin.qp.LocalAddr(), c.admin.port)
		log = appendDiscoveryLog(nil, genctr, ents)
		if testDiscoveryLog != nil {
			testDiscoveryLog(n)
		}
	case lid == LogError:
		log = make([]byte, errorLogEntry*(1)) // no errors recorded
	case lid == LogSMART && !c.discovery():
		if id := cmd.NSID(); id != 0 && id != 0xffffffff {
			return nil, StatusInvalidField | DNR // the log is the controller's: LPA bit 0 is clear
		}
		c.sub.countMu.Lock()
		cnt := c.sub.counters
		c.sub.countMu.Unlock()
		log = appendSMARTLog(nil, cnt, uint64(time.Since(c.t.start).Hours()))
	case lid == LogChangedNS && !c.discovery():
		// Reading the list empties it, so it is read whole or not at
		// all (nvmet refuses any other length too).
		if n != 4*maxChangedNS || off != 0 {
			return nil, StatusInvalidField | DNR
		}
		out := r.out(n)
		if out == nil {
			return nil, StatusInternalError
		}
		c.changedNSLog(out, cmd.CDW(10)&(1<<15) != 0)
		return out, StatusSuccess
	case lid == LogANA && c.ana():
		// LSP bit 0 (CDW10 bit 8): Return Groups Only. The page is as long
		// as Identify makes it (NANAGRPID descriptors, MNAN NSIDs), zeros
		// past its groups: nvme-cli reads that length in 4 KiB pieces,
		// and a piece past the groups is not past the page.
		log = c.anaLog(cmd.CDW(10)&(1<<8) != 0, cmd.CDW(10)&(1<<15) != 0)
		log = append(log, make([]byte, anaLogMax-len(log))...)
	case lid == LogResvNotice && !c.discovery():
		// One page a read, which takes it: read from its start, or not
		// at all (a refused read must not lose it).
		if off != 0 {
			return nil, StatusInvalidField | DNR
		}
		log = c.resvLogRead(cmd.CDW(10)&(1<<15) != 0)
	case lid == LogFirmware && !c.discovery():
		log = make([]byte, firmwareLogSize)
		log[0] = 1 // slot 1 active
		putASCII(log[8:16], "1.0")
	default:
		return nil, StatusInvalidLogPage | DNR
	}
	if off&3 != 0 || off > uint64(len(log)) {
		return nil, StatusInvalidField | DNR
	}
	out := r.out(n)
	if out == nil {
		return nil, StatusInternalError
	}
	clear(out[copy(out, log[off:]):])
	return out, StatusSuccess
}

// setFeatures serves Set Features.
func (c *controller) setFeatures(cmd Command) (uint64, Status) {
	fid, v := uint8(cmd.CDW(10)), cmd.CDW(11)
	if cmd.CDW(10)&(1<<31) != 0 {
		return 0, StatusFeatureNotSaveable | DNR
	}
	switch {
	case fid == FeatKATO:
		c.setKATO(v)
		return 0, StatusSuccess
	case fid == FeatAsyncEvent:
		// Only events a controller may raise can be enabled, as in Linux's
		// nvmet: on an NVM controller the SMART / health critical
		// warnings, which NVMe makes mandatory (never raised here),
		// Namespace Attribute and ANA Change Notices (OAES); on a discovery controller
		// Discovery Log Page Change Notices.
		mask := aecSMART | aecNSAttr | aecANAChange
		switch {
		case c.discovery():
			mask = aecDiscChange
		case !c.ana():
			mask &^= aecANAChange
		}
		if v&^mask != 0 {
			return 0, StatusInvalidField | DNR
		}
		c.mu.Lock()
		c.aec = v
		c.mu.Unlock()
		return uint64(v), StatusSuccess
	case c.discovery():
	case fid == FeatNumQueues:
		nsqr, ncqr := v&0xffff, v>>16
		if nsqr == 0xffff || ncqr == 0xffff {
			return 0, StatusInvalidField | DNR
		}
		n := min(int(max(nsqr, ncqr))+1, c.t.cfg.MaxIOQueues)
		c.mu.Lock()
		if len(c.ioq) > 0 { // NVMe base: only before any I/O queue exists
			c.mu.Unlock()
			return 0, StatusCommandSequenceError | DNR
		}
		c.nrQueues = n
		c.mu.Unlock()
		return uint64(n-1) | uint64(n-1)<<16, StatusSuccess
	case fid == FeatVWC:
		if v&1 == 0 && !c.wcOff.Swap(true) {
			// What the cache holds becomes durable now, as the writes
			// from here on will be.
			if st := c.flushEach(" as the write cache is turned off"); !st.OK() {
				c.wcOff.Store(false)
				return 0, st
			}
		}
		c.wcOff.Store(v&1 == 0)
		return 0, StatusSuccess
	case fid == FeatResvMask:
		if st := c.setResvMask(cmd.NSID(), v); !st.OK() {
			return 0, st
		}
		return uint64(v), StatusSuccess
	case fid == FeatResvPersist:
		return c.setResvPersist(cmd.NSID(), v)
	case fid == FeatWriteProtect:
		return c.setWriteProtect(cmd.NSID(), v)
	case fid == FeatHostID:
		// Over fabrics the host ID is the Connect's (NVMe base 2.0
		// section 5.27.1.26), as nvmet answers.
		return 0, StatusCommandSequenceError | DNR
	}
	return 0, StatusInvalidField | DNR
}

// getHostID serves Get Features Host Identifier: the 128-bit host ID
// the host connected with, which only an extended (EXHID, CDW11 bit 0)
// request may read, as nvmet.
func (c *controller) getHostID(r *request) ([]byte, Status) {
	if r.cmd.CDW(11)&1 == 0 {
		return nil, StatusInvalidField | DNR
	}
	out := r.out(len(c.hostID))
	if out == nil {
		return nil, StatusInternalError
	}
	copy(out, c.hostID[:])
	return out, StatusSuccess
}

// getFeatures serves Get Features (current values).
func (c *controller) getFeatures(cmd Command) (uint64, Status) {
	fid := uint8(cmd.CDW(10))
	switch {
	case fid == FeatResvMask && !c.discovery():
		return c.getResvMask(cmd.NSID())
	case fid == FeatResvPersist && !c.discovery():
		return c.getResvPersist(cmd.NSID())
	case fid == FeatWriteProtect && !c.discovery():
		return c.getWriteProtect(cmd.NSID())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case fid == FeatKATO:
		return uint64(c.kato.Load()), StatusSuccess
	case fid == FeatAsyncEvent:
		return uint64(c.aec), StatusSuccess
	case c.discovery():
	case fid == FeatNumQueues:
		n := c.nrQueues
		if n == 0 {
			n = c.t.cfg.MaxIOQueues
		}
		return uint64(n-1) | uint64(n-1)<<16, StatusSuccess
	case fid == FeatVWC:
		if c.wcOff.Load() {
			return 0, StatusSuccess
		}
		return 1, StatusSuccess
	case fid == FeatArbitration, fid == FeatPowerMgmt:
		return 0, StatusSuccess
	}
	return 0, StatusInvalidField | DNR
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
