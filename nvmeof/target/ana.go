package target

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// Asymmetric Namespace Access (ANA, NVMe base 2.0 section 8.1), as Linux's
// nvmet has it: each namespace belongs to an ANA group (1 unless set), and
// each port gives every group a state. A host with several paths to a
// subsystem (one controller through each port) reads the states in the
// ANA log page and sends I/O down an optimized path, a non-optimized one
// when there is no optimized one, and none down an inaccessible one, where
// I/O commands fail with a path status that makes it try another path. A
// state changed while hosts are connected (Port.SetANAState) raises an ANA
// Change notice on each controller through that port, upon which Linux's
// host reads the log again and moves its I/O: the way an administrator
// takes a path out of service, or fails over, without a host losing its
// namespace.

const (
	// anaCap: the states a controller reports (optimized, non-optimized,
	// inaccessible, persistent loss, change); group IDs may change while
	// a namespace is attached (bit 6 clear). anaTT is the ANA transition
	// time in seconds: how long a group stays in the change state at
	// most, after which Linux's host resets the controller.
	anaCap = 0x1f
	anaTT  = 10
	// anaLogMax is the longest ANA log: every group and every NSID; the
	// length Linux's host reads (NANAGRPID descriptors, MNAN NSIDs).
	anaLogMax = nvme.ANAHeaderSize + nvme.MaxANAGroup*nvme.ANADescSize + maxNSID*4
)

// ana reports whether the controller reports ANA: an NVM controller whose
// target's transfers can carry the whole ANA log page (Linux's host reads
// it in one command, and gives up ANA if it cannot: MaxTransfer 8 KiB is
// too small). A target that does not report ANA does not apply the ports'
// states either: its hosts would not know why their I/O failed.
func (c *controller) ana() bool { return !c.discovery() && c.t.cfg.MaxTransfer >= anaLogMax }

// anaStatus is the status an I/O command on a namespace of the given state
// completes with, or Success.
func anaStatus(s nvme.ANAState) nvme.Status {
	switch s {
	case nvme.ANAInaccessible:
		return nvme.StatusANAInaccessible
	case nvme.ANAPersistentLoss:
		return nvme.StatusANAPersistentLoss
	case nvme.ANAChange:
		return nvme.StatusANATransition
	}
	return nvme.StatusSuccess
}

// anaStatus is the status of an I/O command on ns through port p, where
// the controller reports ANA.
func (c *controller) anaStatus(p *Port, ns *Namespace) nvme.Status {
	if !c.ana() {
		return nvme.StatusSuccess
	}
	return anaStatus(p.ANAState(ns.ANAGroup()))
}

func checkANAGroup(g uint32) error {
	if g < 1 || g > nvme.MaxANAGroup {
		return fmt.Errorf("nvmeof: ANA group %d: want 1 to %d", g, nvme.MaxANAGroup)
	}
	return nil
}

// ANAState returns the state of ANA group g through the port. Unless set,
// group 1 is optimized and every other inaccessible, as on a new port of
// nvmet.
func (p *Port) ANAState(g uint32) nvme.ANAState {
	if checkANAGroup(g) != nil {
		return nvme.ANAInaccessible
	}
	if s := nvme.ANAState(p.ana[g].Load()); s != 0 {
		return s
	}
	if g == 1 {
		return nvme.ANAOptimized
	}
	return nvme.ANAInaccessible
}

// SetANAState sets the state of ANA group g through the port, as writing
// ana_groups/<g>/ana/state of an nvmet port does. Each controller that
// came through the port, and enabled ANA Change Notices, is told, and
// commands its host sends from then on find the new state: through an
// inaccessible port they fail with a path status, and Linux's host sends
// them down another path.
func (p *Port) SetANAState(g uint32, s nvme.ANAState) error {
	if err := checkANAGroup(g); err != nil {
		return err
	}
	if !s.Valid() {
		return fmt.Errorf("nvmeof: %v cannot be set", s)
	}
	t := p.t
	t.mu.Lock()
	if p.closed || t.closed {
		t.mu.Unlock()
		return fmt.Errorf("nvmeof: port %d is closed", p.id)
	}
	if old := p.ANAState(g); old == s {
		t.mu.Unlock()
		return nil
	}
	p.ana[g].Store(uint32(s))
	t.anaChg++
	var ctrls []*controller
	for _, c := range t.ctrls {
		if c.sub != nil && c.admin.port == p {
			ctrls = append(ctrls, c)
		}
	}
	t.mu.Unlock()
	t.logf("nvmeof: port %d: ANA group %d %v", p.id, g, s)
	for _, c := range ctrls {
		c.anaChanged()
	}
	return nil
}

