package target

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/internal/transport"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/verbs"
)

// Config configures a Target. The zero value of every field is a
// sensible default.
type Config struct {
	// Device is the verbs device the target uses; nil opens one, which
	// Close closes.
	Device *verbs.Device
	// MaxIOQueues bounds the I/O queues of one controller (default 8).
	MaxIOQueues int
	// MaxQueues bounds the queues (connections) of all hosts together,
	// those still waiting for their Fabrics Connect included (default
	// 256; negative: no bound). Once it is reached a new queue evicts the
	// oldest one still waiting for its Connect, whose connection ends, so
	// that peers that never send one cannot keep hosts out; only when
	// every queue has its controller is one more refused at the RDMA CM
	// with No Resources (NVMe/RDMA's reject status).
	//
	// Memory: a queue of depth D (at most MaxQueueSize, 32 for an admin
	// queue) holds R = D + min(D, 32) receive buffers of 64 +
	// InCapsuleData octets from its CM request on, and data buffers as
	// its commands need them, kept until it ends: at most R + 512 of
	// 8 KiB, R + 16 of min(MaxTransfer, 128 KiB) and, with MaxTransfer
	// above 128 KiB, 16 MiB of MaxTransfer each. At the defaults that is
	// about 0.8 MiB for an I/O queue without its Connect (0.63 MiB of it
	// receive buffers), up to 28 MiB for an I/O queue and 15 MiB for an
	// admin queue: 256 queues (29 controllers of 8 I/O queues) may hold
	// 6.6 GiB, 10.6 GiB with a MaxTransfer of 1 MiB. MaxQueues,
	// MaxQueueSize and MaxTransfer lower it: MaxQueueSize 32 and
	// MaxTransfer 32 KiB make it 7.3 MiB a queue, 1.8 GiB for 256.
	MaxQueues int
	// MaxControllersPerHost bounds the controllers of one host NQN, over
	// all subsystems (default 16; negative: no bound); one more is
	// refused at its Connect with Controller Busy, without DNR, so that a
	// host whose old controllers are ending (KATO) tries again. A
	// controller has its admin queue and at most MaxIOQueues I/O queues
	// (the Connect of one beyond the Number of Queues granted is Invalid
	// Parameters). The host NQN is the host's own claim: a hostile host
	// may use many, and only MaxQueues bounds what they pin together.
	MaxControllersPerHost int
	// MaxQueueSize bounds the entries of an I/O queue (CAP.MQES+1, default
	// 128). The admin queue takes at most 32.
	MaxQueueSize int
	// InCapsuleData is the most data a command capsule on an I/O queue may
	// carry (IOCCSZ; default 4096, at least 1024 for the I/O queues'
	// Connect data). Larger writes are RDMA-Read from the host.
	InCapsuleData int
	// MaxTransfer is the largest data transfer of one command (MDTS): a
	// power of two from 8 KiB to 1 MiB (nvmet-rdma's), default 128 KiB.
	// Above 128 KiB a queue's buffers for the largest commands take up to
	// 16 MiB, and more such commands wait for one.
	MaxTransfer int
	// AdvertiseAddr, "host:port", is what the discovery log names as the
	// subsystems' address; default the address the discovery connection
	// reached.
	AdvertiseAddr string
	// ConnConfig is the listeners' iWARP configuration. Its MPA CRC policy
	// is taken as mpa.CRCOff (use CRCs only if the host asks) unless AskCRC
	// is set.
	ConnConfig verbs.ConnConfig
	// AskCRC turns MPA CRCs on for every queue (the target's Reply asks
	// for them), and, unless ConnConfig.MaxFPDU is set, sends FPDUs of at
	// most 1440 octets, each in a TCP segment of its own
	// (ConnConfig.SegmentPerFPDU), which costs throughput on paths with
	// larger segments. Off by default, as Linux: nvme-rdma leaves CRCs to
	// the RDMA device, and siw does not ask for them. Linux siw 6.1
	// mis-checks the CRC of an FPDU whose trailer arrives split across two
	// receive buffers; small FPDUs, one per segment, make that rare
	// (docs/nvmeof-crc.md; interop/nvmeof_test.go, TestNVMeKernelHostCRC).
	// With AskCRC off, a host that asks still gets CRCs, with FPDUs of
	// ConnConfig's size.
	AskCRC bool
	// Logf, if set, gets connections, controllers and errors.
	Logf func(format string, args ...any)
}

