package target

import (
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// Subsystem is an NVM subsystem: an NQN, its namespaces (NSID 1, 2, ...)
// and the hosts it admits.
type Subsystem struct {
	NQN    string
	Serial string
	Model  string

	mu        sync.RWMutex
	ns        []*Namespace
	ctrls     map[*controller]struct{} // its controllers, told of namespaces added
	retiring  bool                     // the last target's RemoveSubsystem is taking its namespaces out
	ending    map[*controller]struct{} // ended controllers with commands still in a Backend (quiesce.go)
	endingN   atomic.Int64             // len(ending), read without mu
	targets   map[*Target]struct{}     // that serve it: a controller attaches only through one; told when its hosts change
	anyHost   bool
	hosts     []string
	counters  nvme.SMARTCounters
	countMu   sync.Mutex
	wpMu      sync.Mutex // one write-protection change at a time (writeprotect.go)
	nextCtlID atomic.Uint32
}

// NewSubsystem returns a subsystem named nqn that admits any host until
// AllowHost names one.
func NewSubsystem(nqn string) (*Subsystem, error) {
	if !nvme.ValidNQN(nqn) || nqn == nvme.DiscoveryNQN {
		return nil, fmt.Errorf("nvmeof: %q is not a valid subsystem NQN", nqn)
	}
	h := sha256.Sum256([]byte(nqn))
	return &Subsystem{NQN: nqn, Serial: fmt.Sprintf("%x", h[:10]), Model: "goiwarp NVMe/iWARP target", anyHost: true}, nil
}

// attach and detach keep the subsystem's list of its live controllers.
// attach refuses a controller once the subsystem is off the controller's
// target (Target.RemoveSubsystem), which may come between the Connect's
// look-up and here.
func (s *Subsystem) attach(c *controller) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.targets[c.t]; !ok {
		return false
	}
	c.mu.Lock()
	dead := c.dead
	c.mu.Unlock()
	if dead {
		return true // shut down already: its detach has run
	}
	if s.ctrls == nil {
		s.ctrls = map[*controller]struct{}{}
	}
	s.ctrls[c] = struct{}{}
	return true
}

func (s *Subsystem) detach(c *controller) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ctrls, c)
}

// AllowHost admits hostNQN; once a host is named, only named hosts are.
func (s *Subsystem) AllowHost(hostNQN string) {
	s.changeHosts(func() {
		s.anyHost = false
		if !slices.Contains(s.hosts, hostNQN) {
			s.hosts = append(s.hosts, hostNQN)
		}
	})
}

// SetAllowedHosts replaces the hosts the subsystem admits, as nvmet's
// attr_allow_any_host and allowed_hosts do: anyHost admits every host,
// else only those named (none: no host). Controllers already connected
// stay connected, as in nvmet.
func (s *Subsystem) SetAllowedHosts(anyHost bool, hosts ...string) {
	s.changeHosts(func() {
		s.anyHost = anyHost
		s.hosts = slices.Compact(slices.Sorted(slices.Values(hosts)))
	})
}

// changeHosts changes the access list with change (mu held) and tells the
// targets that serve s: what their discovery logs list changed. The
// change is made with each of those targets' locks held too, so that it
// moves their generation counters at once with the lists they build (a
// host reading a long log in pieces sees that it changed); the targets
// are locked in the order they were made, the only order two are ever
// held in.
func (s *Subsystem) changeHosts(change func()) {
	for {
		s.mu.Lock()
		ts := s.servedBy()
		s.mu.Unlock()
		slices.SortFunc(ts, func(a, b *Target) int { return cmp.Compare(a.seq, b.seq) })
		for _, t := range ts {
			t.mu.Lock()
		}
		s.mu.Lock()
		same := len(s.targets) == len(ts) // none joined or left meanwhile
		for _, t := range ts {
			_, in := s.targets[t]
			same = same && in
		}
		if same {
			change()
		}
		s.mu.Unlock()
		for i := len(ts) - 1; i >= 0; i-- {
			if same {
				ts[i].genctr++
			}
			ts[i].mu.Unlock()
		}
		if same {
			for _, t := range ts {
				t.discChanged(nil, s.NQN)
			}
			return
		}
	}
}

// joined records that t serves s (t.mu held), which may be back after a
// RemoveSubsystem.
func (s *Subsystem) joined(t *Target) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.retiring {
		return fmt.Errorf("nvmeof: subsystem %q is being removed: add it once RemoveSubsystem has returned", s.NQN)
	}
	if s.targets == nil {
		s.targets = map[*Target]struct{}{}
	}
	s.targets[t] = struct{}{}
	return nil
}

// left undoes joined.
func (s *Subsystem) left(t *Target) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.targets, t)
}

// servedBy returns the targets that serve s (mu held).
func (s *Subsystem) servedBy() []*Target {
	ts := make([]*Target, 0, len(s.targets))
	for t := range s.targets {
		ts = append(ts, t)
	}
	return ts
}

