package verbs

import (
	crand "crypto/rand"
	"encoding/binary"
	"sync"
)

// DeviceAttr are the limits of a Device, as ibv_device_attr.
type DeviceAttr struct {
	MaxQP       int
	MaxQPWR     int    // send or receive queue depth
	MaxSGE      int    // per send or receive WR
	MaxSGERead  int    // RDMA Read sink (iWARP: 1)
	MaxInline   int    // octets of inline data per WR
	MaxIRD      int    // inbound RDMA Reads a QP serves at once
	MaxORD      int    // outbound RDMA Reads a QP has outstanding
	MaxMR       int    // registered memory regions
	MaxMRSize   uint64 // octets in one memory region
	MaxMRTotal  uint64 // octets registered in all
	MaxCQE      int
	MaxPrivData int // private data octets an application may send in MPA start-up
}

// DefaultDeviceAttr are the limits Open uses when given a zero DeviceAttr.
var DefaultDeviceAttr = DeviceAttr{
	MaxQP:       16384,
	MaxQPWR:     16384,
	MaxSGE:      6,
	MaxSGERead:  1,
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
// table), protection domains and queue pairs. One process normally opens
// one.
type Device struct {
	attr DeviceAttr

	mu       sync.RWMutex
	mrs      mrTable // by STag index (STag >> 8); read without mu
	nmr      int
	nextIdx  uint32
	mrBytes  uint64
	nqp      int
	closed   bool
	listener []*Listener
}

// Open returns a new Device with the given limits (zero fields take the
// defaults).
func Open(attr DeviceAttr) *Device {
	d := DefaultDeviceAttr
	set := func(dst *int, v int) {
		if v > 0 {
			*dst = v
		}
	}
	set(&d.MaxQP, attr.MaxQP)
	set(&d.MaxQPWR, attr.MaxQPWR)
	set(&d.MaxSGE, attr.MaxSGE)
	set(&d.MaxInline, attr.MaxInline)
	set(&d.MaxIRD, attr.MaxIRD)
	set(&d.MaxORD, attr.MaxORD)
	set(&d.MaxMR, attr.MaxMR)
	set(&d.MaxCQE, attr.MaxCQE)
	if attr.MaxMRSize > 0 {
		d.MaxMRSize = attr.MaxMRSize
	}
	if attr.MaxMRTotal > 0 {
		d.MaxMRTotal = attr.MaxMRTotal
	}
	if attr.MaxPrivData > 0 && attr.MaxPrivData < d.MaxPrivData {
		d.MaxPrivData = attr.MaxPrivData
	}
	// STag indices start at a random point so that a peer cannot guess the
	// STags of the first registrations.
	return &Device{attr: d, nextIdx: randUint32() & 0xffffff}
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
type PD struct {
	dev *Device
}

// Device returns the PD's device.
func (pd *PD) Device() *Device { return pd.dev }