// ANAGroup returns the namespace's ANA group.
func (ns *Namespace) ANAGroup() uint32 { return ns.anaGrp.Load() }

// SetANAGroup moves namespace id to ANA group g, as writing its ana_grpid
// in nvmet's configfs does: every controller of the subsystem is told (an
// ANA Change notice), and commands from then on find the state of the new
// group through their port.
func (s *Subsystem) SetANAGroup(id, g uint32) error {
	if err := checkANAGroup(g); err != nil {
		return err
	}
	s.mu.Lock()
	if id == 0 || id > uint32(len(s.ns)) || s.ns[id-1] == nil {
		s.mu.Unlock()
		return fmt.Errorf("nvmeof: %s has no namespace %d", s.NQN, id)
	}
	ns := s.ns[id-1]
	if ns.anaGrp.Swap(g) == g {
		s.mu.Unlock()
		return nil
	}
	ctrls := s.controllers()
	targets := s.servedBy() // s.mu held: the map changes with targets joining and leaving
	s.mu.Unlock()
	for _, t := range targets {
		t.mu.Lock()
		t.anaChg++
		t.mu.Unlock()
	}
	for _, c := range ctrls {
		c.anaChanged()
	}
	return nil
}

// anaChanged raises an ANA Change notice if the host enabled it and has
// read the log since the last one (masked until then, as in nvmet).
func (c *controller) anaChanged() {
	c.mu.Lock()
	raise := !c.dead && c.aec&nvme.AECANAChange != 0 && !c.anaMasked
	if raise {
		c.anaMasked = true
		c.events = append(c.events, nvme.AERANAChanged)
	}
	c.mu.Unlock()
	if raise {
		c.admin.kick()
	}
}

// anaLog builds the ANA log page as the controller's port shows it: a
// descriptor for group 1 and for every other group a namespace of the
// subsystem is in, in group order, each with its state through the port
// and (unless rgo, Return Groups Only) its NSIDs in ascending order, which
// Linux's host relies on. Read without rae (Retain Asynchronous Event) it
// unmasks the notice, before the log is built, so that no change is lost.
func (c *controller) anaLog(rgo, rae bool) []byte {
	if !rae {
		c.mu.Lock()
		c.anaMasked = false
		c.mu.Unlock()
	}
	t, p := c.t, c.admin.port
	t.mu.Lock()
	chg := t.anaChg
	t.mu.Unlock()
	groups := map[uint32][]uint32{1: nil}
	for _, ns := range c.sub.Namespaces() {
		g := ns.ANAGroup()
		groups[g] = append(groups[g], ns.ID)
	}
	ids := slices.Sorted(func(yield func(uint32) bool) {
		for g := range groups {
			if !yield(g) {
				return
			}
		}
	})
	le := binary.LittleEndian
	log := make([]byte, nvme.ANAHeaderSize, anaLogMax)
	le.PutUint64(log[0:], chg)
	le.PutUint16(log[8:], uint16(len(ids)))
	for _, g := range ids {
		nsids := groups[g]
		if rgo {
			nsids = nil
		}
		d := len(log)
		log = append(log, make([]byte, nvme.ANADescSize)...)
		le.PutUint32(log[d:], g)
		le.PutUint32(log[d+4:], uint32(len(nsids)))
		le.PutUint64(log[d+8:], chg)
		log[d+16] = byte(p.ANAState(g))
		for _, id := range nsids {
			log = le.AppendUint32(log, id)
		}
	}
	return log
}