// Default limits.
const (
	defaultMaxIOQueues     = 8
	defaultMaxQueues       = 256
	defaultMaxCtrlsPerHost = 16
	defaultMaxQueueSize    = 128
	adminQueueSize         = 32
	defaultInCapsule       = 4096
	maxQueueSizeLimit      = 1024
)

// Target is an NVMe over Fabrics target on iWARP RDMA (NVMe-oF 1.1 with the
// NVMe/RDMA transport binding): NVM subsystems with namespaces, and a
// discovery controller, on one or more listeners. Each connection is a
// queue (the admin queue or an I/O queue of a controller), served by one
// goroutine the Target owns; Close ends them all.
type Target struct {
	cfg    Config
	dev    *verbs.Device
	ownDev bool
	start  time.Time

	seq uint64 // the order targets were made in (Subsystem.changeHosts)

	mu      sync.Mutex
	subs    map[string]*Subsystem
	ctrls   map[uint16]*controller
	nextID  uint16
	ports   []*Port
	queues  map[*queue]struct{}
	waiting list.List // of *queue: those without a controller, oldest first (places.go)
	genctr  uint64
	anaChg  uint64 // the ANA log's change count (ana.go)
	closed  bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var targetSeq atomic.Uint64

// New returns a Target serving subsystems.
func New(cfg Config, subsystems ...*Subsystem) (*Target, error) {
	if cfg.MaxIOQueues <= 0 {
		cfg.MaxIOQueues = defaultMaxIOQueues
	}
	if cfg.MaxIOQueues > 0xfffe {
		cfg.MaxIOQueues = 0xfffe
	}
	if cfg.MaxQueues == 0 {
		cfg.MaxQueues = defaultMaxQueues
	}
	if cfg.MaxControllersPerHost == 0 {
		cfg.MaxControllersPerHost = defaultMaxCtrlsPerHost
	}
	if cfg.MaxQueueSize <= 0 {
		cfg.MaxQueueSize = defaultMaxQueueSize
	}
	if cfg.MaxQueueSize < adminQueueSize || cfg.MaxQueueSize > maxQueueSizeLimit {
		return nil, fmt.Errorf("nvmeof: MaxQueueSize %d: want %d .. %d", cfg.MaxQueueSize, adminQueueSize, maxQueueSizeLimit)
	}
	if cfg.InCapsuleData <= 0 {
		cfg.InCapsuleData = defaultInCapsule
	}
	if cfg.InCapsuleData < nvme.ConnectDataSize || cfg.InCapsuleData > 64<<10 || cfg.InCapsuleData%16 != 0 {
		return nil, fmt.Errorf("nvmeof: InCapsuleData %d: want a multiple of 16 in 1024 .. 65536", cfg.InCapsuleData)
	}
	if cfg.MaxTransfer <= 0 {
		cfg.MaxTransfer = transport.DefaultMaxTransfer
	}
	// MDTS counts 4 KiB pages as a power of two, and 0 means no limit: one
	// page cannot be said.
	if cfg.MaxTransfer < 8192 || cfg.MaxTransfer > transport.MaxMaxTransfer || cfg.MaxTransfer&(cfg.MaxTransfer-1) != 0 {
		return nil, fmt.Errorf("nvmeof: MaxTransfer %d: want a power of two in 8 KiB .. 1 MiB", cfg.MaxTransfer)
	}
	cfg.ConnConfig = transport.ConnConfig(cfg.ConnConfig, cfg.AskCRC)
	t := &Target{cfg: cfg, dev: cfg.Device, start: time.Now(), seq: targetSeq.Add(1), subs: map[string]*Subsystem{},
		ctrls: map[uint16]*controller{}, queues: map[*queue]struct{}{}}
	for _, s := range subsystems {
		if _, dup := t.subs[s.NQN]; dup {
			return nil, fmt.Errorf("nvmeof: subsystem %q twice", s.NQN)
		}
		t.subs[s.NQN] = s
	}
	if t.dev == nil {
		dev, err := verbs.Open(verbs.DeviceAttr{MaxInline: nvme.CompletionSize})
		if err != nil {
			return nil, err
		}
		t.dev, t.ownDev = dev, true
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	var joined []*Subsystem
	for _, s := range t.subs {
		if err := s.joined(t); err != nil {
			for _, j := range joined {
				j.left(t)
			}
			t.cancel()
			if t.ownDev {
				t.dev.Close()
			}
			return nil, err
		}
		joined = append(joined, s)
	}
	return t, nil
}

func (t *Target) logf(format string, args ...any) {
	if t.cfg.Logf != nil {
		t.cfg.Logf(format, args...)
	}
}

// AddSubsystem adds a subsystem to a running target. Discovery
// controllers that enabled Discovery Log Page Change Notices are told. A
// subsystem whose last target's RemoveSubsystem is still taking its
// namespaces out cannot be added (to any target) until that has.
func (t *Target) AddSubsystem(s *Subsystem) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return verbs.ErrClosed
	}
	if _, dup := t.subs[s.NQN]; dup {
		t.mu.Unlock()
		return fmt.Errorf("nvmeof: subsystem %q twice", s.NQN)
	}
	if err := s.joined(t); err != nil {
		t.mu.Unlock()
		return err
	}
	t.subs[s.NQN] = s
	t.genctr++
	t.mu.Unlock()
	t.discChanged(nil, s.NQN)
	return nil
}

