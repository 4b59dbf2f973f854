package nvmeof

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Backend is a namespace's storage: ReadAt and WriteAt at octet offsets
// (always whole blocks, inside Size), Flush to make written data durable.
// The target calls them from several queues at once.
type Backend interface {
	io.ReaderAt
	io.WriterAt
	Size() int64
	Flush() error
}

// Zeroer is a Backend that zeroes a range itself, faster than being
// written zeros: Write Zeroes (deallocate false: the range stays
// allocated) and Deallocate (true: its storage may be freed) use it when
// the Backend has it, and write zeros when Zero returns
// errors.ErrUnsupported.
type Zeroer interface {
	Zero(off, n int64, deallocate bool) error
}

// MemBackend is a Backend in memory.
type MemBackend struct {
	mu  sync.RWMutex // writes exclusive, so that overlapping I/O from two queues is no data race
	buf []byte
}

// NewMemBackend returns a zeroed in-memory backend of size octets.
func NewMemBackend(size int64) *MemBackend { return &MemBackend{buf: make([]byte, size)} }

func (m *MemBackend) Size() int64  { return int64(len(m.buf)) }
func (m *MemBackend) Flush() error { return nil }

func (m *MemBackend) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(m.buf)) {
		return 0, io.EOF
	}
	m.mu.RLock()
	n := copy(p, m.buf[off:])
	m.mu.RUnlock()
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *MemBackend) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(m.buf)) {
		return 0, errors.New("nvmeof: write beyond the end of the memory backend")
	}
	m.mu.Lock()
	copy(m.buf[off:], p)
	m.mu.Unlock()
	return len(p), nil
}

// Zero clears n octets at off.
func (m *MemBackend) Zero(off, n int64, _ bool) error {
	if off < 0 || n < 0 || off+n > int64(len(m.buf)) {
		return errors.New("nvmeof: zeroing beyond the end of the memory backend")
	}
	m.mu.Lock()
	clear(m.buf[off : off+n])
	m.mu.Unlock()
	return nil
}

// FileBackend is a Backend over a file or block device: pread, pwrite and
// fsync; Zero is fallocate on Linux, as Linux's nvmet does: a range zeroed
// in place for Write Zeroes, a hole punched for Deallocate.
type FileBackend struct {
	f    *os.File
	size int64
}

// OpenFileBackend opens path for reading and writing; the namespace is
// the file's size (for a block device, its capacity).
func OpenFileBackend(path string) (*FileBackend, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &FileBackend{f: f, size: size}, nil
}

func (b *FileBackend) Size() int64                              { return b.size }
func (b *FileBackend) Flush() error                             { return b.f.Sync() }
func (b *FileBackend) ReadAt(p []byte, off int64) (int, error)  { return b.f.ReadAt(p, off) }
func (b *FileBackend) WriteAt(p []byte, off int64) (int, error) { return b.f.WriteAt(p, off) }

// Zero makes n octets at off read as zeros, freeing their blocks if
// deallocate (errors.ErrUnsupported where the system or file system
// cannot).
func (b *FileBackend) Zero(off, n int64, deallocate bool) error {
	return fileZero(b.f, off, n, deallocate)
}

// Close closes the file.
func (b *FileBackend) Close() error { return b.f.Close() }

