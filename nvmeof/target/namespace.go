package target

import (
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// Namespace is a namespace of a subsystem: a Backend cut into logical
// blocks.
type Namespace struct {
	ID        uint32
	Backend   Backend
	BlockSize int // 512 .. 64 KiB, a power of two
	NGUID     [16]byte
	UUID      [16]byte

	anaGrp    atomic.Uint32                 // ANA group (ana.go)
	resv      *resv                         // reservations (resv.go), nil if not enabled
	wp        atomic.Bool                   // write protected (writeprotect.go)
	wpLocked  atomic.Bool                   // ...until a power cycle: wp for good
	writing   atomic.Int64                  // writes running (past the protection check), which protecting waits out
	settling  atomic.Pointer[chan struct{}] // while protection is being turned on: closed once decided
	refs      atomic.Int64                  // commands using Backend (Subsystem.use), which RemoveNamespace waits out
	removed   atomic.Bool                   // RemoveNamespace has taken it out
	drained   chan struct{}                 // closed once removed and refs is 0
	drainOnce sync.Once
}

// Blocks returns the namespace's size in logical blocks.
func (ns *Namespace) Blocks() uint64 { return uint64(ns.Backend.Size()) / uint64(ns.BlockSize) }

func (ns *Namespace) lbads() uint8 {
	var s uint8
	for 1<<s < ns.BlockSize {
		s++
	}
	return s
}

// AddNamespace adds a namespace over b with the given block size (0:
// 512) and returns it: AddNamespaceConfig with only the block size.
func (s *Subsystem) AddNamespace(b Backend, blockSize int) (*Namespace, error) {
	return s.AddNamespaceConfig(b, NamespaceConfig{BlockSize: blockSize})
}

// NamespaceConfig is what AddNamespaceConfig takes besides the Backend,
// as a namespace's directory in Linux's nvmet configfs does (nsid, and
// device_nguid and device_uuid; nvmet takes the block size from the
// device). Every zero field is a default.
type NamespaceConfig struct {
	// ID is the NSID, 1 .. 1024 (NN), which must not be in use; 0 takes
	// one past the highest NSID the subsystem has had, so that a removed
	// namespace's NSID does not come back with other data unless asked
	// for.
	ID uint32
	// BlockSize is the logical block size, a power of two in 512 .. 64 KiB
	// (0: 512).
	BlockSize int
	// NGUID and UUID identify the namespace to hosts, which use them to
	// tell a namespace that comes back from a new one. Zero: derived from
	// the subsystem's NQN and the NSID, so that a restarted target
	// presents the same identity.
	NGUID, UUID [16]byte
	// ANAGroup is the namespace's ANA group, 1 .. MaxANAGroup (0: 1),
	// whose state through each port (Port.SetANAState) says whether hosts
	// may use it there.
	ANAGroup uint32
	// Reservations enables the reservation commands on the namespace, as
	// nvmet's resv_enable (resv.go).
	Reservations bool
	// ReservationFile, with Reservations, is where the registrations and
	// the reservation persist through power loss while a host asks for it
	// (PTPL, resvptpl.go): read when the namespace is added, written at
	// each change. It is this namespace's alone (another namespace of the
	// subsystem with it is refused; one of another subsystem is not
	// seen), and its directory must take new files. "": they last as long
	// as the namespace.
	ReservationFile string
}

// AddNamespaceConfig adds a namespace over b and returns it. It may be
// called while hosts are connected: each controller of the subsystem
// lists the NSID in its Changed Namespace List (log page 04h) and, if its
// host enabled Namespace Attribute Notices, completes an Asynchronous
// Event Request with one, upon which Linux's host rescans and shows the
// new namespace.
func (s *Subsystem) AddNamespaceConfig(b Backend, cfg NamespaceConfig) (*Namespace, error) {
	blockSize := cfg.BlockSize
	if blockSize == 0 {
		blockSize = 512
	}
	if blockSize < 512 || blockSize > 65536 || blockSize&(blockSize-1) != 0 {
		return nil, fmt.Errorf("nvmeof: block size %d: want a power of two in 512 .. 65536", blockSize)
	}
	anaGroup := cmp.Or(cfg.ANAGroup, 1)
	if err := checkANAGroup(anaGroup); err != nil {
		return nil, err
	}
	if b.Size() < int64(blockSize) {
		return nil, fmt.Errorf("nvmeof: a backend of %d octets holds no block of %d", b.Size(), blockSize)
	}
	var ns *Namespace // set below: the reservations' notices name it
	var r *resv
	if cfg.Reservations {
		r = newResv(func(t nvme.ReservationNoticeType, hosts [][16]byte) { s.resvNotify(ns, t, hosts) })
		if cfg.ReservationFile != "" {
			file, err := filepath.Abs(cfg.ReservationFile)
			if err != nil {
				return nil, err
			}
			if err := s.resvFileFree(file); err != nil {
				return nil, err
			}
			if err := r.loadState(file); err != nil {
				return nil, err
			}
		}
	} else if cfg.ReservationFile != "" {
		return nil, errors.New("nvmeof: a reservation file for a namespace without reservations")
	}
	s.mu.Lock()
	if r != nil && r.file != "" {
		if err := s.resvFileFreeLocked(r.file); err != nil {
			s.mu.Unlock()
			return nil, err
		}
	}
	id := cfg.ID
	if id == 0 {
		id = uint32(len(s.ns) + 1)
	}
	switch {
	case id > maxNSID:
		s.mu.Unlock()
		return nil, fmt.Errorf("nvmeof: %s: NSID %d is beyond %d, the most Identify announces (NN)", s.NQN, id, maxNSID)
	case id <= uint32(len(s.ns)) && s.ns[id-1] != nil:
		s.mu.Unlock()
		return nil, fmt.Errorf("nvmeof: %s: NSID %d is in use", s.NQN, id)
	}
	ns = &Namespace{ID: id, Backend: b, BlockSize: blockSize, NGUID: cfg.NGUID, UUID: cfg.UUID, drained: make(chan struct{}), resv: r}
	h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d", s.NQN, ns.ID))
	if ns.NGUID == ([16]byte{}) {
		copy(ns.NGUID[:], h[:16])
	}
	if ns.UUID == ([16]byte{}) {
		copy(ns.UUID[:], h[16:])
		ns.UUID[6] = ns.UUID[6]&0x0f | 0x40 // version 4 layout
		ns.UUID[8] = ns.UUID[8]&0x3f | 0x80
	}
	ns.anaGrp.Store(anaGroup)
	for uint32(len(s.ns)) < id {
		s.ns = append(s.ns, nil)
	}
	s.ns[id-1] = ns
	ctrls := s.controllers()
	s.mu.Unlock()
	for _, c := range ctrls {
		c.nsChanged(ns.ID)
	}
	return ns, nil
}
