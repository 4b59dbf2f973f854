package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
)

// served is what a target serves from a configuration, so that a reload
// (SIGHUP) changes only what the file changed: hosts connected to what
// stayed keep their controllers.
type served struct {
	t     *target.Target
	ports map[uint16]servedPort // once listening
	subs  map[string]*servedSub
	logf  func(format string, args ...any)
	// late closes the backends of namespaces removed while a command
	// still used them (removeWait passed), once it is done.
	late sync.WaitGroup
}

// removeWait bounds how long a reload waits for the commands still using
// a removed namespace's backend (a backend on a hung network file system
// may never answer): past it the reload goes on, and the backend is
// closed when they are done. A variable for tests.
var removeWait = 10 * time.Second

// backend is a namespace's storage as iwarp-nvmet opens it: a file or a
// block device (openBackend, a variable for tests).
type backend interface {
	target.Backend
	Close() error
}

var openBackend = func(path string) (backend, error) { return target.OpenFileBackend(path) }

type servedPort struct {
	plan portPlan
	port *target.Port
}

type servedSub struct {
	sub  *target.Subsystem
	plan subPlan
	ns   map[uint32]servedNS
}

type servedNS struct {
	plan nsPlan
	ns   *target.Namespace
	b    backend
}

// apply makes the target serve p. What fails (a device that does not
// open) is logged and left out, the rest applied; the errors are returned
// joined.
func (s *served) apply(ctx context.Context, p *plan) error {
	if s.subs == nil {
		s.subs = map[string]*servedSub{}
	}
	var errs []error
	fail := func(err error) {
		s.logf("config: %v", err)
		errs = append(errs, err)
	}
	// ANA states that make a group accessible on a port that stays go
	// first, those that take one away last (applyPorts): a namespace
	// moved to another group is never inaccessible on every path between.
	if s.ports != nil {
		for _, pp := range p.ports {
			if cur, ok := s.ports[pp.id]; ok && cur.plan.addr == pp.addr {
				s.applyANA(cur, pp, true)
			}
		}
	}
	want := map[string]bool{}
	for _, sp := range p.subs {
		want[sp.nqn] = true
	}
	for nqn, ss := range s.subs {
		if !want[nqn] {
			rctx, cancel := context.WithTimeout(ctx, removeWait)
			err := s.t.RemoveSubsystem(rctx, nqn)
			cancel()
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				// Off the target, its namespaces out; their backends
				// close once the commands stuck in them are done.
				for id, n := range ss.ns {
					s.closeLate(nqn, id, n)
				}
				clear(ss.ns)
			case err != nil:
				fail(err)
				continue
			default:
				ss.closeAll(s)
			}
			delete(s.subs, nqn)
			s.logf("config: removed subsystem %s", nqn)
		}
	}
	for _, sp := range p.subs {
		ss := s.subs[sp.nqn]
		if ss == nil {
			sub, err := target.NewSubsystem(sp.nqn)
			if err != nil {
				fail(err)
				continue
			}
			if sp.serial != "" {
				sub.Serial = sp.serial
			}
			if sp.model != "" {
				sub.Model = sp.model
			}
			ss = &servedSub{sub: sub, ns: map[uint32]servedNS{}}
			ss.setHosts(sp)
			if err := s.t.AddSubsystem(sub); err != nil {
				fail(err)
				continue
			}
			s.subs[sp.nqn] = ss
			s.logf("config: added subsystem %s", sp.nqn)
		} else {
			if sp.serial != ss.plan.serial || sp.model != ss.plan.model {
				s.logf("config: %s: serial and model are set when a subsystem is added: not applied", sp.nqn)
				sp.serial, sp.model = ss.plan.serial, ss.plan.model
			}
			if sp.anyHost != ss.plan.anyHost || !slices.Equal(sp.hosts, ss.plan.hosts) {
				ss.setHosts(sp)
				s.logf("config: %s: allowed hosts changed (hosts connected stay connected)", sp.nqn)
			}
		}
		ss.plan = sp
		for _, err := range ss.applyNS(ctx, s, sp.ns) {
			fail(err)
		}
	}
	if s.ports != nil {
		for _, err := range s.applyPorts(ctx, p.ports) {
			fail(err)
		}
	}
	return errors.Join(errs...)
}

// listen opens the plan's ports (after apply has added the subsystems).
func (s *served) listen(ctx context.Context, ports []portPlan) error {
	s.ports = map[uint16]servedPort{}
	for _, pp := range ports {
		if err := s.open(ctx, pp); err != nil {
			return err
		}
	}
	return nil
}

