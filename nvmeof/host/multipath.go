package host

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// Multipath is a host's view of one subsystem through several paths, a
// Controller each (one for each of the subsystem's ports a host reaches),
// as Linux's native NVMe multipath has it:
//
//   - I/O goes down an optimized path, round-robin among them (or the one
//     with the fewest commands in flight: MultipathConfig.Policy), or a
//     non-optimized one when none is optimized, as each path's ANA log
//     says; never down an inaccessible one. A subsystem without ANA has
//     every path optimized.
//   - Each path watches its ANA states (Config.WatchANA), so that an
//     ANA Change notice moves the I/O at once.
//   - A command that comes back with a path status (SCT 3, without DNR:
//     an ANA state changed under it) is sent again down another path, and
//     the path's log read again before it is used; one whose path broke,
//     or was taken out, is sent again too. A write sent again after its
//     path broke may land before the first one, if the target still runs
//     that: as with Linux's host, only the last completed write of a range
//     is certain.
//   - A path that broke, or did not connect at first, is connected again
//     every ReconnectDelay until LossTimeout, as Linux's reconnect_delay
//     and ctrl_loss_tmo: its namespaces are opened again and it serves as
//     its ANA log says.
//   - With no usable path, I/O waits for one (as Linux's host queues it,
//     "no usable path") until its context ends; with no path left, none
//     being connected again, it fails with ErrNoPath.
//
// Its methods may be called from several goroutines.
type Multipath struct {
	SubNQN  string
	paths   []*mpath
	rr      atomic.Uint32
	network string
	cfg     MultipathConfig

	ctx    context.Context // ends at Close: log reads, reconnects
	cancel context.CancelFunc
	wg     sync.WaitGroup // the paths' watches, log reads, closes and reconnects

	mu      sync.Mutex
	changed chan struct{} // closed, and replaced, when a path's states change or it ends
	closed  bool
	// nsMu orders Namespace against a path coming back: each namespace
	// is opened on a path either by Namespace or by the reconnect.
	nsMu sync.Mutex
	nss  map[uint32]*MultipathNamespace // opened (under nsMu and mu), one per NSID
	resv mpathResv                      // Config.WatchReservations (multipath_resv.go)
}

// MultipathConfig is what ConnectMultipath takes besides the addresses:
// the host's configuration for every path, and how lost paths come back.
type MultipathConfig struct {
	Config
	// ReconnectDelay is the wait between attempts to connect a lost path
	// again (default 10 s, Linux's reconnect_delay; negative: a lost path
	// stays lost).
	ReconnectDelay time.Duration
	// LossTimeout is how long a lost path is tried before it is given up
	// (default 600 s, Linux's ctrl_loss_tmo; negative: for ever).
	LossTimeout time.Duration
	// Policy chooses among the usable paths of the best ANA state, as
	// Linux's iopolicy: round-robin (the default), or queue depth.
	Policy IOPolicy
}

// IOPolicy is how a Multipath spreads I/O over its usable paths.
type IOPolicy int

const (
	// PolicyRoundRobin takes the paths in turn (Linux's round-robin).
	PolicyRoundRobin IOPolicy = iota
	// PolicyQueueDepth takes the path with the fewest commands in flight
	// (Linux's queue-depth, 6.11+): a path slowed by distance or load
	// gets fewer, so paths of different latencies each carry what they
	// can.
	PolicyQueueDepth
)

// mpath is a path: its controller and what its ANA log last said.
type mpath struct {
	addr string

	// Under Multipath.mu.
	c        *Controller              // nil while it is not connected
	ana      bool                     // the controller reports ANA
	err      error                    // why it is not usable: not connected, or ended
	retrying bool                     // it is being connected again
	states   map[uint32]nvme.ANAState // ANA group → state through this path
	groups   map[uint32]uint32        // NSID → ANA group, as the log lists them
	chg      uint64                   // the change count of the log applied
	pending  bool                     // a path status came back: unusable until its log is read again
	asked    map[uint32]bool          // groups missing from the log, read again once for each, for this controller

	cmds, pathErrs, connects atomic.Uint64
	inflight                 atomic.Int64 // commands in flight down the path (counted as doSized counts them)
}