// RemoveSubsystem takes the subsystem named nqn off a running target, as
// deleting it from Linux's nvmet does: the discovery log stops listing
// it (discovery controllers that enabled the notice are told), Connects
// to it are refused, and its controllers on this target end (their hosts
// see the queues disconnect). Once no target serves it, its namespaces are
// removed too (Subsystem.RemoveNamespace), all of them, and it returns
// when no command uses their Backends, which the caller may then flush
// and close, or when ctx ends: then each Namespace's Drained channel says
// when its Backend may be closed.
func (t *Target) RemoveSubsystem(ctx context.Context, nqn string) error {
	t.mu.Lock()
	s := t.subs[nqn]
	if s == nil {
		t.mu.Unlock()
		return fmt.Errorf("nvmeof: no subsystem %q", nqn)
	}
	delete(t.subs, nqn)
	t.genctr++
	// Under t.mu too, so that an AddSubsystem of s cannot come between:
	// it finds s either served or retiring.
	s.mu.Lock()
	delete(s.targets, t)
	var ctrls []*controller
	for c := range s.ctrls {
		if c.t == t {
			ctrls = append(ctrls, c)
		}
	}
	last := len(s.targets) == 0
	s.retiring = last
	s.mu.Unlock()
	t.mu.Unlock()
	t.discChanged(nil, nqn)
	for _, c := range ctrls {
		c.shutdown("its subsystem was removed")
	}
	if !last {
		return nil // another target still serves it, namespaces and all
	}
	var out []*Namespace
	for _, ns := range s.Namespaces() {
		if n, err := s.takeOut(ns.ID); err == nil { // gone meanwhile: removed by another call
			out = append(out, n)
		}
	}
	s.mu.Lock()
	s.retiring = false // it may be added again, without its namespaces
	s.mu.Unlock()
	for _, ns := range out {
		if err := ns.wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// portSubsystem returns the subsystem named nqn if port p exposes it.
func (t *Target) portSubsystem(p *Port, nqn string) *Subsystem {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !p.serves(nqn) {
		return nil
	}
	return t.subs[nqn]
}

// accept takes connection requests until the port's listener closes.
func (t *Target) accept(p *Port) {
	defer t.wg.Done()
	ln := p.ln
	for {
		req, err := ln.GetRequest(t.ctx)
		if err != nil {
			if !errors.Is(err, verbs.ErrClosed) && t.ctx.Err() == nil {
				t.logf("nvmeof: listener %v: %v", ln.Addr(), err)
			}
			return
		}
		t.admit(req, p)
	}
}

// admit checks a connection request's NVMe/RDMA private data and starts
// a queue for it, or rejects it with the transport binding's status.
func (t *Target) admit(req *verbs.ConnRequest, p *Port) {
	cm, err := nvme.ParseCMRequest(req.PrivateData)
	reject := func(st uint16, why string) {
		t.logf("nvmeof: %v: rejected: %s", req.RemoteAddr(), why)
		req.Reject(nvme.CMReject{Status: st}.Append(nil))
	}
	switch {
	case err != nil:
		reject(nvme.CMRejectInvalidRecFmt, err.Error())
		return
	case cm.RecFmt != 0:
		reject(nvme.CMRejectInvalidRecFmt, fmt.Sprintf("record format %d", cm.RecFmt))
		return
	case cm.QID > uint16(t.cfg.MaxIOQueues):
		reject(nvme.CMRejectInvalidQID, fmt.Sprintf("queue %d", cm.QID))
		return
	}
	limit := t.cfg.MaxQueueSize
	if cm.QID == 0 {
		limit = adminQueueSize
	}
	switch {
	case cm.HSQSize == 0 || int(cm.HSQSize) >= limit:
		reject(nvme.CMRejectInvalidHSQSize, fmt.Sprintf("HSQSIZE %d (queue %d)", cm.HSQSize, cm.QID))
		return
	case cm.HRQSize == 0 || int(cm.HRQSize) > limit:
		reject(nvme.CMRejectInvalidHRQSize, fmt.Sprintf("HRQSIZE %d (queue %d)", cm.HRQSize, cm.QID))
		return
	}
	if !t.room() { // before newQueue takes the memory; again in addQueue
		reject(nvme.CMRejectNoResources, fmt.Sprintf("queue %d: MaxQueues (%d) reached, all connected", cm.QID, t.cfg.MaxQueues))
		return
	}
	q, err := t.newQueue(cm)
	if err != nil {
		reject(nvme.CMRejectNoResources, err.Error())
		return
	}
	q.port = p
	if !t.addQueue(q, p) {
		q.release()
		req.Reject(nvme.CMReject{Status: nvme.CMRejectNoResources}.Append(nil))
		return
	}
	go q.run(req)
}

// room reports whether the target may take one more queue, evicting one
// that waits for its Connect if it is full (places.go).
func (t *Target) room() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.makeRoom()
}

// Close stops the listeners, disconnects every host, flushes every
// namespace (a host cut off here got no shutdown to flush at) and returns
// when all the target's goroutines are gone, with the first Flush error.
func (t *Target) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		t.wg.Wait()
		return nil
	}
	t.closed = true
	subs := sortedSubs(t.subs)
	ports := t.ports
	qs := make([]*queue, 0, len(t.queues))
	for q := range t.queues {
		qs = append(qs, q)
	}
	ctrls := make([]*controller, 0, len(t.ctrls))
	for _, c := range t.ctrls {
		ctrls = append(ctrls, c)
	}
	t.mu.Unlock()
	for _, s := range subs {
		s.mu.Lock()
		delete(s.targets, t) // it serves them no more (RemoveSubsystem's "last")
		s.mu.Unlock()
	}
	t.cancel()
	for _, p := range ports {
		p.ln.Close()
	}
	for _, c := range ctrls {
		c.stopKeepAlive()
	}
	for _, q := range qs {
		q.end()
	}
	t.wg.Wait()
	if t.ownDev {
		t.dev.Close()
	}
	var err error
	for _, s := range subs {
		for _, ns := range s.Namespaces() {
			if e := ns.Backend.Flush(); e != nil && err == nil {
				err = fmt.Errorf("nvmeof: %s namespace %d: flush: %w", s.NQN, ns.ID, e)
			}
		}
	}
	return err
}