// Namespace is a namespace of a subsystem: a Backend cut into logical
// blocks.
type Namespace struct {
	ID        uint32
	Backend   Backend
	BlockSize int // 512 .. 64 KiB, a power of two
	NGUID     [16]byte
	UUID      [16]byte

	refs atomic.Int64 // commands using Backend (Subsystem.use), which RemoveNamespace waits out
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

// Subsystem is an NVM subsystem: an NQN, its namespaces (NSID 1, 2, ...)
// and the hosts it admits.
type Subsystem struct {
	NQN    string
	Serial string
	Model  string

	mu        sync.RWMutex
	ns        []*Namespace
	ctrls     map[*controller]struct{} // its controllers, told of namespaces added
	anyHost   bool
	hosts     []string
	counters  smartCounters
	countMu   sync.Mutex
	nextCtlID atomic.Uint32
}

// NewSubsystem returns a subsystem named nqn that admits any host until
// AllowHost names one.
func NewSubsystem(nqn string) (*Subsystem, error) {
	if !validNQN(nqn) || nqn == DiscoveryNQN {
		return nil, fmt.Errorf("nvmeof: %q is not a valid subsystem NQN", nqn)
	}
	h := sha256.Sum256([]byte(nqn))
	return &Subsystem{NQN: nqn, Serial: fmt.Sprintf("%x", h[:10]), Model: "goiwarp NVMe/iWARP target", anyHost: true}, nil
}

// AddNamespace adds a namespace over b with the given block size (0:
// 512) and returns it; its NSID is the next free one. Its NGUID and UUID
// derive from the subsystem's NQN and the NSID, so that a restarted target
// presents the same identity. It may be called while hosts are connected:
// each controller of the subsystem lists the NSID in its Changed Namespace
// List (log page 04h) and, if its host enabled Namespace Attribute
// Notices, completes an Asynchronous Event Request with one, upon which
// Linux's host rescans and shows the new namespace.
func (s *Subsystem) AddNamespace(b Backend, blockSize int) (*Namespace, error) {
	if blockSize == 0 {
		blockSize = 512
	}
	if blockSize < 512 || blockSize > 65536 || blockSize&(blockSize-1) != 0 {
		return nil, fmt.Errorf("nvmeof: block size %d: want a power of two in 512 .. 65536", blockSize)
	}
	if b.Size() < int64(blockSize) {
		return nil, fmt.Errorf("nvmeof: a backend of %d octets holds no block of %d", b.Size(), blockSize)
	}
	s.mu.Lock()
	if len(s.ns) >= maxNSID {
		s.mu.Unlock()
		return nil, fmt.Errorf("nvmeof: %s holds %d namespaces, as many as Identify announces (NN)", s.NQN, maxNSID)
	}
	ns := &Namespace{ID: uint32(len(s.ns) + 1), Backend: b, BlockSize: blockSize}
	h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d", s.NQN, ns.ID))
	copy(ns.NGUID[:], h[:16])
	copy(ns.UUID[:], h[16:])
	ns.UUID[6] = ns.UUID[6]&0x0f | 0x40 // version 4 layout
	ns.UUID[8] = ns.UUID[8]&0x3f | 0x80
	s.ns = append(s.ns, ns)
	ctrls := s.controllers()
	s.mu.Unlock()
	for _, c := range ctrls {
		c.nsChanged(ns.ID)
	}
	return ns, nil
}

// attach and detach keep the subsystem's list of its live controllers.
func (s *Subsystem) attach(c *controller) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.mu.Lock()
	dead := c.dead
	c.mu.Unlock()
	if dead {
		return // shut down already: its detach has run
	}
	if s.ctrls == nil {
		s.ctrls = map[*controller]struct{}{}
	}
	s.ctrls[c] = struct{}{}
}

func (s *Subsystem) detach(c *controller) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ctrls, c)
}

// AllowHost admits hostNQN; once a host is named, only named hosts are.
func (s *Subsystem) AllowHost(hostNQN string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.anyHost = false
	if !slices.Contains(s.hosts, hostNQN) {
		s.hosts = append(s.hosts, hostNQN)
	}
}

// Allowed reports whether hostNQN may connect.
func (s *Subsystem) Allowed(hostNQN string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.anyHost || slices.Contains(s.hosts, hostNQN)
}

// RemoveNamespace takes namespace id out of the subsystem, as disabling
// it does in Linux's nvmet: commands that name it from then on get Invalid
// Namespace, and each controller lists it in its Changed Namespace List and
// raises a Namespace Attribute Changed notice (see AddNamespace), upon
// which Linux's host drops the block device. It returns once the commands
// already using its Backend have finished, so that the caller may close
// the Backend then, or when ctx ends. NSIDs are not reused.
func (s *Subsystem) RemoveNamespace(ctx context.Context, id uint32) error {
	s.mu.Lock()
	if id == 0 || id > uint32(len(s.ns)) || s.ns[id-1] == nil {
		s.mu.Unlock()
		return fmt.Errorf("nvmeof: %s has no namespace %d", s.NQN, id)
	}
	ns := s.ns[id-1]
	s.ns[id-1] = nil
	ctrls := s.controllers()
	s.mu.Unlock()
	for _, c := range ctrls {
		c.nsChanged(id)
	}
	for ns.refs.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// controllers returns the subsystem's live controllers (mu held).
func (s *Subsystem) controllers() []*controller {
	ctrls := make([]*controller, 0, len(s.ctrls))
	for c := range s.ctrls {
		ctrls = append(ctrls, c)
	}
	return ctrls
}

// use returns the namespace with the given NSID counted as in use
// (Namespace.refs) until the caller's done, or nil: a command's hold on
// its Backend, which RemoveNamespace waits out.
func (s *Subsystem) use(id uint32) *Namespace {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if id == 0 || id > uint32(len(s.ns)) || s.ns[id-1] == nil {
		return nil
	}
	ns := s.ns[id-1]
	ns.refs.Add(1)
	return ns
}

func (ns *Namespace) done() { ns.refs.Add(-1) }

// namespace returns the namespace with the given NSID, or nil.
func (s *Subsystem) namespace(id uint32) *Namespace {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if id == 0 || id > uint32(len(s.ns)) {
		return nil
	}
	return s.ns[id-1]
}

// namespaces returns the namespaces in NSID order.
func (s *Subsystem) namespaces() []*Namespace {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var nss []*Namespace
	for _, ns := range s.ns {
		if ns != nil { // removed
			nss = append(nss, ns)
		}
	}
	return nss
}

func (s *Subsystem) count(write bool, octets int) {
	s.countMu.Lock()
	if write {
		s.counters.writes++
		s.counters.writeBytes += uint64(octets)
	} else {
		s.counters.reads++
		s.counters.readBytes += uint64(octets)
	}
	s.countMu.Unlock()
}