// PathInfo is a path's state, as Multipath.Paths reports it.
type PathInfo struct {
	Addr       string
	Controller *Controller              // nil while it is not connected
	Err        error                    // why it is not used: not connected, or ended
	Retrying   bool                     // it is being connected again
	States     map[uint32]nvme.ANAState // each ANA group's state through the path, as its log last said
	Commands   uint64                   // commands sent down the path
	PathErrors uint64                   // of them, those that came back with a path status
	Connects   uint64                   // times it connected, the first included
}

// ErrNoPath is the error of I/O on a Multipath none of whose paths is
// left.
var ErrNoPath = errors.New("nvmeof: no path to the subsystem is left")

// maxFailovers bounds how often one call is sent again down another path.
const maxFailovers = 16

// Linux's defaults for a lost path.
const (
	defaultReconnectDelay = 10 * time.Second
	defaultLossTimeout    = 600 * time.Second
)

// testNoANAWatch, if set, connects paths without their ANA watch, so that
// path statuses alone move the I/O (tests).
var testNoANAWatch bool

// ConnectMultipath connects to subsystem subNQN through each of addrs (its
// ports) as one host: every path with cfg's host NQN and host ID, which
// tell the target the controllers are one host's (random ones are made
// once if cfg has none). It succeeds if at least one path connects; Paths
// says why the others did not, and they are tried again as lost paths.
// ctx bounds the first connects.
func ConnectMultipath(ctx context.Context, network string, addrs []string, subNQN string, cfg MultipathConfig) (*Multipath, error) {
	if len(addrs) == 0 {
		return nil, errors.New("nvmeof: Multipath needs at least one address")
	}
	if subNQN == nvme.DiscoveryNQN {
		return nil, errors.New("nvmeof: Multipath is for NVM subsystems")
	}
	if cfg.HostNQN == "" {
		cfg.HostNQN = NewNQN()
	}
	if cfg.HostID == [16]byte{} {
		rand.Read(cfg.HostID[:])
	}
	if cfg.ReconnectDelay == 0 {
		cfg.ReconnectDelay = defaultReconnectDelay
	}
	if cfg.LossTimeout == 0 {
		cfg.LossTimeout = defaultLossTimeout
	}
	cfg.WatchANA = !testNoANAWatch
	m := &Multipath{SubNQN: subNQN, network: network, cfg: cfg, changed: make(chan struct{}), nss: map[uint32]*MultipathNamespace{}}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	var errs []error
	for _, addr := range addrs {
		p := &mpath{addr: addr}
		m.paths = append(m.paths, p)
		c, l, err := m.dial(ctx, addr)
		if err != nil {
			p.err = err
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			continue
		}
		p.up(c, l)
	}
	if len(errs) == len(addrs) {
		m.cancel()
		return nil, errors.Join(errs...)
	}
	m.mu.Lock()
	for _, p := range m.paths {
		if p.c != nil {
			m.wg.Add(1)
			go m.watch(p, p.c)
		} else {
			m.retryLocked(p)
		}
	}
	m.mu.Unlock()
	return m, nil
}

// dial connects a path and reads its ANA log, if it has one.
func (m *Multipath) dial(ctx context.Context, addr string) (*Controller, nvme.ANALog, error) {
	c, err := Connect(ctx, m.network, addr, m.SubNQN, m.cfg.Config)
	if err != nil {
		return nil, nvme.ANALog{}, err
	}
	if c.Info.CMIC&nvme.CMICANA == 0 {
		return c, nvme.ANALog{}, nil
	}
	l, err := c.ANALog(ctx)
	if err != nil {
		c.Close()
		return nil, nvme.ANALog{}, err
	}
	return c, l, nil
}

// up makes c the path's controller (m.mu held, or before the path is
// shared).
func (p *mpath) up(c *Controller, l nvme.ANALog) {
	p.c, p.ana, p.err, p.retrying = c, c.Info.CMIC&nvme.CMICANA != 0, nil, false
	p.states, p.chg, p.asked = nil, 0, nil
	if p.ana {
		p.set(l, true)
	}
	p.connects.Add(1)
}