// addController registers c under a free controller ID (1 .. 0xFFEF),
// which binds its admin queue (bindQueue). It refuses a controller of a
// subsystem that port p no longer exposes or the target no longer serves:
// under t.mu, so that Port.SetSubsystems and RemoveSubsystem either see
// the controller or it sees them.
func (t *Target) addController(c *controller, p *Port) addResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return addBusy
	}
	if c.admin.wait.evicted {
		return addEvicted
	}
	if c.sub != nil && (!p.serves(c.sub.NQN) || t.subs[c.sub.NQN] != c.sub) {
		return addUnlinked
	}
	if n := t.cfg.MaxControllersPerHost; n > 0 {
		for _, o := range t.ctrls {
			if o.hostNQN == c.hostNQN {
				if n--; n == 0 {
					return addHostLimit
				}
			}
		}
	}
	for range 0xffef {
		t.nextID++
		if t.nextID == 0 || t.nextID > 0xffef {
			t.nextID = 1
		}
		if _, used := t.ctrls[t.nextID]; !used {
			c.id = t.nextID
			t.ctrls[c.id] = c
			t.bindQueue(c.admin)
			return addOK
		}
	}
	return addBusy
}

type addResult int

const (
	addOK        addResult = iota
	addBusy                // no controller ID free, or the target closed
	addUnlinked            // the subsystem is no longer exposed there
	addHostLimit           // the host has MaxControllersPerHost controllers
	addEvicted             // its admin queue's place went to a newer queue
)

