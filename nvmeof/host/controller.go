package host

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/internal/transport"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/verbs"
)

// Config configures a host's connection to a controller. The zero
// value works.
type Config struct {
	// HostNQN names the host; default a UUID-based NQN drawn per Connect.
	HostNQN string
	// HostID is the host identifier; default random.
	HostID [16]byte
	// IOQueues is the number of I/O queues asked for (default 2); the
	// controller may grant fewer.
	IOQueues int
	// QueueDepth is each I/O queue's number of entries (default 32, 2 ..
	// 256, and no more than the controller's CAP.MQES+1).
	QueueDepth int
	// KATO is the keep-alive timeout (default 5 s for NVM subsystems, none
	// for discovery; negative: none). The host sends Keep Alive every KATO/2
	// and ends the controller when one is not answered within KATO.
	KATO time.Duration
	// IOTimeout bounds how long a command may go unanswered (default 30 s,
	// Linux's io_timeout; negative: for ever). A target that answers Keep
	// Alive but never completes a command is thus found: the controller
	// then ends all its queues, and its commands and Err return an error
	// matching ErrCommandTimeout and ErrQueueDead (Multipath connects the
	// path again). An Asynchronous Event Request, outstanding until the
	// controller has news, is exempt. A call's own context bounds only
	// that call: the command is abandoned, and its queue goes on.
	IOTimeout time.Duration
	// MaxInCapsule bounds the write data sent in the command capsule
	// instead of by the target's RDMA Read (default 4096; the controller's
	// IOCCSZ bounds it too; negative: never).
	MaxInCapsule int
	// MaxTransfer is the largest data transfer of one command: a power of
	// two from 8 KiB to 1 MiB (default 128 KiB), bounded by the
	// controller's MDTS too. Each I/O queue slot holds a registered buffer
	// this large (QueueDepth of them a queue).
	MaxTransfer int
	// Device is the verbs device; nil opens one that Close closes.
	Device *verbs.Device
	// ConnConfig is each queue's iWARP configuration (its PrivateData is
	// the NVMe/RDMA CM request, filled in). Its MPA CRC policy is taken as
	// mpa.CRCOff unless AskCRC is set. Its TCP.LocalAddr is the source
	// address of every queue (nvme-cli's --host-traddr): an IP, no port,
	// as every queue is a connection of its own.
	ConnConfig verbs.ConnConfig
	// WatchNamespaces enables the controller's Namespace Attribute Notices
	// (if its OAES announces them) and keeps an Asynchronous Event Request
	// outstanding, so that WaitNamespaceChange learns of namespaces added
	// while connected, as Linux's host does to rescan.
	WatchNamespaces bool
	// WatchDiscovery is WatchNamespaces for a discovery controller
	// (Connect to DiscoveryNQN): Discovery Log Page Change Notices, so
	// that WaitDiscoveryChange learns of subsystems added, removed or
	// opened to this host, as a persistent discovery controller of
	// Linux's host (nvme discover -p) tells udev.
	WatchDiscovery bool
	// WatchANA enables the controller's ANA Change Notices (if it reports
	// ANA and its OAES announces them) and keeps an Asynchronous Event
	// Request outstanding, so that WaitANAChange learns of its paths'
	// ANA states changing, as Linux's multipath host does to move its
	// I/O (Multipath watches its paths so).
	WatchANA bool
	// WatchReservations keeps an Asynchronous Event Request outstanding
	// (on a controller whose ONCS announces reservations) and reads the
	// Reservation Notification log at each Reservation Log Page
	// Available notice, so that WaitReservationNotice learns of another
	// host preempting this one's registration, or releasing or clearing
	// a reservation this one is registered for: how a fenced cluster node
	// learns it was fenced before its next write fails.
	WatchReservations bool
	// AskCRC asks the target for MPA CRCs and, unless ConnConfig.MaxFPDU
	// is set, sends FPDUs of at most 1440 octets, each in a TCP segment of
	// its own. Off by default, as Linux's nvme-rdma. Linux siw 6.1 as the
	// target mis-checks the CRC of an FPDU whose trailer arrives split
	// across two receive buffers, which small FPDUs make rarer but do not
	// end (docs/nvmeof-crc.md; interop/nvmeof_test.go,
	// TestNVMeGoHostKernelTarget).
	AskCRC bool
}