// set records a path's ANA log (Multipath.mu held, or before the path is
// shared), unless it is older than the one applied: the path's watch and
// a read after a path status may fetch logs at once, and the older must
// not win. A read after a path status (done) ends the pending state.
func (p *mpath) set(l nvme.ANALog, done bool) {
	if done {
		p.pending = false
	}
	if p.states != nil && l.ChangeCount < p.chg {
		return
	}
	p.states, p.groups, p.chg = map[uint32]nvme.ANAState{}, map[uint32]uint32{}, l.ChangeCount
	for _, g := range l.Groups {
		p.states[g.ID] = g.State
		for _, id := range g.NSIDs {
			p.groups[id] = g.ID
		}
	}
}

// watch follows a path's controller c: its ANA Change notices, until it
// ends (and its reservation notifications, if it watches them).
func (m *Multipath) watch(p *mpath, c *Controller) {
	defer m.wg.Done()
	if c.events.aec&watchResv != 0 {
		m.wg.Add(1)
		go m.watchResv(p, c)
	}
	if c.events.aec&nvme.AECANAChange == 0 {
		<-c.admin.dead
		m.fail(p, c, c.admin.err)
		return
	}
	for {
		l, err := c.WaitANAChange(context.Background()) // ends with the controller
		if err != nil {
			m.fail(p, c, err)
			return
		}
		m.mu.Lock()
		if p.c == c {
			p.set(l, false)
			m.notify()
		}
		m.mu.Unlock()
	}
}

// notify wakes the calls waiting for a usable path (m.mu held).
func (m *Multipath) notify() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// fail takes a path's controller c out, closes it in the background (the
// caller may be an I/O call, which goes on down another path), and starts
// connecting the path again. A c that is no longer the path's is past.
func (m *Multipath) fail(p *mpath, c *Controller, err error) {
	if err == nil {
		err = ErrClosed
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if p.c != c || m.closed {
		return // after Close, Close closes it
	}
	p.c, p.err, p.pending = nil, err, false
	m.notify()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		c.Close()
	}()
	m.retryLocked(p)
}

// retryLocked starts connecting a lost path again, if Multipath does
// (m.mu held).
func (m *Multipath) retryLocked(p *mpath) {
	if m.cfg.ReconnectDelay < 0 || m.closed {
		return
	}
	p.retrying = true
	m.wg.Add(1)
	go m.reconnect(p)
}

// reconnect connects a lost path every ReconnectDelay until it connects,
// LossTimeout passes (after one attempt at least, as Linux's host) or
// Multipath closes; then it opens the namespaces opened through the
// others. A namespace the target answers it no longer has stays closed on
// the path; an open that fails otherwise fails the attempt.
func (m *Multipath) reconnect(p *mpath) {
	defer m.wg.Done()
	lost := time.Now()
	for {
		select {
		case <-time.After(m.cfg.ReconnectDelay):
		case <-m.ctx.Done():
			return
		}
		err := m.reconnectOnce(p)
		if err == nil || m.ctx.Err() != nil {
			return
		}
		m.mu.Lock()
		p.err = err
		if m.cfg.LossTimeout >= 0 && time.Since(lost)+m.cfg.ReconnectDelay > m.cfg.LossTimeout {
			p.retrying = false
			p.err = fmt.Errorf("%w (given up after %v)", err, m.cfg.LossTimeout)
			m.notify()
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
	}
}

// reconnectOnce is one attempt to connect a lost path again.
func (m *Multipath) reconnectOnce(p *mpath) error {
	wait := max(m.cfg.ReconnectDelay, 10*time.Second)
	ctx, cancel := context.WithTimeout(m.ctx, wait)
	c, l, err := m.dial(ctx, p.addr)
	cancel()
	if err != nil {
		return err
	}
	m.nsMu.Lock()
	defer m.nsMu.Unlock()
	m.mu.Lock()
	nss := slices.Collect(maps.Values(m.nss))
	m.mu.Unlock()
	opened := make([]*Namespace, len(nss))
	for i, n := range nss {
		ctx, cancel := context.WithTimeout(m.ctx, wait)
		hn, err := c.Namespace(ctx, n.ID)
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil {
			hn.mpath = true
		}
		switch {
		case err == nil && sameNamespace(n.Info, hn.Info):
			opened[i] = hn
		case err != nil && (timedOut || c.broken()):
			c.Close()
			return fmt.Errorf("opening namespace %d: %w", n.ID, err)
		default:
			// Not there, or another namespace now: the target's answer.
		}
	}
	i := slices.Index(m.paths, p)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		c.Close()
		return ErrClosed
	}
	p.up(c, l)
	for k, n := range nss {
		n.ns[i] = opened[k]
	}
	m.notify()
	m.wg.Add(1)
	go m.watch(p, c)
	return nil
}