// Controllers returns the IDs of the target's controllers, in order: each
// is a host's association, from its admin queue's Connect until the
// controller ends (the host's shutdown, a lost admin queue, KATO).
func (t *Target) Controllers() []uint16 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Sorted(maps.Keys(t.ctrls))
}

func (t *Target) controller(id uint16) *controller {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ctrls[id]
}

func (t *Target) removeController(c *controller) {
	t.mu.Lock()
	if t.ctrls[c.id] == c {
		delete(t.ctrls, c.id)
	}
	t.mu.Unlock()
}

// discoveryEntries lists the subsystems hostNQN may reach through port p,
// at the address the discovery connection came to (or AdvertiseAddr).
func (t *Target) discoveryEntries(hostNQN string, local net.Addr, p *Port) (uint64, []nvme.DiscoveryEntry) {
	host, port := "", "4420"
	if t.cfg.AdvertiseAddr != "" {
		if h, p, err := net.SplitHostPort(t.cfg.AdvertiseAddr); err == nil {
			host, port = h, p
		}
	} else if a, ok := local.(*net.TCPAddr); ok {
		host, port = a.IP.String(), strconv.Itoa(a.Port)
	}
	fam := uint8(nvme.AdrFamIPv4)
	if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
		fam = nvme.AdrFamIPv6
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var ents []nvme.DiscoveryEntry
	for _, s := range sortedSubs(t.subs) {
		if !p.serves(s.NQN) || !s.Allowed(hostNQN) {
			continue
		}
		ents = append(ents, nvme.DiscoveryEntry{TrType: nvme.TrTypeRDMA, AdrFam: fam, SubType: nvme.SubTypeNVM, TReq: nvme.TReqNotSpecific,
			PortID: p.id, CntlID: nvme.DynamicCntlID, ASQSZ: adminQueueSize, TrSvcID: port, TrAddr: host, SubNQN: s.NQN})
	}
	// Then the port's referrals, for every host (as nvmet).
	ents = append(ents, p.refEnts...)
	return t.genctr, ents
}
