package nvmeof

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// Referrals, as a port's referrals directory in Linux's nvmet configfs:
// entries of a port's discovery log that send hosts to another discovery
// service (SUBTYPE 1, the discovery NQN), on this target or another, so
// that one well-known discovery address leads to every target of a site.
// nvme-cli's connect-all follows them.

// Referral is a discovery service a port's discovery log refers hosts to:
// its address (host:port, NVMe/RDMA), the port ID its log gives it, and
// its transport requirements (TREQ: 0 not specified, 1 secure channel
// required, 2 not required).
type Referral struct {
	Addr   string
	PortID uint16
	TReq   uint8
}

// entry is the referral's discovery log entry.
func (r Referral) entry() (nvme.DiscoveryEntry, error) {
	host, port, err := net.SplitHostPort(r.Addr)
	if err != nil {
		return nvme.DiscoveryEntry{}, fmt.Errorf("nvmeof: referral %q: %w", r.Addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return nvme.DiscoveryEntry{}, fmt.Errorf("nvmeof: referral %q: port %q", r.Addr, port)
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nvme.DiscoveryEntry{}, fmt.Errorf("nvmeof: referral %q: %q is not an IP address", r.Addr, host)
	}
	fam := uint8(nvme.AdrFamIPv4)
	if ip.To4() == nil {
		fam = nvme.AdrFamIPv6
	}
	if r.TReq > 2 {
		return nvme.DiscoveryEntry{}, fmt.Errorf("nvmeof: referral %q: TREQ %d", r.Addr, r.TReq)
	}
	return nvme.DiscoveryEntry{TrType: nvme.TrTypeRDMA, AdrFam: fam, SubType: nvme.SubTypeDisc, TReq: r.TReq,
		PortID: r.PortID, CntlID: nvme.DynamicCntlID, ASQSZ: adminQueueSize, TrSvcID: port, TrAddr: ip.String(),
		SubNQN: nvme.DiscoveryNQN}, nil
}

// referralEntries checks refs and returns their entries.
func referralEntries(refs []Referral) ([]nvme.DiscoveryEntry, error) {
	var ents []nvme.DiscoveryEntry
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
// returns every NVM subsystem entry, each once (not the referrals, nor a
// log's entry for its own discovery service). A referral that cannot be
// read is an error joined to what was found.
func DiscoverAll(ctx context.Context, network, addr string, cfg HostConfig) ([]nvme.DiscoveryEntry, error) {
	addr = canonAddr(addr)
	seen := map[string]bool{addr: true}
	queue := []string{addr}
	var ents []nvme.DiscoveryEntry
	have := map[nvme.DiscoveryEntry]bool{}
	var errs []error
	capped := false
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		log, err := Discover(ctx, network, a, cfg)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a, err))
			continue
		}
		for _, e := range log {
			switch e.SubType {
			case nvme.SubTypeNVM:
				if !have[e] {
					have[e] = true
					ents = append(ents, e)
				}
				continue
			case nvme.SubTypeDisc:
			default:
				continue // the log's own discovery service, or a kind not known
			}
			next := canonAddr(net.JoinHostPort(e.TrAddr, e.TrSvcID))
			switch {
			case e.TrType != nvme.TrTypeRDMA || seen[next]:
			case len(seen) == maxReferrals:
				if !capped {
					capped = true
					errs = append(errs, fmt.Errorf("nvmeof: more than %d discovery services referred to", maxReferrals))
				}
			default:
				seen[next] = true
				queue = append(queue, next)
			}
		}
	}
	return ents, errors.Join(errs...)
}

// canonAddr writes an address whose host is an IP address the one way
// (an IPv6 address in its shortest form, an IPv4-mapped one as IPv4).
func canonAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip != nil {
		return net.JoinHostPort(ip.String(), port)
	}
	return addr
}
