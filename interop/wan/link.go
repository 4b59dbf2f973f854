//go:build netns

package wan

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// Impairment is what a link does to the packets of one direction, as
// `tc netem delay D loss L% rate R limit …` does.
type Impairment struct {
	Delay time.Duration // one-way delay
	Loss  float64       // probability that a packet is dropped, 0 to 1
	Rate  float64       // bits per second; 0 is unlimited
	// Limit is the rate limiter's queue in bytes; a packet that finds it
	// full is dropped (tail drop). 0 means one 50 ms bandwidth-delay
	// product at Rate (6.25 MB at 1 Gbit/s), a classic router buffer.
	Limit int
}

func (im Impairment) String() string {
	return fmt.Sprintf("delay %v loss %g%% rate %s", im.Delay, im.Loss*100, bits(im.Rate))
}

func bits(r float64) string {
	switch {
	case r == 0:
		return "unlimited"
	case r >= 1e9:
		return fmt.Sprintf("%gGbit/s", r/1e9)
	default:
		return fmt.Sprintf("%gMbit/s", r/1e6)
	}
}

// LinkKind says how the two namespaces of a Net are joined.
type LinkKind string

const (
	// LinkVeth is a veth pair: the kernel alone, no impairment.
	LinkVeth LinkKind = "veth"
	// LinkNetem is a veth pair with a netem qdisc on each end, as
	// `tc qdisc replace dev wan0 root netem …`. It needs sch_netem in the
	// kernel.
	LinkNetem LinkKind = "netem"
	// LinkTun is two TUN devices joined by Emulator, a packet forwarder in
	// this process that does what netem does (see tunlink.go), for kernels
	// without sch_netem.
	LinkTun LinkKind = "tun"
)

// ImpairedKind is the link the impaired tests use: $WAN_LINK ("netem" or
// "tun") if set, otherwise netem where the kernel has it and tun elsewhere.
func ImpairedKind() (LinkKind, error) {
	switch k := LinkKind(os.Getenv("WAN_LINK")); k {
	case LinkNetem, LinkTun:
		return k, nil
	case "":
		if netemWorks() {
			return LinkNetem, nil
		}
		return LinkTun, nil
	default:
		return "", fmt.Errorf("wan: WAN_LINK=%q: want netem or tun", k)
	}
}

var (
	netemOnce sync.Once
	netemOK   bool
)

// netemWorks probes once for sch_netem on a veth pair in a scratch
// namespace.
func netemWorks() bool {
	netemOnce.Do(func() {
		ns, err := NewNS("probe")
		if err != nil {
			return
		}
		defer ns.Close()
		if _, err := ns.IP("link", "add", "p0", "type", "veth", "peer", "name", "p1"); err != nil {
			return
		}
		_, err = Cmd("tc", "-n", ns.Name, "qdisc", "add", "dev", "p0", "root", "netem", "delay", "1ms")
		netemOK = err == nil
	})
	return netemOK
}

// Net is two namespaces, A and B, joined by one point-to-point link, A at
// AddrA and B at AddrB (198.18.0.0/15 is the range RFC 2544 sets aside for
// benchmarks; inside private namespaces it reaches nothing else anyway).
// Nothing in either namespace routes anywhere but to the other.
type Net struct {
	A, B         *NS
	AddrA, AddrB string
	Kind         LinkKind
	emu          *Emulator // LinkTun

	mu  sync.Mutex
	imp Impairment
}

