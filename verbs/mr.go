package verbs

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Access are memory region access rights, as IBV_ACCESS_*.
type Access uint8

// Access flags.
const (
	LocalWrite Access = 1 << iota
	RemoteWrite
	RemoteRead
	RemoteAtomic
)

func (a Access) String() string {
	s := ""
	for i, n := range []string{"LocalWrite", "RemoteWrite", "RemoteRead", "RemoteAtomic"} {
		if a&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	if s == "" {
		return "LocalRead"
	}
	return s
}

// MR is a registered memory region. Its LKey and RKey are the same STag: a
// 24-bit index into the device's table and an 8-bit key drawn at random for
// every registration, so that a stale or guessed STag misses.
//
// Its methods are safe for concurrent use, also while WRs use the region.
type MR struct {
	pd   *PD
	idx  uint32
	fast bool // allocated for fast registration: remote invalidation allowed
	// b is the region's current binding. Fast registration replaces it;
	// invalidation and deregistration replace it with a dead one. Lookups
	// on the data path read it without a lock.
	b atomic.Pointer[binding]
	// placed counts RDMA Writes placed in the region (Placed).
	placed atomic.Uint64
	// posted is the STag the last posted fast registration binds
	// (PostRegMR); the next one draws a key different from it.
	posted atomic.Uint32
}

// Placed counts the RDMA Writes peers have placed in full in the region so
// far (one per message: after its last segment). It synchronises both
// ways, as a completion does: every placement it counts happens before what
// the caller reads next, and what the caller did before calling it happens
// before any later placement. So a program that polls memory for a peer's
// Write (perftest's write_lat trick) polls Placed until it changes and only
// then reads the memory: without a data race, as long as the peer writes
// again only after our answer, round after round. Reading while the peer
// may be writing is a race however it is done. A Write is counted once
// its last FPDU's CRC has checked out (earlier FPDUs of it are placed
// before their CRCs are checked, as on hardware: a failure there ends the
// connection before the Write is counted).
func (mr *MR) Placed() uint64 {
	return mr.placed.Add(0) // read-modify-write: acquires and releases
}

// binding is what an STag reaches: read-only once published.
type binding struct {
	stag   uint32
	addr   uint64
	buf    []byte
	access Access
	valid  bool
}

func addrOf(buf []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))) }

// RegMR registers buf with the given access rights. Remote write and remote
// atomic need local write, as in ibverbs.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("%w: empty buffer", ErrInvalidArg)
	}
	if err := checkAccess(access); err != nil {
		return nil, err
	}
	if pd.dev.isClosed() {
		return nil, fmt.Errorf("%w: device", ErrClosed)
	}
	mr := &MR{pd: pd}
	if err := pd.dev.addMR(mr, &binding{addr: addrOf(buf), buf: buf, access: access, valid: true}); err != nil {
		return nil, err
	}
	return mr, nil
}

// checkAccess enforces ibv_reg_mr's rule: remote write or atomic access
// needs local write, since the peer then changes the memory.
func checkAccess(a Access) error {
	if a&^(LocalWrite|RemoteWrite|RemoteRead|RemoteAtomic) != 0 {
		return fmt.Errorf("%w: access %v", ErrInvalidArg, a)
	}
	if a&(RemoteWrite|RemoteAtomic) != 0 && a&LocalWrite == 0 {
		return fmt.Errorf("%w: remote write needs local write", ErrInvalidArg)
	}
	return nil
}

// mrTable maps STag indices to regions: two levels of atomic pointers, so
// that a lookup takes no lock and a registration touches one slot.
type mrTable struct {
	pages [256]atomic.Pointer[mrPage]
}

type mrPage [1 << 16]atomic.Pointer[MR]

func (t *mrTable) get(idx uint32) *MR {
	p := t.pages[idx>>16&0xff].Load()
	if p == nil {
		return nil
	}
	return p[idx&0xffff].Load()
}

// set stores mr at idx; the device's mutex is held.
func (t *mrTable) set(idx uint32, mr *MR) {
	p := t.pages[idx>>16&0xff].Load()
	if p == nil {
		p = new(mrPage)
		t.pages[idx>>16&0xff].Store(p)
	}
	p[idx&0xffff].Store(mr)
}

func (d *Device) addMR(mr *MR, b *binding) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if mr.pd.dead {
		return fmt.Errorf("%w: PD deallocated", ErrClosed)
	}
	n := uint64(len(b.buf))
	if d.nmr >= d.attr.MaxMR || n > d.attr.MaxMRSize || d.mrBytes+n > d.attr.MaxMRTotal {
		return fmt.Errorf("%w: memory registration limits", ErrResources)
	}
	for {
		d.nextIdx = (d.nextIdx + 1) & 0xffffff
		if d.nextIdx == 0 {
			continue // STag 0 is never issued: Chelsio and others treat it as invalid
		}
		if d.mrs.get(d.nextIdx) == nil {
			break
		}
	}
	mr.idx = d.nextIdx
	b.stag = mr.idx<<8 | randUint32()&0xff
	mr.b.Store(b)
	d.mrs.set(mr.idx, mr)
	d.nmr++
	d.mrBytes += n
	mr.pd.users++
	return nil
}