// Controller is the host's connection to a controller: an admin queue
// and, on an NVM subsystem, I/O queues. Its methods may be called from
// several goroutines.
type Controller struct {
	cfg     Config
	dev     *verbs.Device
	ownDev  bool
	network string
	addr    string
	SubNQN  string
	// ID is the controller ID the target assigned; Info its Identify
	// Controller data; CAP its capabilities property.
	ID   uint16
	Info nvme.ControllerInfo
	CAP  uint64

	admin   *queue
	qmu     sync.Mutex // io while connect appends to it, for reset
	io      []*queue
	rr      atomic.Uint32
	maxData int

	events    events // Config.WatchNamespaces, WatchANA, WatchReservations, WatchDiscovery
	kaStop    chan struct{}
	kaOnce    sync.Once
	kaWG      sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
	closedOK  atomic.Bool // Close began while the controller was up: Err says ErrClosed
}

const (
	defaultIOQueues   = 2
	defaultQueueDepth = 32
	maxHostDepth      = 256
	maxIOQueues       = 65535 // Number of Queues counts them in 16 bits, less one
	hostAdminDepth    = 32
	defaultHostInCap  = 4096
	defaultIOTimeout  = 30 * time.Second
)

// NewNQN returns a UUID-based host NQN (NVMe base 2.0 section 4.7).
func NewNQN() string {
	var u [16]byte
	rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("nqn.2014-08.org.nvmexpress:uuid:%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:])
}

// DefaultPort is the port Connect uses when addr names none: 4420, the
// port IANA assigned to NVMe over Fabrics, which NVMe/RDMA uses for
// discovery controllers too (8009 is NVMe/TCP's discovery port).
const DefaultPort = "4420"

// withDefaultPort returns addr with DefaultPort if it names no port (a
// host name, an IPv4 address, or an IPv6 address bare or in brackets).
func withDefaultPort(addr string) string {
	if _, _, err := net.SplitHostPort(addr); err == nil || addr == "" {
		return addr
	}
	if strings.HasPrefix(addr, "[") && strings.HasSuffix(addr, "]") {
		addr = addr[1 : len(addr)-1]
	}
	return net.JoinHostPort(addr, DefaultPort)
}

// Connect connects to the subsystem subNQN at addr (network "tcp"; an addr
// without a port gets DefaultPort): the admin queue, Connect, enabling the
// controller, Identify, then the I/O queues (none for the discovery
// subsystem). ctx bounds all of it.
func Connect(ctx context.Context, network, addr, subNQN string, cfg Config) (*Controller, error) {
	disc := subNQN == nvme.DiscoveryNQN
	addr = withDefaultPort(addr)
	if cfg.HostNQN == "" {
		cfg.HostNQN = NewNQN()
	}
	if cfg.HostID == [16]byte{} {
		rand.Read(cfg.HostID[:])
	}
	if cfg.IOQueues <= 0 {
		cfg.IOQueues = defaultIOQueues
	}
	if cfg.IOQueues > maxIOQueues {
		return nil, fmt.Errorf("nvmeof: IOQueues %d: want at most %d", cfg.IOQueues, maxIOQueues)
	}
	if cfg.QueueDepth == 0 {
		cfg.QueueDepth = defaultQueueDepth
	}
	if cfg.QueueDepth < 2 || cfg.QueueDepth > maxHostDepth {
		return nil, fmt.Errorf("nvmeof: QueueDepth %d: want 2 .. %d", cfg.QueueDepth, maxHostDepth)
	}
	if cfg.KATO == 0 && !disc {
		cfg.KATO = 5 * time.Second
	}
	if cfg.KATO < 0 {
		cfg.KATO = 0
	}
	if cfg.IOTimeout == 0 {
		cfg.IOTimeout = defaultIOTimeout
	}
	if cfg.IOTimeout < 0 {
		cfg.IOTimeout = 0
	}
	if cfg.MaxTransfer == 0 {
		cfg.MaxTransfer = transport.DefaultMaxTransfer
	}
	if cfg.MaxTransfer < 8192 || cfg.MaxTransfer > transport.MaxMaxTransfer || cfg.MaxTransfer&(cfg.MaxTransfer-1) != 0 {
		return nil, fmt.Errorf("nvmeof: MaxTransfer %d: want a power of two in 8 KiB .. 1 MiB", cfg.MaxTransfer)
	}
	if cfg.MaxInCapsule == 0 {
		cfg.MaxInCapsule = defaultHostInCap
	}
	if cfg.MaxInCapsule < 0 {
		cfg.MaxInCapsule = 0
	}
	cfg.ConnConfig = transport.ConnConfig(cfg.ConnConfig, cfg.AskCRC)
	c := &Controller{cfg: cfg, dev: cfg.Device, network: network, addr: addr, SubNQN: subNQN, kaStop: make(chan struct{})}
	if c.dev == nil {
		dev, err := verbs.Open(verbs.DeviceAttr{MaxInline: nvme.CommandSize + max(cfg.MaxInCapsule, nvme.ConnectDataSize)})
		if err != nil {
			return nil, err
		}
		c.dev, c.ownDev = dev, true
	}
	if err := c.connect(ctx, disc); err != nil {
		c.shutdownQueues(ctx, false)
		c.stopKeepAlive()
		if c.ownDev {
			c.dev.Close()
		}
		return nil, err
	}
	return c, nil
}

func (c *Controller) connect(ctx context.Context, disc bool) error {
	admin, err := dialQueue(ctx, c.dev, queueConfig{qid: 0, depth: hostAdminDepth, maxData: transport.DefaultMaxTransfer,
		conn: c.cfg.ConnConfig, network: c.network, addr: c.addr, timeout: c.cfg.IOTimeout, onTimeout: c.reset})
	if err != nil {
		return err
	}
	c.qmu.Lock()
	c.admin = admin
	c.qmu.Unlock()
	kato := uint32(c.cfg.KATO / time.Millisecond)
	id, err := c.fabricsConnect(ctx, c.admin, nvme.DynamicCntlID, kato)
	if err != nil {
		return err
	}
	c.ID = id
	if c.CAP, err = c.propertyGet(ctx, nvme.PropCAP, 8); err != nil {
		return err
	}
	if err := c.enable(ctx); err != nil {
		return err
	}
	buf := make([]byte, nvme.IdentifySize)
	if err := c.Identify(ctx, nvme.CNSController, 0, buf); err != nil {
		return err
	}
	if c.Info, err = nvme.ParseControllerInfo(buf); err != nil {
		return err
	}
	if c.Info.CntlID != c.ID {
		return fmt.Errorf("nvmeof: Identify says controller %d, Connect said %d", c.Info.CntlID, c.ID)
	}
	c.maxData = c.cfg.MaxTransfer
	// MDTS 20 and above are larger than we ever transfer (and a shift of
	// 51 or more would overflow).
	if m := c.Info.MDTS; m != 0 && m < 20 && 4096<<m < c.maxData {
		c.maxData = 4096 << m
	}
	if disc {
		if c.cfg.WatchDiscovery && c.Info.OAES&nvme.AECDiscChange != 0 {
			if err := c.watch(ctx, nvme.AECDiscChange); err != nil {
				return err
			}
		}
		c.startKeepAlive(kato)
		return nil
	}
	res, err := c.SetFeatures(ctx, nvme.FeatNumQueues, uint32(c.cfg.IOQueues-1)|uint32(c.cfg.IOQueues-1)<<16)
	if err != nil {
		return err
	}
	n := min(int(res&0xffff), int(res>>16)) + 1
	n = min(n, c.cfg.IOQueues)
	depth := min(c.cfg.QueueDepth, int(c.CAP&0xffff)+1)
	inCap := 0
	if c.Info.IOCCSZ*16 > nvme.CommandSize && c.Info.SGLS&nvme.SGLSOffset != 0 {
		inCap = min(int(c.Info.IOCCSZ*16-nvme.CommandSize), c.cfg.MaxInCapsule)
	}
	for qid := 1; qid <= n; qid++ {
		q, err := dialQueue(ctx, c.dev, queueConfig{qid: uint16(qid), depth: depth, inCap: inCap, maxData: c.maxData,
			conn: c.cfg.ConnConfig, network: c.network, addr: c.addr, timeout: c.cfg.IOTimeout, onTimeout: c.reset})
		if err != nil {
			return err
		}
		c.qmu.Lock()
		c.io = append(c.io, q)
		c.qmu.Unlock()
		if _, err := c.fabricsConnect(ctx, q, c.ID, 0); err != nil {
			return err
		}
	}
	var aec uint32
	if c.cfg.WatchNamespaces && c.Info.OAES&nvme.AECNSAttr != 0 {
		aec |= nvme.AECNSAttr
	}
	if _, err := c.anaLogLen(); c.cfg.WatchANA && c.Info.OAES&nvme.AECANAChange != 0 && err == nil {
		aec |= nvme.AECANAChange // only if its log can be read: a failed read would end the other watches too
	}
	if c.cfg.WatchReservations && c.Info.ONCS&nvme.ONCSResv != 0 {
		aec |= watchResv
	}
	if aec != 0 {
		if err := c.watch(ctx, aec); err != nil {
			return err
		}
	}
	c.startKeepAlive(kato)
	return nil
}

// startKeepAlive starts sending Keep Alive, once the queues are all
// connected (as Linux's host: nvme_start_ctrl), so that the goroutine never
// sees c.io change. Meanwhile the target's traffic based keep alive counts
// the Connects.
func (c *Controller) startKeepAlive(kato uint32) {
	if kato != 0 {
		c.kaWG.Add(1)
		go c.keepAlive(c.cfg.KATO)
	}
}

// fabricsConnect sends Connect on q: the data in the capsule if the queue
// takes that much, by the target's RDMA Read otherwise.
func (c *Controller) fabricsConnect(ctx context.Context, q *queue, cntlid uint16, kato uint32) (uint16, error) {
	i, err := q.acquire(ctx)
	if err != nil {
		return 0, err
	}
	cmd := q.cmd(i)
	nvme.NewConnect(cmd, 0, q.qid, uint16(q.sqsize-1), kato)
	cd := nvme.ConnectData{HostID: c.cfg.HostID, CntlID: cntlid, SubNQN: c.SubNQN, HostNQN: c.cfg.HostNQN}
	inCap := 0
	if q.inCap >= nvme.ConnectDataSize {
		cd.Append(q.slots[i].capsule[nvme.CommandSize:nvme.CommandSize])
		cmd.SGL().SetInCapsule(0, nvme.ConnectDataSize)
		inCap = nvme.ConnectDataSize
	} else {
		cd.Append(q.slots[i].buf[:0])
		q.keyed(i, cmd, nvme.ConnectDataSize)
	}
	res, err := q.run(ctx, i, inCap, fmt.Sprintf("Connect queue %d", q.qid))
	if err == nil || isStatus(err) {
		q.releaseSlot(i)
	}
	return uint16(res), c.connectError(err, res, cntlid)
}

// connectError names the field a Connect Invalid Parameters status points
// at in the Connect data (its result: IATTR bit 16 set, IPO the offset),
// as Linux's host logs it (nvmf_log_connect_error): the status alone does
// not tell a mistyped subsystem NQN from a refused host NQN.
func (c *Controller) connectError(err error, res uint64, cntlid uint16) error {
	var se *nvme.StatusError
	if !errors.As(err, &se) || se.Status.Code() != nvme.StatusConnectInvalidParm || res>>16&1 == 0 {
		return err
	}
	switch uint16(res) {
	case nvme.ConnectOffSubNQN:
		return fmt.Errorf("%w: the target at %s has no subsystem %q on that port", err, c.addr, c.SubNQN)
	case nvme.ConnectOffHostNQN:
		return fmt.Errorf("%w: host NQN %q refused", err, c.cfg.HostNQN)
	case nvme.ConnectOffCntlID:
		return fmt.Errorf("%w: controller ID %d refused", err, cntlid)
	}
	return err
}

func (c *Controller) propertyGet(ctx context.Context, off uint32, size int) (uint64, error) {
	return c.admin.adminCmd(ctx, func(cmd nvme.Command) { nvme.NewPropertyGet(cmd, 0, off, size) }, 0, "Property Get", nil)
}

func (c *Controller) propertySet(ctx context.Context, off, v uint32) error {
	_, err := c.admin.adminCmd(ctx, func(cmd nvme.Command) { nvme.NewPropertySet(cmd, 0, off, v) }, 0, "Property Set", nil)
	return err
}

// enable sets CC.EN (with 64-octet SQEs, 16-octet CQEs) and waits for
// CSTS.RDY, at most CAP.TO.
func (c *Controller) enable(ctx context.Context) error {
	if err := c.propertySet(ctx, nvme.PropCC, nvme.CCEnable|6<<16|4<<20); err != nil {
		return err
	}
	end := time.Now().Add(time.Duration(c.CAP>>24&0xff)*500*time.Millisecond + time.Second)
	for {
		csts, err := c.propertyGet(ctx, nvme.PropCSTS, 4)
		if err != nil {
			return err
		}
		switch {
		case csts&nvme.CSTSFatal != 0:
			return errors.New("nvmeof: the controller reports a fatal status (CSTS.CFS) on enable")
		case csts&nvme.CSTSReady != 0:
			return nil
		case time.Now().After(end):
			return errors.New("nvmeof: the controller did not become ready within CAP.TO")
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// keepAlive sends Keep Alive every KATO/2; one unanswered for KATO ends
// the controller's queues.
func (c *Controller) keepAlive(kato time.Duration) {
	defer c.kaWG.Done()
	tick := time.NewTicker(kato / 2)
	defer tick.Stop()
	for {
		select {
		case <-c.kaStop:
			return
		case <-tick.C:
		}
		ctx, cancel := closeOwnCtx(kato)
		_, err := c.admin.adminCmd(ctx, func(cmd nvme.Command) { nvme.NewAdmin(cmd, nvme.AdminKeepAlive, 0, 0, 0, 0) }, 0, "Keep Alive", nil)
		cancel()
		if err != nil && !isStatus(err) {
			if errors.Is(err, context.DeadlineExceeded) {
				c.reset(&endedError{cause: ErrKeepAliveExpired, msg: fmt.Sprintf("Keep Alive unanswered for %v (KATO); the controller's queues end", kato)})
			}
			c.shutdownQueues(context.Background(), false)
			return
		}
	}
}

// Identify reads the Identify data structure cns for nsid into buf (4096
// octets).
func (c *Controller) Identify(ctx context.Context, cns uint8, nsid uint32, buf []byte) error {
	if len(buf) < nvme.IdentifySize {
		return errors.New("nvmeof: Identify needs a 4096-octet buffer")
	}
	_, err := c.admin.adminCmd(ctx, func(cmd nvme.Command) { nvme.NewAdmin(cmd, nvme.AdminIdentify, 0, nsid, uint32(cns), 0) },
		nvme.IdentifySize, fmt.Sprintf("Identify CNS %d", cns), func(b []byte) { copy(buf, b) })
	return err
}

// GetLogPage reads len(buf) octets (a multiple of 4) of log lid from
// offset off.
func (c *Controller) GetLogPage(ctx context.Context, lid uint8, nsid uint32, off uint64, buf []byte) error {
	if len(buf) == 0 || len(buf)%4 != 0 || len(buf) > c.admin.maxData {
		return fmt.Errorf("nvmeof: Get Log Page of %d octets", len(buf))
	}
	numd := uint32(len(buf)/4 - 1)
	_, err := c.admin.adminCmd(ctx, func(cmd nvme.Command) {
		nvme.NewAdmin(cmd, nvme.AdminGetLogPage, 0, nsid, uint32(lid)|numd<<16, numd>>16)
		cmd.SetCDW(12, uint32(off))
		cmd.SetCDW(13, uint32(off>>32))
	}, len(buf), fmt.Sprintf("Get Log Page %#x", lid), func(b []byte) { copy(buf, b) })
	return err
}

// SetFeatures sets feature fid to v and returns the command's result.
func (c *Controller) SetFeatures(ctx context.Context, fid uint8, v uint32) (uint32, error) {
	res, err := c.admin.adminCmd(ctx, func(cmd nvme.Command) { nvme.NewAdmin(cmd, nvme.AdminSetFeatures, 0, 0, uint32(fid), v) }, 0,
		fmt.Sprintf("Set Features %#x", fid), nil)
	return uint32(res), err
}

// GetFeatures returns feature fid's current value.
func (c *Controller) GetFeatures(ctx context.Context, fid uint8) (uint32, error) {
	res, err := c.admin.adminCmd(ctx, func(cmd nvme.Command) { nvme.NewAdmin(cmd, nvme.AdminGetFeatures, 0, 0, uint32(fid), 0) }, 0,
		fmt.Sprintf("Get Features %#x", fid), nil)
	return uint32(res), err
}

// DiscoveryLog reads the whole discovery log (on a discovery controller).
// A log longer than one transfer (MDTS: 127 records of 1 KiB at 128 KiB)
// is read in pieces at increasing offsets, and its header once more at the
// end. A log that changed between reading its header and reading it whole
// (the generation counter or the record count differ) is read again, as
// NVMe-oF asks, up to ten times.
func (c *Controller) DiscoveryLog(ctx context.Context) ([]nvme.DiscoveryEntry, error) {
	hdr := make([]byte, nvme.DiscHeaderSize)
	if err := c.GetLogPage(ctx, nvme.LogDiscovery, 0, 0, hdr); err != nil {
		return nil, err
	}
	gen, n, _, err := nvme.ParseDiscoveryLog(hdr)
	if err != nil {
		return nil, err
	}
	chunk := max(min(c.maxData, c.admin.maxData), nvme.DiscEntrySize) / nvme.DiscEntrySize * nvme.DiscEntrySize // the target's MDTS
	for range 10 {
		if n == 0 {
			return nil, nil
		}
		if n > nvme.MaxDiscRecords {
			return nil, fmt.Errorf("nvmeof: a discovery log of %d records (at most %d read)", n, nvme.MaxDiscRecords)
		}
		all := make([]byte, nvme.DiscHeaderSize+int(n)*nvme.DiscEntrySize)
		var pieceErr error
		for off := 0; off < len(all) && pieceErr == nil; off += chunk {
			pieceErr = c.GetLogPage(ctx, nvme.LogDiscovery, 0, uint64(off), all[off:min(off+chunk, len(all))])
			if pieceErr != nil && off == 0 {
				return nil, pieceErr
			}
		}
		if pieceErr != nil {
			// A later piece refused: the log may have shrunk under its
			// offset. If the header says it changed, read it again.
			if err := c.GetLogPage(ctx, nvme.LogDiscovery, 0, 0, hdr); err != nil {
				return nil, err
			}
			gen3, n3, _, err := nvme.ParseDiscoveryLog(hdr)
			if err != nil || gen3 == gen && n3 == n {
				return nil, pieceErr
			}
			gen, n = gen3, n3
			continue
		}
		gen2, n2, ents, err := nvme.ParseDiscoveryLog(all)
		if err != nil {
			return nil, err
		}
		if len(all) > chunk {
			// Read in pieces: the header again, to know that it did not
			// change meanwhile.
			if err := c.GetLogPage(ctx, nvme.LogDiscovery, 0, 0, hdr); err != nil {
				return nil, err
			}
			gen3, n3, _, err := nvme.ParseDiscoveryLog(hdr)
			if err != nil {
				return nil, err
			}
			if gen3 != gen2 || n3 != n2 {
				gen, n = gen3, n3
				continue
			}
		}
		if gen2 == gen && n2 == n {
			return ents, nil
		}
		gen, n = gen2, n2
	}
	return nil, errors.New("nvmeof: the discovery log kept changing while it was read")
}

// Discover connects to the discovery controller at addr, reads its log
// and disconnects.
func Discover(ctx context.Context, network, addr string, cfg Config) ([]nvme.DiscoveryEntry, error) {
	cfg.IOQueues = 0
	c, err := Connect(ctx, network, addr, nvme.DiscoveryNQN, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.DiscoveryLog(ctx)
}

// ActiveNamespaces returns the controller's active NSIDs (up to 1024).
func (c *Controller) ActiveNamespaces(ctx context.Context) ([]uint32, error) {
	buf := make([]byte, nvme.IdentifySize)
	if err := c.Identify(ctx, nvme.CNSActiveNSList, 0, buf); err != nil {
		return nil, err
	}
	var ids []uint32
	for i := 0; i < nvme.IdentifySize; i += 4 {
		id := uint32(buf[i]) | uint32(buf[i+1])<<8 | uint32(buf[i+2])<<16 | uint32(buf[i+3])<<24
		if id == 0 {
			break
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// IOQueues returns the number of connected I/O queues.
func (c *Controller) IOQueues() int { return len(c.io) }

// Close ends the controller in the order NVMe asks of a normal shutdown:
// new commands fail with ErrClosed, those in flight finish (Close waits up
// to closeDrain for them, Keep Alive going on meanwhile), the I/O queues
// disconnect, then the controller is shut down (CC.SHN, waiting up to
// shutdownWait for CSTS.SHST to say done) and the admin queue disconnects.
// Linux's host does the same; a target that shuts its I/O queues at CC.SHN,
// as ours does, would otherwise reset them under the commands still in
// flight. Every call returns the first one's error: ErrShutdownFatal if
// the controller reported a fatal status, or why the shutdown did not
// complete.
func (c *Controller) Close() error {
	c.closeOnce.Do(func() {
		if c.admin != nil && c.Err() == nil {
			c.closedOK.Store(true)
		}
		if c.admin != nil {
			c.admin.refuse()
		}
		for _, q := range c.io {
			q.refuse()
		}
		dctx, cancel := context.WithTimeout(context.Background(), closeDrain)
		defer cancel()
		for _, q := range c.io {
			q.drain(dctx)
		}
		for _, q := range c.io {
			q.close(dctx, dctx.Err() == nil)
		}
		c.stopKeepAlive()
		if c.admin != nil {
			c.closeErr = c.shutdown()
		}
		c.events.wg.Wait() // its AER ended with the admin queue
		if c.ownDev {
			c.dev.Close()
		}
	})
	return c.closeErr
}

// stopKeepAlive stops the Keep Alive goroutine, if it runs, and waits for
// it.
func (c *Controller) stopKeepAlive() {
	c.kaOnce.Do(func() { close(c.kaStop) })
	c.kaWG.Wait()
}

// shutdownWait bounds how long Close waits for CSTS.SHST to say done
// (Linux's host waits 5 s by default too, or what RTD3E says).
const shutdownWait = 5 * time.Second

// ErrShutdownFatal is Close's error when the controller reported a fatal
// status (CSTS.CFS) as its shutdown completed: data written may not be
// durable (our target sets it when a namespace's Flush fails).
var ErrShutdownFatal = errors.New("nvmeof: controller fatal status at shutdown")

// shutdown sets CC.SHN, waits for CSTS.SHST to say done, and disconnects
// the admin queue.
func (c *Controller) shutdown() error {
	ctx, cancel := closeOwnCtx(shutdownWait)
	defer cancel()
	err := c.propertySet(ctx, nvme.PropCC, nvme.CCEnable|6<<16|4<<20|1<<14)
	for err == nil {
		var csts uint64
		if csts, err = c.propertyGet(ctx, nvme.PropCSTS, 4); err != nil {
			break
		}
		if csts&nvme.CSTSShstMask == nvme.CSTSShstDone {
			if csts&nvme.CSTSFatal != 0 {
				err = ErrShutdownFatal
			}
			break
		}
		select {
		case <-ctx.Done():
			err = fmt.Errorf("nvmeof: the controller's shutdown did not complete in %v (CSTS %#x)", shutdownWait, csts)
		case <-time.After(10 * time.Millisecond):
		}
	}
	c.admin.drain(ctx)
	c.admin.close(ctx, err == nil && ctx.Err() == nil)
	return err
}

// closeDrain bounds how long Close waits for commands in flight.
const closeDrain = 5 * time.Second

// shutdownQueues ends every queue (I/O queues first).
func (c *Controller) shutdownQueues(ctx context.Context, orderly bool) {
	for _, q := range c.io {
		q.close(ctx, orderly)
	}
	if c.admin != nil {
		c.admin.close(ctx, orderly)
	}
}

// reset ends every queue of the controller with err, which their commands
// and Err return (a queue's watcher calls it, and the Keep Alive loop).
// Each queue's watcher then closes its connection.
func (c *Controller) reset(err error) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if c.admin != nil {
		c.admin.fail(err)
	}
	for _, q := range c.io {
		q.fail(err)
	}
}

// Err returns nil while the controller is up, and why it ended after:
// ErrClosed after Close, unless it had failed before Close began
// (ErrQueueDead, ErrCommandTimeout, ErrKeepAliveExpired).
func (c *Controller) Err() error {
	select {
	case <-c.admin.dead:
		if c.closedOK.Load() {
			return ErrClosed
		}
		return c.admin.err
	default:
		return nil
	}
}

// broken reports whether any of the controller's queues has ended.
func (c *Controller) broken() bool {
	if c.Err() != nil {
		return true
	}
	for _, q := range c.io {
		select {
		case <-q.dead:
			return true
		default:
		}
	}
	return false
}

// IOQueueDone returns a channel closed when I/O queue i's connection has
// ended.
func (c *Controller) IOQueueDone(i int) <-chan struct{} { return c.io[i].dead }