// refresh reads a path's ANA log again after a path status; the path is
// not used until then.
func (m *Multipath) refresh(p *mpath, c *Controller) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p.c == c {
		m.refreshLocked(p)
	}
}

func (m *Multipath) refreshLocked(p *mpath) {
	if p.pending || p.c == nil || m.closed || !p.ana {
		return
	}
	p.pending = true
	c := p.c
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
		defer cancel()
		l, err := c.ANALog(ctx)
		if err != nil {
			m.fail(p, c, fmt.Errorf("nvmeof: reading the ANA log again: %w", err))
			return
		}
		m.mu.Lock()
		if p.c == c {
			p.set(l, true)
			m.notify()
		}
		m.mu.Unlock()
	}()
}

// state is namespace n's ANA state through path i (m.mu held): optimized
// where the controller does not report ANA. Where the log does not name
// its group (a namespace added since), the log is read again, once, as
// Linux's host does, and till then the path is not used; if it still does
// not, the path is used, non-optimized, so that the target answers.
func (m *Multipath) state(n *MultipathNamespace, i int) nvme.ANAState {
	p := m.paths[i]
	if !p.ana {
		return nvme.ANAOptimized
	}
	g, ok := p.groups[n.ID]
	if !ok {
		g = n.ns[i].Info.ANAGroup
	}
	s, ok := p.states[g]
	switch {
	case ok:
		return s
	case !p.asked[g]:
		if p.asked == nil {
			p.asked = map[uint32]bool{}
		}
		p.asked[g] = true
		m.refreshLocked(p)
		return nvme.ANAInaccessible
	}
	// Read again, and still not there: the namespace may be gone. Let
	// the target say so (Invalid Namespace), not wait for ever.
	return nvme.ANANonOptimized
}

// pick returns the path for a command on n and its namespace there: an
// optimized one, round-robin, else a non-optimized one; or none, with the
// channel that says when to look again, or ErrNoPath.
func (m *Multipath) pick(n *MultipathNamespace) (int, *Namespace, <-chan struct{}, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return -1, nil, nil, ErrClosed
	}
	var opt, nonOpt []int
	left := false
	for i, p := range m.paths {
		if p.retrying {
			left = true
		}
		if p.c == nil || n.ns[i] == nil {
			continue
		}
		left = true
		if p.pending {
			continue
		}
		switch m.state(n, i) {
		case nvme.ANAOptimized:
			opt = append(opt, i)
		case nvme.ANANonOptimized:
			nonOpt = append(nonOpt, i)
		}
	}
	best := opt
	if len(best) == 0 {
		best = nonOpt
	}
	if len(best) > 0 {
		i := best[int(m.rr.Add(1)%uint32(len(best)))]
		if m.cfg.Policy == PolicyQueueDepth {
			// The fewest in flight; ties to the round-robin's pick, so
			// that idle paths still take turns.
			for _, j := range best {
				if m.paths[j].inflight.Load() < m.paths[i].inflight.Load() {
					i = j
				}
			}
		}
		return i, n.ns[i], nil, nil
	}
	if !left {
		return -1, nil, nil, ErrNoPath
	}
	return -1, nil, m.changed, nil
}

// do runs op on a path of n, and again on another when the path answers
// with a path status or breaks. It returns op's count and error, but for
// those it sends again.
func (m *Multipath) do(ctx context.Context, n *MultipathNamespace, op func(*Namespace) (int, error)) (int, error) {
	return m.doSized(ctx, n, 0, op)
}

