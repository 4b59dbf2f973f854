package nvmeof

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
)

// Referrals, as a port's referrals directory in Linux's nvmet configfs:
// entries of a port's discovery log that send hosts to another discovery
// service (SUBTYPE 1, the discovery NQN), on this target or another, so
// that one well-known discovery address leads to every target of a site.
// nvme-cli's connect-all follows them.

// Referral is a discovery service a port's discovery log refers hosts to:
// its address (host:port, NVMe/RDMA) and the port ID its log gives it.
type Referral struct {
	Addr   string
	PortID uint16
}

// entry is the referral's discovery log entry.
func (r Referral) entry() (DiscoveryEntry, error) {
	host, port, err := net.SplitHostPort(r.Addr)
	if err != nil {
		return DiscoveryEntry{}, fmt.Errorf("nvmeof: referral %q: %w", r.Addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return DiscoveryEntry{}, fmt.Errorf("nvmeof: referral %q: port %q", r.Addr, port)
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return DiscoveryEntry{}, fmt.Errorf("nvmeof: referral %q: %q is not an IP address", r.Addr, host)
	}
	fam := uint8(AdrFamIPv4)
	if ip.To4() == nil {
		fam = AdrFamIPv6
	}
	return DiscoveryEntry{TrType: TrTypeRDMA, AdrFam: fam, SubType: SubTypeDisc, TReq: treqNotSpecific,
		PortID: r.PortID, CntlID: DynamicCntlID, ASQSZ: adminQueueSize, TrSvcID: port, TrAddr: ip.String(),
		SubNQN: DiscoveryNQN}, nil
}

// referralEntries checks refs and returns their entries.
func referralEntries(refs []Referral) ([]DiscoveryEntry, error) {
	var ents []DiscoveryEntry
	for _, r := range refs {
		e, err := r.entry()
		if err != nil {
			return nil, err
		}
		ents = append(ents, e)
	}
	return ents, nil
}

// Referrals returns the port's referrals.
func (p *Port) Referrals() []Referral {
	p.t.mu.Lock()
	defer p.t.mu.Unlock()
	return slices.Clone(p.refs)
}

// SetReferrals makes refs the port's referrals, as adding and removing
// them in nvmet's configfs: the discovery controllers that came through
// the port are told (a Discovery Log Page Change notice).
func (p *Port) SetReferrals(refs ...Referral) error {
	ents, err := referralEntries(refs)
	if err != nil {
		return err
	}
	t := p.t
	t.mu.Lock()
	p.refs, p.refEnts = slices.Clone(refs), ents
	t.genctr++
	t.mu.Unlock()
	t.discChanged(p, "")
	return nil
}

// maxReferrals bounds how many discovery services DiscoverAll reads: a
// loop of referrals, or a site's worth, must end.
const maxReferrals = 64

// DiscoverAll is Discover following referrals, as nvme-cli's connect-all:
// it reads the discovery log at addr, then those of the discovery
// services it refers to (RDMA ones, each address once, up to 64), and
// returns every entry that is a subsystem (not a referral), each once. A
// referral that cannot be read is an error joined to what was found.
func DiscoverAll(ctx context.Context, network, addr string, cfg HostConfig) ([]DiscoveryEntry, error) {
	seen := map[string]bool{addr: true}
	queue := []string{addr}
	var ents []DiscoveryEntry
	have := map[DiscoveryEntry]bool{}
	var errs []error
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		log, err := Discover(ctx, network, a, cfg)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a, err))
			continue
		}
		for _, e := range log {
			if e.SubType != SubTypeDisc {
				if !have[e] {
					have[e] = true
					ents = append(ents, e)
				}
				continue
			}
			next := net.JoinHostPort(e.TrAddr, e.TrSvcID)
			if e.TrType != TrTypeRDMA || seen[next] {
				continue
			}
			if len(seen) == maxReferrals {
				errs = append(errs, fmt.Errorf("nvmeof: more than %d discovery services referred to", maxReferrals))
				break
			}
			seen[next] = true
			queue = append(queue, next)
		}
	}
	return ents, errors.Join(errs...)
}