func (s *served) open(ctx context.Context, pp portPlan) error {
	port, err := s.t.ListenPort(ctx, "tcp", pp.addr, target.PortConfig{ID: pp.id, Subsystems: pp.subs, ANA: pp.ana, Referrals: pp.refs})
	if err != nil {
		return fmt.Errorf("port %d: %w", pp.id, err)
	}
	s.ports[pp.id] = servedPort{pp, port}
	s.logf("config: port %d on %v: %s", pp.id, port.Addr(), links(pp.subs))
	return nil
}

// applyPorts applies a reload's ports as nvmet's configfs would change:
// a port gone from the file is closed (its hosts disconnected), a new one
// opened, one moved to another address closed and opened there; a
// subsystem unlinked from a port disconnects the hosts that reached it
// through that port; ANA states changed are set, and the hosts through
// the port told.
func (s *served) applyPorts(ctx context.Context, ports []portPlan) []error {
	var errs []error
	want := map[uint16]portPlan{}
	for _, pp := range ports {
		want[pp.id] = pp
	}
	moved := map[uint16]portPlan{}
	for _, id := range slices.Sorted(maps.Keys(s.ports)) {
		cur := s.ports[id]
		pp, ok := want[id]
		if ok && pp.addr == cur.plan.addr {
			continue
		}
		if ok {
			moved[id] = cur.plan
		}
		cur.port.Close() // logged by the target
		delete(s.ports, id)
	}
	for _, pp := range ports {
		cur, ok := s.ports[pp.id]
		switch {
		case !ok:
			err := s.open(ctx, pp)
			if old, was := moved[pp.id]; err != nil && was {
				// The new address failed: back to the old one, so that
				// the port is not lost to a typo.
				if err2 := s.open(ctx, old); err2 != nil {
					err = errors.Join(err, err2)
				} else {
					err = fmt.Errorf("%w: port %d stays on %s", err, pp.id, old.addr)
				}
			}
			if err != nil {
				errs = append(errs, err)
			}
		default:
			if !slices.Equal(cur.plan.subs, pp.subs) {
				if err := cur.port.SetSubsystems(pp.subs...); err != nil {
					s.logf("config: port %d: %v", pp.id, err)
					continue
				}
				cur.plan.subs = pp.subs
				s.logf("config: port %d now links %s", pp.id, links(pp.subs))
			}
			s.applyANA(cur, pp, false)
			cur.plan.ana = pp.ana
			if !slices.Equal(cur.plan.refs, pp.refs) {
				if err := cur.port.SetReferrals(pp.refs...); err != nil {
					s.logf("config: port %d: %v", pp.id, err)
				} else {
					cur.plan.refs = pp.refs
					s.logf("config: port %d now refers to %d discovery services", pp.id, len(pp.refs))
				}
			}
			s.ports[pp.id] = cur
		}
	}
	return errs
}

// applyANA sets the ANA states a reload changed on a port (with
// accessible, only those that make a group optimized or non-optimized);
// a group the file no longer sets goes back to nvmet's default (group 1
// optimized, any other inaccessible). Hosts connected through the port
// are told.
func (s *served) applyANA(cur servedPort, pp portPlan, accessible bool) {
	groups := map[uint32]bool{}
	for g := range cur.plan.ana {
		groups[g] = true
	}
	for g := range pp.ana {
		groups[g] = true
	}
	for _, g := range slices.Sorted(maps.Keys(groups)) {
		want, ok := pp.ana[g]
		if !ok {
			want = nvme.ANAInaccessible
			if g == 1 {
				want = nvme.ANAOptimized
			}
		}
		if cur.port.ANAState(g) == want || accessible && want != nvme.ANAOptimized && want != nvme.ANANonOptimized {
			continue
		}
		if err := cur.port.SetANAState(g, want); err != nil { // logged by the target
			s.logf("config: port %d: %v", pp.id, err)
		}
	}
}

func (ss *servedSub) setHosts(sp subPlan) {
	ss.sub.SetAllowedHosts(sp.anyHost, sp.hosts...)
}