// Dereg deregisters the region: its STag is dead for local and remote access
// from now on, and the region lets go of its memory (Buf returns nil, Len
// 0), so that nothing the stack keeps of the region (a QP's memory of the
// last STag it used) keeps the memory alive.
func (mr *MR) Dereg() error {
	d := mr.pd.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mrs.get(mr.idx) != mr {
		return fmt.Errorf("%w: MR not registered", ErrInvalidArg)
	}
	// Dereg while WRs still point at the memory is the caller's error, as
	// in ibverbs; Go keeps the memory alive, so it cannot corrupt anything
	// but the caller's own data.
	old := mr.b.Load()
	dead := *old
	dead.valid, dead.buf = false, nil
	mr.b.Store(&dead)
	d.mrs.set(mr.idx, nil)
	d.nmr--
	mr.pd.users--
	d.mrBytes -= uint64(len(old.buf))
	return nil
}

// LKey returns the region's STag for local use.
func (mr *MR) LKey() uint32 { return mr.b.Load().stag }

// RKey returns the STag a peer uses to reach this region.
func (mr *MR) RKey() uint32 { return mr.b.Load().stag }

// Addr returns the region's base address, the tagged offset of its first
// octet (virtual-address based, as ibverbs).
func (mr *MR) Addr() uint64 { return mr.b.Load().addr }

// Len returns the region's length in octets (0 once deregistered).
func (mr *MR) Len() int { return len(mr.b.Load().buf) }

// Buf returns the registered memory (nil once deregistered; an invalidated
// fast-registration region keeps its memory until it is bound again).
func (mr *MR) Buf() []byte { return mr.b.Load().buf }

// Access returns the region's access rights.
func (mr *MR) Access() Access { return mr.b.Load().access }

// Valid reports whether the STag can be used (not invalidated or
// deregistered).
func (mr *MR) Valid() bool { return mr.b.Load().valid }

// SGE returns a scatter/gather element for octets [off, off+n) of the region.
func (mr *MR) SGE(off, n int) SGE {
	b := mr.b.Load()
	return SGE{Addr: b.addr + uint64(off), Length: uint32(n), LKey: b.stag}
}

// lookup returns the region an STag names and its binding, if the index and
// the key match and the binding is alive.
func (d *Device) lookup(stag uint32) (*MR, *binding) {
	mr := d.mrs.get(stag >> 8)
	if mr == nil {
		return nil, nil
	}
	b := mr.b.Load()
	if b.stag != stag || !b.valid {
		return nil, nil
	}
	return mr, b
}

// AllocMR allocates an STag for fast registration: it reaches no memory
// until a PostRegMR binds a buffer to it, and, unlike regions from RegMR, a
// peer may invalidate it with Send with Invalidate.
func (pd *PD) AllocMR() (*MR, error) {
	mr := &MR{pd: pd, fast: true}
	if err := pd.dev.addMR(mr, &binding{buf: []byte{}}); err != nil {
		return nil, err
	}
	mr.posted.Store(mr.b.Load().stag)
	return mr, nil
}

// nextSTag draws the STag of a fast registration being posted: the
// region's index with a random key that differs from the key bound now and
// from the key of the registration posted last, so that neither the STag a
// peer holds today nor the one it is about to be given reaches the memory
// of the registration after.
func (mr *MR) nextSTag() uint32 {
	for {
		last := mr.posted.Load()
		cur := mr.b.Load().stag
		key := randUint32() & 0xff
		if key == last&0xff || key == cur&0xff {
			continue
		}
		stag := mr.idx<<8 | key
		if mr.posted.CompareAndSwap(last, stag) {
			return stag
		}
	}
}

// fastReg binds buf to a fast-registration MR under stag, the STag
// PostRegMR drew (nextSTag), so that the STag of its previous binding no
// longer matches.
func (d *Device) fastReg(mr *MR, pd *PD, buf []byte, access Access, stag uint32) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	old := mr.b.Load()
	if !mr.fast || mr.pd != pd || d.mrs.get(mr.idx) != mr || len(buf) == 0 || stag>>8 != mr.idx ||
		stag == old.stag || uint64(len(buf)) > d.attr.MaxMRSize ||
		d.mrBytes-uint64(len(old.buf))+uint64(len(buf)) > d.attr.MaxMRTotal {
		return false
	}
	d.mrBytes += uint64(len(buf)) - uint64(len(old.buf))
	mr.b.Store(&binding{stag: stag, addr: addrOf(buf), buf: buf, access: access, valid: true})
	return true
}