// NewNet makes the namespaces and the link. On error nothing is left.
func NewNet(kind LinkKind) (n *Net, err error) {
	n = &Net{Kind: kind, AddrA: "198.18.0.1", AddrB: "198.18.0.2"}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if n.A, err = NewNS("a"); err != nil {
		return nil, err
	}
	if n.B, err = NewNS("b"); err != nil {
		return nil, err
	}
	switch kind {
	case LinkVeth, LinkNetem:
		// Both ends are made inside the namespaces: nothing appears in the
		// initial namespace, even for a moment.
		if _, err = n.A.IP("link", "add", "wan0", "type", "veth", "peer", "name", "wan0", "netns", n.B.Name); err != nil {
			return nil, err
		}
		for _, s := range []struct {
			ns   *NS
			addr string
		}{{n.A, n.AddrA}, {n.B, n.AddrB}} {
			if _, err = s.ns.IP("addr", "add", s.addr+"/24", "dev", "wan0"); err != nil {
				return nil, err
			}
			if _, err = s.ns.IP("link", "set", "wan0", "up"); err != nil {
				return nil, err
			}
		}
	case LinkTun:
		if n.emu, err = NewEmulator(n.A, n.B, n.AddrA, n.AddrB); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("wan: unknown link kind %q", kind)
	}
	return n, nil
}

// Impair sets the impairment of both directions.
func (n *Net) Impair(im Impairment) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch n.Kind {
	case LinkTun:
		n.emu.Set(im)
	case LinkNetem:
		for _, ns := range []*NS{n.A, n.B} {
			if _, err := Cmd("tc", append([]string{"-n", ns.Name, "qdisc", "replace", "dev", "wan0", "root"}, netemArgs(im)...)...); err != nil {
				return err
			}
		}
	default:
		return errors.New("wan: a plain veth link cannot be impaired")
	}
	n.imp = im
	return nil
}

// netemArgs spells im for tc. netem's default queue (limit 1000 packets)
// is smaller than a 50 ms path at 1 Gbit/s holds in MTU-sized packets,
// and it would drop packets of its own; the limit is raised far above.
func netemArgs(im Impairment) []string {
	a := []string{"netem", "delay", fmt.Sprintf("%dus", im.Delay.Microseconds())}
	if im.Loss > 0 {
		a = append(a, "loss", fmt.Sprintf("%g%%", im.Loss*100))
	}
	if im.Rate > 0 {
		a = append(a, "rate", fmt.Sprintf("%.0fbit", im.Rate))
	}
	return append(a, "limit", "100000")
}

// Partition drops every packet from now on, both ways (netem loss 100%);
// packets already in the delay line still arrive, as with netem.
func (n *Net) Partition() error {
	n.mu.Lock()
	im := n.imp
	n.mu.Unlock()
	im.Loss = 1
	return n.Impair(im)
}

// Describe says what the link is, for logs.
func (n *Net) Describe() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := fmt.Sprintf("%s link %s (%s) <-> %s (%s)", n.Kind, n.A.Name, n.AddrA, n.B.Name, n.AddrB)
	if n.Kind != LinkVeth {
		s += ": " + n.imp.String()
	}
	return s
}

// Stats reports the emulator's counters (LinkTun) or the qdisc statistics
// (LinkNetem).
func (n *Net) Stats() string {
	switch n.Kind {
	case LinkTun:
		return n.emu.Stats()
	case LinkNetem:
		var b strings.Builder
		for _, ns := range []*NS{n.A, n.B} {
			out, _ := Cmd("tc", "-n", ns.Name, "-s", "qdisc", "show", "dev", "wan0")
			fmt.Fprintf(&b, "%s: %s\n", ns.Name, strings.TrimSpace(out))
		}
		return b.String()
	}
	return ""
}

// Counters returns the emulator's counters of A to B and B to A; ok is
// false on a link without the emulator (LinkTun only).
func (n *Net) Counters() (ab, ba LinkCounters, ok bool) {
	if n.emu == nil {
		return LinkCounters{}, LinkCounters{}, false
	}
	ab, ba = n.emu.Counters()
	return ab, ba, true
}

// Close removes the link and both namespaces. It is safe on a Net that
// NewNet left half made, and more than once.
func (n *Net) Close() error {
	var errs []error
	if n.emu != nil {
		errs = append(errs, n.emu.Close())
		n.emu = nil
	}
	for _, ns := range []**NS{&n.A, &n.B} {
		if *ns != nil {
			errs = append(errs, (*ns).Close())
			*ns = nil
		}
	}
	return errors.Join(errs...)
}