// applyNS removes the namespaces the plan no longer enables or changed,
// then adds those it enables that are not served.
func (ss *servedSub) applyNS(ctx context.Context, s *served, want []nsPlan) []error {
	var errs []error
	keep := map[uint32]bool{}
	for _, np := range want {
		cur, ok := ss.ns[np.id]
		if !ok {
			continue
		}
		was := cur.plan
		was.anaGroup = np.anaGroup
		if was != np {
			switch {
			case was.resv != np.resv:
				s.logf("config: %s: namespace %d: reservations turned %s: it is added again, its registrations gone",
					ss.plan.nqn, np.id, map[bool]string{true: "on", false: "off"}[np.resv])
			case was.ptplFile != np.ptplFile:
				s.logf("config: %s: namespace %d: reservation file %q: it is added again, its registrations read from there",
					ss.plan.nqn, np.id, np.ptplFile)
			}
			continue
		}
		keep[np.id] = true
		if cur.plan.anaGroup != np.anaGroup {
			// Moved to another ANA group, as writing ana_grpid: the
			// namespace stays, and hosts are told.
			if err := ss.sub.SetANAGroup(np.id, np.anaGroup); err != nil {
				errs = append(errs, fmt.Errorf("%s: namespace %d: %w", ss.plan.nqn, np.id, err))
				continue
			}
			cur.plan = np
			ss.ns[np.id] = cur
			s.logf("config: %s: namespace %d is in ANA group %d", ss.plan.nqn, np.id, np.anaGroup)
		}
	}
	for id, cur := range ss.ns {
		if keep[id] {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, removeWait)
		err := ss.sub.RemoveNamespace(rctx, id)
		cancel()
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			s.closeLate(ss.plan.nqn, id, cur) // removed; its backend closes once its commands are done
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: namespace %d: %w", ss.plan.nqn, id, err))
			continue
		default:
			closeBackend(s, ss.plan.nqn, id, cur.b)
		}
		delete(ss.ns, id)
		s.logf("config: %s: removed namespace %d (%s)", ss.plan.nqn, id, cur.plan.path)
	}
	for _, np := range want {
		if keep[np.id] {
			continue
		}
		if err := ss.addNS(np, s); err != nil {
			errs = append(errs, fmt.Errorf("%s: namespace %d: %w", ss.plan.nqn, np.id, err))
		}
	}
	return errs
}

func (ss *servedSub) addNS(np nsPlan, s *served) error {
	bs, err := deviceBlockSize(np.path)
	if err != nil {
		return err
	}
	b, err := openBackend(np.path)
	if err != nil {
		return err
	}
	ns, err := ss.sub.AddNamespaceConfig(b, target.NamespaceConfig{ID: np.id, BlockSize: bs, NGUID: np.nguid, UUID: np.uuid,
		ANAGroup: np.anaGroup, Reservations: np.resv, ReservationFile: np.ptplFile})
	if err != nil {
		b.Close()
		return err
	}
	ss.ns[np.id] = servedNS{plan: np, ns: ns, b: b}
	s.logf("config: %s: namespace %d: %d blocks of %d octets (%s)", ss.plan.nqn, np.id, ns.Blocks(), bs, np.path)
	return nil
}

// closeAll flushes and closes the backends of a subsystem the target no
// longer serves (or has closed).
func (ss *servedSub) closeAll(s *served) {
	for id, n := range ss.ns {
		closeBackend(s, ss.plan.nqn, id, n.b)
	}
	clear(ss.ns)
}

// links names the subsystems linked to a port, for the log.
func links(nqns []string) string {
	if len(nqns) == 0 {
		return "no subsystem"
	}
	return strings.Join(nqns, ", ")
}

// closeLate closes a removed namespace's backend once no command uses it.
func (s *served) closeLate(nqn string, id uint32, n servedNS) {
	s.logf("config: %s: namespace %d removed, but commands still use %s after %v: it closes when they are done", nqn, id, n.plan.path, removeWait)
	s.late.Add(1)
	go func() {
		defer s.late.Done()
		<-n.ns.Drained()
		closeBackend(s, nqn, id, n.b)
		s.logf("config: %s: namespace %d: %s closed", nqn, id, n.plan.path)
	}()
}

func closeBackend(s *served, nqn string, id uint32, b backend) {
	if err := b.Flush(); err != nil {
		s.logf("config: %s: namespace %d: flush: %v", nqn, id, err)
	}
	b.Close()
}

// close closes every backend, after the target has closed (then no
// command uses any: the late ones close too).
func (s *served) close() {
	for _, ss := range s.subs {
		ss.closeAll(s)
	}
	s.late.Wait()
}
