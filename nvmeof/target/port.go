package target

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/verbs"
)

// Port is a listener of a Target and the subsystems it exposes, as a port
// of Linux's nvmet: through it a host reaches, and its discovery log
// lists, only the subsystems linked to it (ListenPort), or every subsystem
// of the target (Listen).
type Port struct {
	t      *Target
	id     uint16
	ln     *verbs.Listener
	all    bool            // Listen's: every subsystem
	subs   map[string]bool // ListenPort's, under t.mu
	closed bool            // Close, under t.mu
	// refs are the port's referrals and refEnts their discovery log
	// entries (referral.go), under t.mu.
	refs    []Referral
	refEnts []nvme.DiscoveryEntry
	// ana is each ANA group's state through the port (ana.go), 0 for the
	// default; written under t.mu, read by every I/O command.
	ana [nvme.MaxANAGroup + 1]atomic.Uint32
}

// PortConfig is what ListenPort takes besides the address, as a port's
// directory in Linux's nvmet configfs: its ID (portid; 0 takes the lowest
// free one), the NQNs of the subsystems linked to it, and the states of
// ANA groups through it (ana_groups; a group not named is optimized if it
// is group 1, inaccessible otherwise).
type PortConfig struct {
	ID         uint16
	Subsystems []string
	ANA        map[uint32]nvme.ANAState
	// Referrals are other discovery services the port's discovery log
	// lists (referrals; referral.go).
	Referrals []Referral
}

// ListenPort starts serving on addr (as Listen) the subsystems cfg links
// to the port, and the discovery controller, whose log lists those of
// them the host may reach, with the port's ID.
func (t *Target) ListenPort(ctx context.Context, network, addr string, cfg PortConfig) (*Port, error) {
	p := &Port{t: t, subs: map[string]bool{}}
	for _, nqn := range cfg.Subsystems {
		p.subs[nqn] = true
	}
	var err error
	p.refs = slices.Clone(cfg.Referrals)
	if p.refEnts, err = referralEntries(cfg.Referrals); err != nil {
		return nil, err
	}
	for g, s := range cfg.ANA {
		if err := checkANAGroup(g); err != nil {
			return nil, err
		}
		if !s.Valid() {
			return nil, fmt.Errorf("nvmeof: ANA group %d: %v", g, s)
		}
		p.ana[g].Store(uint32(s))
	}
	if err := t.listen(ctx, network, addr, p, cfg.ID); err != nil {
		return nil, err
	}
	return p, nil
}

// Listen starts serving every subsystem of the target, and the discovery
// controller, on addr (network "tcp", "tcp4" or "tcp6"), port 4420 if
// addr has none, and returns the listener's address.
func (t *Target) Listen(ctx context.Context, network, addr string) (net.Addr, error) {
	p := &Port{t: t, all: true}
	if err := t.listen(ctx, network, addr, p, 0); err != nil {
		return nil, err
	}
	return p.Addr(), nil
}

func (t *Target) listen(ctx context.Context, network, addr string, p *Port, id uint16) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "4420")
	}
	if id != 0 && t.portInUse(id) {
		return fmt.Errorf("nvmeof: port ID %d in use", id) // before listening, for the common case
	}
	ln, err := t.dev.Listen(ctx, network, addr, t.cfg.ConnConfig)
	if err != nil {
		return err
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		ln.Close()
		return verbs.ErrClosed
	}
	switch {
	case id != 0 && t.portInUseLocked(id): // taken meanwhile
		t.mu.Unlock()
		ln.Close()
		return fmt.Errorf("nvmeof: port ID %d in use", id)
	case id == 0:
		for id = 1; t.portInUseLocked(id); id++ {
			if id == 0xffff {
				t.mu.Unlock()
				ln.Close()
				return errors.New("nvmeof: no port ID free")
			}
		}
	}
	p.id, p.ln = id, ln
	t.ports = append(t.ports, p)
	t.wg.Add(1)
	t.mu.Unlock()
	go t.accept(p)
	t.logf("nvmeof: listening on %v (port %d)", ln.Addr(), id)
	return nil
}

func (t *Target) portInUse(id uint16) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.portInUseLocked(id)
}

func (t *Target) portInUseLocked(id uint16) bool {
	for _, o := range t.ports {
		if o.id == id {
			return true
		}
	}
	return false
}

// Ports returns the target's open ports, Listen's and ListenPort's, in the
// order they were opened: Listen's too may have its ANA states set.
func (t *Target) Ports() []*Port {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.ports)
}

// Addr returns the port's listening address.
func (p *Port) Addr() net.Addr { return p.ln.Addr() }

// ID returns the port's ID, which the discovery log gives as PORTID.
func (p *Port) ID() uint16 { return p.id }

// Subsystems returns the NQNs linked to a ListenPort port, sorted (nil for
// Listen's, which serves every subsystem).
func (p *Port) Subsystems() []string {
	p.t.mu.Lock()
	defer p.t.mu.Unlock()
	var nqns []string
	for nqn := range p.subs {
		nqns = append(nqns, nqn)
	}
	slices.Sort(nqns)
	return nqns
}

// SetSubsystems links exactly the given subsystems to a ListenPort port,
// as adding and removing links in nvmet's configfs: the hosts' discovery
// controllers are told (a Discovery Log Page Change notice), and the
// controllers of a subsystem no longer linked that were connected through
// this port are shut down, as nvmet does (nvmet_port_del_ctrls).
func (p *Port) SetSubsystems(nqns ...string) error {
	t := p.t
	t.mu.Lock()
	if p.all {
		t.mu.Unlock()
		return errors.New("nvmeof: a port of Listen serves every subsystem")
	}
	next := map[string]bool{}
	for _, nqn := range nqns {
		next[nqn] = true
	}
	var drop []*controller
	for _, c := range t.ctrls {
		if c.sub != nil && c.admin.port == p && !next[c.sub.NQN] {
			drop = append(drop, c)
		}
	}
	p.subs = next
	t.genctr++
	t.mu.Unlock()
	for _, c := range drop {
		c.shutdown(fmt.Sprintf("%s was unlinked from port %d", c.sub.NQN, p.id))
	}
	t.discChanged(p, "")
	return nil
}

// Close stops the port, as removing a port from nvmet's configfs does: it
// takes no new connection, and every queue that came through it is
// disconnected, so that the controllers that came through it end (the
// links go before the port in nvmet, each disconnecting the controllers
// through it). Controllers through other ports go on; the port's ID is
// free again. A port closes with its Target too.
func (p *Port) Close() error {
	t := p.t
	t.mu.Lock()
	if p.closed || t.closed {
		t.mu.Unlock()
		return nil
	}
	p.closed = true
	t.ports = slices.DeleteFunc(t.ports, func(o *Port) bool { return o == p })
	var qs []*queue
	for q := range t.queues {
		if q.port == p {
			qs = append(qs, q)
		}
	}
	t.mu.Unlock()
	err := p.ln.Close()
	for _, q := range qs {
		q.end()
	}
	t.logf("nvmeof: port %d (%v) closed, %d queues through it disconnected", p.id, p.ln.Addr(), len(qs))
	return err
}

// serves reports whether a host may reach subsystem nqn through p (t.mu
// held).
func (p *Port) serves(nqn string) bool { return p.all || p.subs[nqn] }
