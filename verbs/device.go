package verbs

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/goiwarp/iwarp/mpa"
)

// DeviceAttr are the limits of a Device, as ibv_device_attr. A zero field
// takes its default (DefaultDeviceAttr); Open refuses a limit it cannot
// honour.
type DeviceAttr struct {
	MaxQP       int
	MaxQPWR     int    // send or receive queue depth
	MaxSGE      int    // per send or receive WR, at most 6 (an RDMA Read's sink is always one SGE, as in iWARP)
	MaxInline   int    // octets of inline data per WR
	MaxIRD      int    // inbound RDMA Reads a QP serves at once, at most 16383 (MPA's field)
	MaxORD      int    // outbound RDMA Reads a QP has outstanding, at most 16383
	MaxMR       int    // registered memory regions
	MaxMRSize   uint64 // octets in one memory region
	MaxMRTotal  uint64 // octets registered in all
	MaxCQE      int
	MaxPrivData int // private data octets an application may send in MPA start-up, at most 508
}

// DefaultDeviceAttr are the limits Open uses when given a zero DeviceAttr.
var DefaultDeviceAttr = DeviceAttr{
	MaxQP:       16384,
	MaxQPWR:     16384,
	MaxSGE:      maxSGE,
	MaxInline:   256,
	MaxIRD:      128,
	MaxORD:      128,
	MaxMR:       1 << 20,
	MaxMRSize:   1 << 40,
	MaxMRTotal:  1 << 44,
	MaxCQE:      1 << 22,
	MaxPrivData: 512 - 4, // 512 on the wire less the rev-2 IRD/ORD word
}

// Device is an iWARP device: the owner of memory registrations (the STag
// table), protection domains, queue pairs and listeners. One process
// normally opens one.
//
// Its methods are safe for concurrent use, Close with any of them.
type Device struct {
	attr DeviceAttr

	mu        sync.RWMutex
	mrs       mrTable // by STag index (STag >> 8); read without mu
	nmr       int
	nextIdx   uint32
	mrBytes   uint64
	nqp       int
	closed    bool
	qps       map[*QP]struct{}
	listeners map[*Listener]struct{}
	done      chan struct{} // closed when Close has closed the QPs: CQ waiters return
}

// Open returns a new Device with the given limits: zero fields take the
// defaults, and a limit the stack cannot honour is refused with
// ErrInvalidArg.
func Open(attr DeviceAttr) (*Device, error) {
	d := DefaultDeviceAttr
	bad := func(what string, v any) error {
		return fmt.Errorf("%w: DeviceAttr.%s %v", ErrInvalidArg, what, v)
	}
	for _, f := range []struct {
		name string
		dst  *int
		v    int
		max  int
	}{
		{"MaxQP", &d.MaxQP, attr.MaxQP, 1 << 24},
		{"MaxQPWR", &d.MaxQPWR, attr.MaxQPWR, 1 << 24},
		{"MaxSGE", &d.MaxSGE, attr.MaxSGE, maxSGE},
		{"MaxInline", &d.MaxInline, attr.MaxInline, 1 << 16},
		{"MaxIRD", &d.MaxIRD, attr.MaxIRD, mpa.MaxIRDORD},
		{"MaxORD", &d.MaxORD, attr.MaxORD, mpa.MaxIRDORD},
		{"MaxMR", &d.MaxMR, attr.MaxMR, 1<<24 - 1}, // the STag index is 24 bits, and 0 is never issued
		{"MaxCQE", &d.MaxCQE, attr.MaxCQE, 1 << 30},
		{"MaxPrivData", &d.MaxPrivData, attr.MaxPrivData, DefaultDeviceAttr.MaxPrivData},
	} {
		switch {
		case f.v < 0 || f.v > f.max:
			return nil, bad(f.name, f.v)
		case f.v > 0:
			*f.dst = f.v
		}
	}
	if attr.MaxMRSize > 0 {
		d.MaxMRSize = attr.MaxMRSize
	}
	if attr.MaxMRTotal > 0 {
		d.MaxMRTotal = attr.MaxMRTotal
	}
	// STag indices start at a random point so that a peer cannot guess the
	// STags of the first registrations.
	return &Device{attr: d, nextIdx: randUint32() & 0xffffff,
		qps: make(map[*QP]struct{}), listeners: make(map[*Listener]struct{}), done: make(chan struct{})}, nil
}

// Close closes the device's listeners and QPs (as QP.Close: their
// connections end, their work requests flush) and refuses new objects
// with ErrClosed. Goroutines waiting on its CQs (Wait, PollWait,
// WaitSolicited) then return: with the flushed completions while any are
// queued, and then an error that Is ErrClosed, as net.Listener's Close
// unblocks Accept. Memory regions stay valid for the program's own use.
// Safe to call more than once; a second call returns at once.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	var lns []*Listener
	for l := range d.listeners {
		lns = append(lns, l)
	}
	var qps []*QP
	for qp := range d.qps {
		qps = append(qps, qp)
	}
	d.mu.Unlock()
	for _, l := range lns {
		l.Close()
	}
	for _, qp := range qps {
		qp.Close()
	}
	close(d.done) // after the QPs' flushed completions are queued
	return nil
}

// errDeviceClosed is what a CQ waiter returns once its device has closed.
var errDeviceClosed = fmt.Errorf("%w: device closed", ErrClosed)

// isClosed reports whether Close was called.
func (d *Device) isClosed() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.closed
}

// Attr returns the device limits.
func (d *Device) Attr() DeviceAttr { return d.attr }

func randUint32() uint32 {
	var b [4]byte
	crand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:])
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() *PD { return &PD{dev: d} }

// PD is a protection domain: a QP can touch only memory regions of its own
// PD, locally and remotely.
//
// Its methods are safe for concurrent use.
type PD struct {
	dev   *Device
	users int  // MRs registered, SRQs and QPs not closed (under dev.mu; destroy.go)
	dead  bool // Dealloc'd
}

// Device returns the PD's device.
func (pd *PD) Device() *Device { return pd.dev }