// invalidate kills a fast-registration STag of pd (local or remote
// invalidation). It reports false if no region has the STag, or it belongs
// to another PD, or is not one that may be invalidated.
func (d *Device) invalidate(stag uint32, pd *PD, remote bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	// An STag already invalid may be invalidated again (the verbs allow
	// it, and siw: a Local Invalidate after the peer's Send with
	// Invalidate is a host's common safety step); lookup would refuse it.
	mr := d.mrs.get(stag >> 8)
	if mr == nil || mr.pd != pd || !mr.fast {
		return false
	}
	b := mr.b.Load()
	if b.stag != stag {
		return false
	}
	if !b.valid {
		return true
	}
	dead := *b
	dead.valid = false
	mr.b.Store(&dead)
	return true
}

// accessErr says which check of siw_check_mem's order failed.
type accessErr uint8

const (
	accessOK     accessErr = iota
	accessSTag             // no valid region with that STag
	accessPD               // region of another protection domain
	accessRights           // region lacks the needed right
	accessTOWrap           // TO + length wraps
	accessBounds           // outside the region
)

// check validates an access of n octets at tagged offset to, in siw's order:
// STag valid, protection domain, access rights, bounds. It returns the slice
// of the region to place into or read from.
func (d *Device) check(stag uint32, pd *PD, need Access, to uint64, n int) ([]byte, *MR, accessErr) {
	mr, b := d.lookup(stag)
	if mr == nil {
		return nil, nil, accessSTag
	}
	return checkBinding(mr, b, pd, need, to, n)
}

// checkBinding is check's rest for the region and binding an STag named.
func checkBinding(mr *MR, b *binding, pd *PD, need Access, to uint64, n int) ([]byte, *MR, accessErr) {
	if mr.pd != pd {
		return nil, mr, accessPD
	}
	if b.access&need != need {
		return nil, mr, accessRights
	}
	end := to + uint64(n)
	if end < to {
		return nil, mr, accessTOWrap
	}
	if to < b.addr || end > b.addr+uint64(len(b.buf)) {
		return nil, mr, accessBounds
	}
	off := to - b.addr
	return b.buf[off : off+uint64(n)], mr, accessOK
}

// localSlice resolves an SGE against the local STag table.
func (pd *PD) localSlice(sge SGE, need Access) ([]byte, error) {
	b, _, e := pd.dev.check(sge.LKey, pd, need, sge.Addr, int(sge.Length))
	return localResult(b, e, sge)
}

// localSlice is PD.localSlice through the cache (a queue's, under the
// queue's lock).
func (c *stagCache) localSlice(pd *PD, sge SGE, need Access) ([]byte, error) {
	b, _, e := c.check(pd.dev, sge.LKey, pd, need, sge.Addr, int(sge.Length))
	return localResult(b, e, sge)
}

func localResult(b []byte, e accessErr, sge SGE) ([]byte, error) {
	if e != accessOK {
		return nil, fmt.Errorf("%w: lkey %#x addr %#x len %d", ErrLocalProt, sge.LKey, sge.Addr, sge.Length)
	}
	return b, nil
}

// live reports whether stag still reaches mr: not invalidated, deregistered
// or bound again since a WR resolved its memory through it. The receive
// loop asks before each piece it places into memory that a WR resolved
// when it was posted (a Read's sink, a posted receive), since a peer's
// Send with Invalidate, or a local invalidation, may have killed the STag
// since: dead STags stay dead (RFC 5041 section 7.1 holds for every
// tagged segment, Read Responses included; siw checks the sink again too).
func (mr *MR) live(stag uint32) bool {
	b := mr.b.Load()
	return b.valid && b.stag == stag
}

// stagCache is a memory of the last STag looked up, so that a stream of
// Writes into one region (the receive loop's), or of WRs from one region
// (a send or receive queue's), skips the table: three dependent loads,
// often from outside the L1 cache, which the kernel's copies keep
// clearing. It keeps the region, not its binding: the region's current
// binding decides, as in lookup (a region's STag index never changes, and
// a deregistered region's binding is dead for good). So a cache that
// stays idle after its region is deregistered holds only the MR, whose
// dead binding no longer holds the memory: the memory can be collected.
type stagCache struct {
	stag uint32
	mr   *MR
}

// check is Device.check through the cache.
func (c *stagCache) check(d *Device, stag uint32, pd *PD, need Access, to uint64, n int) ([]byte, *MR, accessErr) {
	if mr := c.mr; mr != nil && c.stag == stag {
		if b := mr.b.Load(); b.valid && b.stag == stag {
			return checkBinding(mr, b, pd, need, to, n)
		}
	}
	mr, b := d.lookup(stag)
	if mr == nil {
		return nil, nil, accessSTag
	}
	c.stag, c.mr = stag, mr
	return checkBinding(mr, b, pd, need, to, n)
}