// doSized is do for a read or write of size octets, which counts as the
// commands it keeps in flight on its path (PolicyQueueDepth): one per
// MDTS, at most maxInflight, as Linux counts a path's requests.
func (m *Multipath) doSized(ctx context.Context, n *MultipathNamespace, size int, op func(*Namespace) (int, error)) (int, error) {
	var last error
	for tries := 0; ; {
		i, hn, wait, err := m.pick(n)
		if err != nil {
			return 0, errors.Join(err, last)
		}
		if i < 0 {
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return 0, errors.Join(ctx.Err(), last)
			}
		}
		p, c := m.paths[i], hn.c
		p.cmds.Add(1)
		w := int64(1)
		if size > 0 {
			w = int64(min(maxInflight, (size+c.maxData-1)/c.maxData))
		}
		p.inflight.Add(w)
		k, err := op(hn)
		p.inflight.Add(-w)
		var se *nvme.StatusError
		isStatus := errors.As(err, &se)
		switch {
		case err == nil:
			return k, nil
		case ctx.Err() != nil:
			return k, err
		case isStatus && se.Status.SCT() == nvme.SCTPath && se.Status&nvme.DNR == 0:
			p.pathErrs.Add(1)
			if code := se.Status.Code(); code >= nvme.StatusANAPersistentLoss && code <= nvme.StatusANATransition {
				m.refresh(p, c) // an ANA state changed: read it before using the path again
			}
		case isStatus:
			return k, err // the namespace's answer, whichever the path
		case m.out(p, c):
			// Taken out while the command ran (its controller closed
			// under it): another path may serve it.
		case !c.broken():
			return k, err // the call's own (io.EOF, ErrRange)
		default:
			m.fail(p, c, err) // the path broke under the command
		}
		last = fmt.Errorf("path %s: %w", p.addr, err)
		if tries++; tries > maxFailovers {
			return 0, last
		}
	}
}

// do0 is do for an op with no count.
func (m *Multipath) do0(ctx context.Context, n *MultipathNamespace, op func(*Namespace) error) error {
	_, err := m.do(ctx, n, func(hn *Namespace) (int, error) { return 0, op(hn) })
	return err
}

// out reports whether a path's controller c was taken out while
// Multipath is open.
func (m *Multipath) out(p *mpath, c *Controller) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return p.c != c && !m.closed
}

// Paths reports each path: its controller, whether it is used, its ANA
// states and how many commands it carried.
func (m *Multipath) Paths() []PathInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ps []PathInfo
	for _, p := range m.paths {
		pi := PathInfo{Addr: p.addr, Controller: p.c, Err: p.err, Retrying: p.retrying, States: map[uint32]nvme.ANAState{},
			Commands: p.cmds.Load(), PathErrors: p.pathErrs.Load(), Connects: p.connects.Load()}
		for g, s := range p.states {
			pi.States[g] = s
		}
		ps = append(ps, pi)
	}
	return ps
}

// Close closes every path's controller, as Controller.Close does, stops
// connecting lost ones, and returns once the paths' goroutines have
// stopped.
func (m *Multipath) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.wg.Wait()
		return nil
	}
	m.closed = true
	m.notify()
	m.wakeResvLocked()
	var cs []*Controller
	var addrs []string
	for _, p := range m.paths {
		if p.c != nil {
			cs, addrs = append(cs, p.c), append(addrs, p.addr)
		}
	}
	m.mu.Unlock()
	m.cancel()
	var errs []error
	for i, c := range cs {
		if err := c.Close(); err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, fmt.Errorf("%s: %w", addrs[i], err))
		}
	}
	m.wg.Wait()
	return errors.Join(errs...)
}

// MultipathNamespace is a namespace through a Multipath: an io.ReaderAt
// and io.WriterAt whose commands go down the paths as Multipath says.
type MultipathNamespace struct {
	m    *Multipath
	ID   uint32
	Info nvme.NamespaceInfo
	ns   []*Namespace // by path; nil where it was not opened
}

