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
type MR struct {
	pd     *PD
	buf    []byte
	addr   uint64
	access Access
	stag   uint32
	fast   bool        // allocated for fast registration: remote invalidation allowed
	valid  atomic.Bool // false once invalidated or deregistered
}

// RegMR registers buf with the given access rights. Remote write and remote
// atomic need local write, as in ibverbs.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("%w: empty buffer", ErrInvalidArg)
	}
	if access&(RemoteWrite|RemoteAtomic) != 0 && access&LocalWrite == 0 {
		return nil, fmt.Errorf("%w: remote write needs local write", ErrInvalidArg)
	}
	mr := &MR{pd: pd, buf: buf, addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))), access: access}
	if err := pd.dev.addMR(mr); err != nil {
		return nil, err
	}
	mr.valid.Store(true)
	return mr, nil
}

func (d *Device) addMR(mr *MR) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	n := uint64(len(mr.buf))
	if len(d.mrs) >= d.attr.MaxMR || n > d.attr.MaxMRSize || d.mrBytes+n > d.attr.MaxMRTotal {
		return fmt.Errorf("%w: memory registration limits", ErrResources)
	}
	for {
		d.nextIdx = (d.nextIdx + 1) & 0xffffff
		if d.nextIdx == 0 {
			continue // STag 0 is never issued: Chelsio and others treat it as invalid
		}
		if _, used := d.mrs[d.nextIdx]; !used {
			break
		}
	}
	key := uint32(randUint32() & 0xff)
	mr.stag = d.nextIdx<<8 | key
	d.mrs[d.nextIdx] = mr
	d.mrBytes += n
	return nil
}

// Dereg deregisters the region: its STag is dead for local and remote access
// from now on.
func (mr *MR) Dereg() error {
	d := mr.pd.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mrs[mr.stag>>8] != mr {
		return fmt.Errorf("%w: MR not registered", ErrInvalidArg)
	}
	// Dereg while WRs still point at the memory is the caller's error, as
	// in ibverbs; Go keeps the memory alive, so it cannot corrupt anything
	// but the caller's own data.
	mr.valid.Store(false)
	delete(d.mrs, mr.stag>>8)
	d.mrBytes -= uint64(len(mr.buf))
	return nil
}

// LKey returns the region's STag for local use.
func (mr *MR) LKey() uint32 { return mr.get().stag }

// RKey returns the STag a peer uses to reach this region.
func (mr *MR) RKey() uint32 { return mr.get().stag }

// Addr returns the region's base address, the tagged offset of its first
// octet (virtual-address based, as ibverbs).
func (mr *MR) Addr() uint64 { return mr.get().addr }

// Len returns the region's length in octets.
func (mr *MR) Len() int { return len(mr.get().buf) }

// Buf returns the registered memory.
func (mr *MR) Buf() []byte { return mr.get().buf }

// Access returns the region's access rights.
func (mr *MR) Access() Access { return mr.get().access }

// Valid reports whether the STag can be used (not invalidated or
// deregistered).
func (mr *MR) Valid() bool { return mr.valid.Load() }

type mrView struct {
	stag   uint32
	addr   uint64
	buf    []byte
	access Access
}

// get reads the fields a fast registration may change.
func (mr *MR) get() mrView {
	d := mr.pd.dev
	d.mu.RLock()
	defer d.mu.RUnlock()
	return mrView{mr.stag, mr.addr, mr.buf, mr.access}
}

// SGE returns a scatter/gather element for octets [off, off+n) of the region.
func (mr *MR) SGE(off, n int) SGE {
	v := mr.get()
	return SGE{Addr: v.addr + uint64(off), Length: uint32(n), LKey: v.stag}
}

// lookupLocked returns the valid MR with the given STag (index and key must
// match), or nil. d.mu is held.
func (d *Device) lookupLocked(stag uint32) *MR {
	mr := d.mrs[stag>>8]
	if mr == nil || mr.stag != stag || !mr.valid.Load() {
		return nil
	}
	return mr
}

// AllocMR allocates an STag for fast registration: it reaches no memory
// until an OpRegMR work request binds a buffer to it, and, unlike regions
// from RegMR, a peer may invalidate it with Send with Invalidate.
func (pd *PD) AllocMR() (*MR, error) {
	mr := &MR{pd: pd, fast: true, buf: []byte{}}
	if err := pd.dev.addMR(mr); err != nil {
		return nil, err
	}
	return mr, nil
}

// fastReg binds buf to a fast-registration MR under a fresh key, so that
// the STag of its previous binding no longer matches (OpRegMR).
func (d *Device) fastReg(mr *MR, pd *PD, buf []byte, access Access) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !mr.fast || mr.pd != pd || d.mrs[mr.stag>>8] != mr || len(buf) == 0 ||
		d.mrBytes-uint64(len(mr.buf))+uint64(len(buf)) > d.attr.MaxMRTotal {
		return false
	}
	d.mrBytes += uint64(len(buf)) - uint64(len(mr.buf))
	key := mr.stag & 0xff
	for key == mr.stag&0xff {
		key = randUint32() & 0xff
	}
	mr.stag = mr.stag&^0xff | key
	mr.buf, mr.access = buf, access
	mr.addr = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	mr.valid.Store(true)
	return true
}

// invalidate kills a fast-registration STag of pd (local or remote
// invalidation). It reports false if the STag is not valid, belongs to
// another PD, or is not one that may be invalidated.
func (d *Device) invalidate(stag uint32, pd *PD, remote bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	mr := d.lookupLocked(stag)
	if mr == nil || mr.pd != pd || !mr.fast {
		return false
	}
	mr.valid.Store(false)
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
	d.mu.RLock()
	defer d.mu.RUnlock()
	mr := d.lookupLocked(stag)
	if mr == nil {
		return nil, nil, accessSTag
	}
	if mr.pd != pd {
		return nil, mr, accessPD
	}
	if mr.access&need != need {
		return nil, mr, accessRights
	}
	end := to + uint64(n)
	if end < to {
		return nil, mr, accessTOWrap
	}
	if to < mr.addr || end > mr.addr+uint64(len(mr.buf)) {
		return nil, mr, accessBounds
	}
	off := to - mr.addr
	return mr.buf[off : off+uint64(n)], mr, accessOK
}

// localSlice resolves an SGE against the local STag table.
func (pd *PD) localSlice(sge SGE, need Access) ([]byte, error) {
	b, _, e := pd.dev.check(sge.LKey, pd, need, sge.Addr, int(sge.Length))
	if e != accessOK {
		return nil, fmt.Errorf("%w: lkey %#x addr %#x len %d", ErrLocalProt, sge.LKey, sge.Addr, sge.Length)
	}
	return b, nil
}
