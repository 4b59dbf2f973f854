package host

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// maxReferrals bounds how many discovery services DiscoverAll reads: a
// loop of referrals, or a site's worth, must end.
const maxReferrals = 64

// DiscoverAll is Discover following referrals, as nvme-cli's connect-all:
// it reads the discovery log at addr, then those of the discovery
// services it refers to (RDMA ones, each address once, up to 64), and
// returns every NVM subsystem entry, each once (not the referrals, nor a
// log's entry for its own discovery service). A referral that cannot be
// read is an error joined to what was found.
func DiscoverAll(ctx context.Context, network, addr string, cfg Config) ([]nvme.DiscoveryEntry, error) {
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
