package verbs

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"github.com/goiwarp/iwarp/rdmap"
)

// atomicArgs are the operands of an RFC 7306 atomic WR.
type atomicArgs struct {
	add, swap                  uint64
	cmpMask, swapMask, addMask uint64
}

// wire returns the Atomic Request's opcode and its Add/Swap Data, Add/Swap
// Mask, Compare Data and Compare Mask fields (RFC 7306 section 5.2.1).
func (a atomicArgs) wire(op SendOpcode) (rdmap.AtomicOpcode, uint64, uint64, uint64, uint64) {
	if op == OpAtomicFetchAdd {
		return rdmap.AtomicFetchAdd, a.add, a.addMask, 0, 0
	}
	all := func(m uint64) uint64 {
		if m == 0 {
			return ^uint64(0) // ibverbs compare-and-swap: all 64 bits
		}
		return m
	}
	return rdmap.AtomicCmpSwap, a.swap, all(a.swapMask), a.add, all(a.cmpMask)
}

// maskedAdd adds v to orig field by field: a bit set in mask is the most
// significant bit of a field, and the carry out of it is dropped (RFC 7306
// section 5.1.1). A zero mask is a plain 64-bit addition.
func maskedAdd(orig, v, mask uint64) uint64 {
	if mask == 0 {
		return orig + v
	}
	var out, carry uint64
	for bit := uint(0); bit < 64; bit++ {
		b := uint64(1) << bit
		sum := carry + (orig&b)>>bit + (v&b)>>bit
		out |= (sum & 1) << bit
		carry = sum >> 1
		if mask&b != 0 {
			carry = 0
		}
	}
	return out
}

// execAtomic performs an Atomic Request on 8 octets of registered memory,
// in the memory's own byte order (RFC 7306 section 5.1: "performed in the
// endian format of the target memory"), with a compare-and-swap loop so that
// it is atomic against other atomics and against the CPU's atomic accesses.
// It returns the original value.
func execAtomic(mem []byte, r rdmap.AtomicRequest) uint64 {
	p := (*uint64)(unsafe.Pointer(unsafe.SliceData(mem)))
	for {
		orig := atomic.LoadUint64(p)
		next := orig
		switch r.Opcode() {
		case rdmap.AtomicFetchAdd:
			next = maskedAdd(orig, r.AddSwap(), r.AddSwapMask())
		case rdmap.AtomicCmpSwap:
			if (r.Compare()^orig)&r.CompareMask() == 0 {
				next = orig&^r.AddSwapMask() | r.AddSwap()&r.AddSwapMask()
			}
		}
		if atomic.CompareAndSwapUint64(p, orig, next) {
			return orig
		}
	}
}

// putOriginal stores an atomic's original value in the requester's 8-octet
// buffer, in host byte order as ibverbs does.
func putOriginal(b []byte, v uint64) { binary.NativeEndian.PutUint64(b, v) }