// Namespace opens namespace nsid on every path, which must agree on what
// it is (its size, block size and, where given, NGUID); a path connected
// again later opens it too. It returns the same MultipathNamespace for an
// NSID each time.
func (m *Multipath) Namespace(ctx context.Context, nsid uint32) (*MultipathNamespace, error) {
	m.nsMu.Lock()
	defer m.nsMu.Unlock()
	m.mu.Lock()
	n := m.nss[nsid]
	cs := make([]*Controller, len(m.paths))
	for i, p := range m.paths {
		cs[i] = p.c
	}
	m.mu.Unlock()
	if n != nil {
		return n, nil
	}
	n = &MultipathNamespace{m: m, ID: nsid, ns: make([]*Namespace, len(m.paths))}
	var errs []error
	var first *Namespace
	var firstAddr string
	for i, c := range cs {
		if c == nil {
			continue
		}
		hn, err := c.Namespace(ctx, nsid)
		if err != nil {
			errs = append(errs, fmt.Errorf("path %s: %w", m.paths[i].addr, err))
			continue
		}
		hn.mpath = true
		if first != nil && !sameNamespace(first.Info, hn.Info) {
			return nil, fmt.Errorf("nvmeof: namespace %d: paths %s and %s disagree on what it is", nsid, firstAddr, m.paths[i].addr)
		}
		if first == nil {
			first, firstAddr = hn, m.paths[i].addr
		}
		n.ns[i] = hn
	}
	if first == nil {
		return nil, errors.Join(append(errs, fmt.Errorf("nvmeof: namespace %d: no path opens it", nsid))...)
	}
	n.Info = first.Info
	m.mu.Lock()
	for i, hn := range n.ns { // a path lost meanwhile (one that came back waited for nsMu)
		if hn != nil && m.paths[i].c != hn.c {
			n.ns[i] = nil
		}
	}
	m.nss[nsid] = n
	m.mu.Unlock()
	return n, nil
}

// sameNamespace reports whether two views of a namespace, through two paths
// or before and after a reconnect, are of the same namespace.
func sameNamespace(ni, o nvme.NamespaceInfo) bool {
	return ni.Size == o.Size && ni.LBADS == o.LBADS && ni.NGUID == o.NGUID
}

// Size returns the namespace's size in octets.
func (n *MultipathNamespace) Size() int64 { return int64(n.Info.Size) * int64(n.BlockSize()) }

// BlockSize returns the logical block size.
func (n *MultipathNamespace) BlockSize() int { return n.Info.BlockSize() }

// ReadAt reads len(p) octets at off (multiples of the block size).
func (n *MultipathNamespace) ReadAt(p []byte, off int64) (int, error) {
	return n.ReadAtContext(context.Background(), p, off)
}

// WriteAt writes p at off (multiples of the block size).
func (n *MultipathNamespace) WriteAt(p []byte, off int64) (int, error) {
	return n.WriteAtContext(context.Background(), p, off)
}

// ReadAtContext is ReadAt bounded by ctx, which also bounds the wait for
// a usable path. As io.ReaderAt, a read past the end is cut short with
// io.EOF; a read that fails after a failover counts nothing read.
func (n *MultipathNamespace) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	return n.m.doSized(ctx, n, len(p), func(hn *Namespace) (int, error) { return hn.ReadAtContext(ctx, p, off) })
}

// WriteAtContext is WriteAt bounded by ctx. A write sent again down
// another path writes the same octets again.
func (n *MultipathNamespace) WriteAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	return n.m.doSized(ctx, n, len(p), func(hn *Namespace) (int, error) { return hn.WriteAtContext(ctx, p, off) })
}

// WriteAtFUA is Namespace.WriteAtFUA down a usable path.
func (n *MultipathNamespace) WriteAtFUA(ctx context.Context, p []byte, off int64) (int, error) {
	return n.m.doSized(ctx, n, len(p), func(hn *Namespace) (int, error) { return hn.WriteAtFUA(ctx, p, off) })
}

// Flush commits the namespace's written data, through one path (a
// controller's Flush covers what every controller of the subsystem wrote:
// the namespace is one).
func (n *MultipathNamespace) Flush(ctx context.Context) error {
	return n.m.do0(ctx, n, func(hn *Namespace) error { return hn.Flush(ctx) })
}

// WriteZeroes is Namespace.WriteZeroes down a usable path.
func (n *MultipathNamespace) WriteZeroes(ctx context.Context, off, length int64) error {
	return n.m.do0(ctx, n, func(hn *Namespace) error { return hn.WriteZeroes(ctx, off, length) })
}

// Deallocate is Namespace.Deallocate down a usable path.
func (n *MultipathNamespace) Deallocate(ctx context.Context, off, length int64) error {
	return n.m.do0(ctx, n, func(hn *Namespace) error { return hn.Deallocate(ctx, off, length) })
}
