package target

import (
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