// Allowed reports whether hostNQN may connect.
func (s *Subsystem) Allowed(hostNQN string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.anyHost || slices.Contains(s.hosts, hostNQN)
}

// RemoveNamespace takes namespace id out of the subsystem, as disabling
// it does in Linux's nvmet: commands that name it from then on get Invalid
// Namespace, and each controller lists it in its Changed Namespace List and
// raises a Namespace Attribute Changed notice (see AddNamespace), upon
// which Linux's host drops the block device. It returns once the commands
// already using its Backend have finished, so that the caller may close
// the Backend then, or when ctx ends: the namespace is removed all the
// same, and its Drained channel says when to close the Backend (a Backend
// stuck in a read, on a hung network file system, must not hold up the
// caller for ever). AddNamespace does not reuse the NSID
// (AddNamespaceConfig may).
func (s *Subsystem) RemoveNamespace(ctx context.Context, id uint32) error {
	ns, err := s.takeOut(id)
	if err != nil {
		return err
	}
	return ns.wait(ctx)
}

// takeOut removes namespace id: no command finds it from now on, and the
// controllers are told.
func (s *Subsystem) takeOut(id uint32) (*Namespace, error) {
	s.mu.Lock()
	if id == 0 || id > uint32(len(s.ns)) || s.ns[id-1] == nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("nvmeof: %s has no namespace %d", s.NQN, id)
	}
	ns := s.ns[id-1]
	s.ns[id-1] = nil
	ctrls := s.controllers()
	s.mu.Unlock()
	if ns.resv != nil {
		ns.resv.detach() // a namespace added in its place reads the file after its last write
	}
	for _, c := range ctrls {
		c.nsChanged(id)
	}
	ns.removed.Store(true)
	if ns.refs.Load() == 0 {
		ns.drain()
	}
	return ns, nil
}

// wait waits until no command uses a removed namespace's Backend, or ctx
// ends.
func (ns *Namespace) wait(ctx context.Context) error {
	select {
	case <-ns.drained:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("nvmeof: namespace %d: commands still use its backend: %w", ns.ID, ctx.Err())
	}
}

// Drained returns a channel closed once the namespace has been removed
// (RemoveNamespace, or Target.RemoveSubsystem) and no command uses its
// Backend: when a removal's ctx ended first, the time to close the
// Backend.
func (ns *Namespace) Drained() <-chan struct{} { return ns.drained }

// controllers returns the subsystem's live controllers (mu held).
func (s *Subsystem) controllers() []*controller {
	ctrls := make([]*controller, 0, len(s.ctrls))
	for c := range s.ctrls {
		ctrls = append(ctrls, c)
	}
	return ctrls
}

// use returns the namespace with the given NSID counted as in use
// (Namespace.refs) until the caller's done, or nil: a command's hold on
// its Backend, which RemoveNamespace waits out.
func (s *Subsystem) use(id uint32) *Namespace {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if id == 0 || id > uint32(len(s.ns)) || s.ns[id-1] == nil {
		return nil
	}
	ns := s.ns[id-1]
	ns.refs.Add(1)
	return ns
}

func (ns *Namespace) done() {
	if ns.refs.Add(-1) == 0 && ns.removed.Load() {
		ns.drain()
	}
}

// drain tells RemoveNamespace that no command uses the Backend any more:
// the last command's done after the removal, or the removal itself when
// none was running (both may, hence the Once).
func (ns *Namespace) drain() { ns.drainOnce.Do(func() { close(ns.drained) }) }

// Namespace returns the namespace with the given NSID, or nil.
func (s *Subsystem) Namespace(id uint32) *Namespace {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if id == 0 || id > uint32(len(s.ns)) {
		return nil
	}
	return s.ns[id-1]
}

// noNamespace is the status of a command whose NSID id names no namespace:
// Invalid Field in Command for an inactive NSID, one a namespace could
// have (1 to NN), and Invalid Namespace or Format for an invalid one (0,
// above NN, and the broadcast value where a command does not take it), as
// NVMe Base 2.0 section 3.2.1.5 has it and QEMU's controller answers.
// (nvmet answers Invalid Namespace for both; Linux's host treats the two
// alike.)
func noNamespace(id uint32) nvme.Status {
	if id == 0 || id > maxNSID {
		return nvme.StatusInvalidNamespace | nvme.DNR
	}
	return nvme.StatusInvalidField | nvme.DNR
}

// Namespaces returns the namespaces in NSID order.
func (s *Subsystem) Namespaces() []*Namespace {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var nss []*Namespace
	for _, ns := range s.ns {
		if ns != nil { // removed
			nss = append(nss, ns)
		}
	}
	return nss
}

func (s *Subsystem) count(write bool, octets int) {
	s.countMu.Lock()
	if write {
		s.counters.Writes++
		s.counters.WriteBytes += uint64(octets)
	} else {
		s.counters.Reads++
		s.counters.ReadBytes += uint64(octets)
	}
	s.countMu.Unlock()
}
