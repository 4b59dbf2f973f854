//go:build netns

package wan

import (
	"errors"
	"fmt"
	"strings"
)

// TwoPath is two namespaces, A and B, joined by two veth pairs: path i is
// device wan<i> with A at AddrA[i] and B at AddrB[i] (198.18.i.1 and
// 198.18.i.2, each pair its own /24), and the kernels' Multipath TCP path
// managers set up to use both, with an endpoint on each side for its
// second address: B announces AddrB[1] (`ip mptcp endpoint … signal`), A
// opens subflows from AddrA[1] (`… dev wan1 subflow`), and each side
// allows two subflows beyond the first. A connection from A to AddrB[0]
// thus starts on path 0, and A's path manager joins two subflows over
// path 1: from its subflow endpoint to the address the connection started
// on (bound to wan1, so on path 1 though that address is path 0's), and
// to the address B announced.
type TwoPath struct {
	A, B         *NS
	AddrA, AddrB [2]string
}

// NewTwoPath makes the namespaces and both paths. On error nothing is left.
func NewTwoPath() (p *TwoPath, err error) {
	p = &TwoPath{
		AddrA: [2]string{"198.18.0.1", "198.18.1.1"},
		AddrB: [2]string{"198.18.0.2", "198.18.1.2"},
	}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if p.A, err = NewNS("a"); err != nil {
		return nil, err
	}
	if p.B, err = NewNS("b"); err != nil {
		return nil, err
	}
	for i := range 2 {
		dev := fmt.Sprintf("wan%d", i)
		if _, err = p.A.IP("link", "add", dev, "type", "veth", "peer", "name", dev, "netns", p.B.Name); err != nil {
			return nil, err
		}
		for _, s := range []struct {
			ns   *NS
			addr string
		}{{p.A, p.AddrA[i]}, {p.B, p.AddrB[i]}} {
			if _, err = s.ns.IP("addr", "add", s.addr+"/24", "dev", dev); err != nil {
				return nil, err
			}
			if _, err = s.ns.IP("link", "set", dev, "up"); err != nil {
				return nil, err
			}
		}
	}
	for _, ns := range []*NS{p.A, p.B} {
		if err = ns.Sysctl("net.mptcp.enabled", "1"); err != nil {
			return nil, err
		}
		if _, err = ns.IP("mptcp", "limits", "set", "subflows", "2", "add_addr_accepted", "2"); err != nil {
			return nil, err
		}
	}
	// B announces path 1's address; A joins a subflow to it, from its own
	// address on that path (the route to 198.18.1.0/24 picks it).
	if _, err = p.B.IP("mptcp", "endpoint", "add", p.AddrB[1], "dev", "wan1", "signal"); err != nil {
		return nil, err
	}
	// A joins a subflow from its path 1 address to the address the
	// connection started on. The endpoint's device binds the subflow to
	// wan1: with no route there to 198.18.0.0/24 the kernel takes the peer
	// as on-link, and B, which answers ARP for any of its addresses, takes
	// it in on its own wan1 and replies the same way.
	if _, err = p.A.IP("mptcp", "endpoint", "add", p.AddrA[1], "dev", "wan1", "subflow"); err != nil {
		return nil, err
	}
	return p, nil
}

// RateLimit caps both directions of path i at bps bits per second with a
// token bucket filter (tc tbf) on each end.
func (p *TwoPath) RateLimit(i int, bps float64) error {
	for _, ns := range []*NS{p.A, p.B} {
		if _, err := Cmd("tc", "-n", ns.Name, "qdisc", "replace", "dev", fmt.Sprintf("wan%d", i), "root",
			"tbf", "rate", fmt.Sprintf("%.0fbit", bps), "burst", "256kb", "latency", "50ms"); err != nil {
			return err
		}
	}
	return nil
}

// Down takes path i's device in A down: its routes go, and B's end loses
// carrier. Nobody tells TCP; the subflow on it only stops getting ACKs.
func (p *TwoPath) Down(i int) error {
	_, err := p.A.IP("link", "set", fmt.Sprintf("wan%d", i), "down")
	return err
}

// Blackhole makes path i drop everything silently, both ways, with its
// links, addresses and routes left as they are: each end's neighbour entry
// for the other is pointed at a MAC address nobody has, so every frame
// reaches the peer's veth and is discarded there as addressed to another
// host. No ICMP, no carrier change, no address event.
func (p *TwoPath) Blackhole(i int) error {
	dev := fmt.Sprintf("wan%d", i)
	for _, s := range []struct {
		ns   *NS
		peer string
	}{{p.A, p.AddrB[i]}, {p.B, p.AddrA[i]}} {
		if _, err := s.ns.IP("neigh", "replace", s.peer, "lladdr", "02:00:5e:00:00:99", "dev", dev, "nud", "permanent"); err != nil {
			return err
		}
	}
	return nil
}

// Subflows lists the TCP connections (MPTCP subflows included) in A, as
// "local peer" pairs, for logs and checks. A local address bound to a
// device shows it as ss does: 198.18.1.1%wan1:port.
func (p *TwoPath) Subflows() ([]string, error) {
	out, err := p.A.Exec("ss", "-Htn", "state", "established")
	if err != nil {
		return nil, err
	}
	var flows []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) >= 4 {
			flows = append(flows, f[len(f)-2]+" "+f[len(f)-1])
		}
	}
	return flows, nil
}

// Close removes both namespaces and with them the devices.
func (p *TwoPath) Close() error {
	var errs []error
	for _, ns := range []**NS{&p.A, &p.B} {
		if *ns != nil {
			errs = append(errs, (*ns).Close())
			*ns = nil
		}
	}
	return errors.Join(errs...)
}
