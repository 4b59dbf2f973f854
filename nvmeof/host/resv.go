package host

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// Reservations from the host's side (resv.go has the semantics): the
// operations of Linux's block pr_ops and nvme-cli's resv-* commands. Keys
// are the host's; a registration covers every controller of this host,
// known by its host identifier: Config.HostID must stay the same
// across a host's connections (Connect makes a random one if it is not
// set), or a reconnected host is another registrant, and may be locked
// out by its own reservation.

// RegisterKey registers key for this host (Reservation Register,
// register). Registering the key it has already is no error.
func (n *Namespace) RegisterKey(ctx context.Context, key uint64) error {
	return n.resvKeys(ctx, nvme.IOResvRegister, nvme.ResvRegister, 0, key)
}

// ReplaceKey replaces this host's key old with key.
func (n *Namespace) ReplaceKey(ctx context.Context, old, key uint64) error {
	return n.resvKeys(ctx, nvme.IOResvRegister, nvme.ResvReplace, old, key)
}

// UnregisterKey ends this host's registration, key; a reservation it
// holds goes with it (one of all registrants passes to another).
func (n *Namespace) UnregisterKey(ctx context.Context, key uint64) error {
	return n.resvKeys(ctx, nvme.IOResvRegister, nvme.ResvUnregister, key, 0)
}

// Reserve takes a reservation of type t with this host's key.
func (n *Namespace) Reserve(ctx context.Context, key uint64, t nvme.ReservationType) error {
	return n.resvKeys(ctx, nvme.IOResvAcquire, nvme.ResvAcquire|uint32(t)<<8, key, 0)
}

// Preempt takes the reservation (type t) from the registrants with key
// victim, whose registrations end: how a cluster fences a node. With abort
// it is Preempt and Abort (here: their commands in flight finish).
func (n *Namespace) Preempt(ctx context.Context, key, victim uint64, t nvme.ReservationType, abort bool) error {
	a := uint32(nvme.ResvPreempt)
	if abort {
		a = nvme.ResvPreemptAbort
	}
	return n.resvKeys(ctx, nvme.IOResvAcquire, a|uint32(t)<<8, key, victim)
}

// Release releases the reservation of type t this host holds.
func (n *Namespace) Release(ctx context.Context, key uint64, t nvme.ReservationType) error {
	return n.resvKeys(ctx, nvme.IOResvRelease, nvme.ResvRelease|uint32(t)<<8, key, 0)
}

// ClearReservations ends the reservation and every registration, any
// host's.
func (n *Namespace) ClearReservations(ctx context.Context, key uint64) error {
	return n.resvKeys(ctx, nvme.IOResvRelease, nvme.ResvClear, key, 0)
}

// ReservationReport reads the namespace's registrants and reservation
// (the extended data structure: 128-bit host identifiers), up to 63
// registrants.
func (n *Namespace) ReservationReport(ctx context.Context) (nvme.ReservationStatus, error) {
	const size = 4096
	var st nvme.ReservationStatus
	var perr error
	q := n.c.nextIO()
	_, err := q.adminCmd(ctx, func(cmd nvme.Command) {
		nvme.NewAdmin(cmd, nvme.IOResvReport, 0, n.ID, size/4-1, nvme.ResvReportEDS)
	}, size, "Reservation Report", func(b []byte) { st, perr = nvme.ParseReservationStatus(b) })
	if err == nil {
		err = perr
	}
	if err != nil {
		return nvme.ReservationStatus{}, fmt.Errorf("namespace %d: %w", n.ID, err)
	}
	return st, nil
}

// resvKeys sends a reservation command with cdw10 and its two keys.
func (n *Namespace) resvKeys(ctx context.Context, op uint8, cdw10 uint32, k1, k2 uint64) error {
	data := binary.LittleEndian.AppendUint64(nil, k1)
	data = binary.LittleEndian.AppendUint64(data, k2)
	if op == nvme.IOResvRelease {
		data = data[:nvme.ResvKeyDataSize]
	}
	err := n.simple(ctx, op, func(cmd nvme.Command) { nvme.NewAdmin(cmd, op, 0, n.ID, cdw10, 0) }, data)
	if err != nil {
		return fmt.Errorf("namespace %d: %w", n.ID, err)
	}
	return nil
}

// The reservation operations through a Multipath: down a usable path, as
// I/O, since a registration is the host's whichever path carries it. One
// resent after its path broke may find that the first was done: a
// Replace, Unregister or Clear done already answers Reservation Conflict,
// and so may a Preempt of another host's key.

// RegisterKey is Namespace.RegisterKey down a usable path.
func (n *MultipathNamespace) RegisterKey(ctx context.Context, key uint64) error {
	return n.m.do0(ctx, n, func(hn *Namespace) error { return hn.RegisterKey(ctx, key) })
}

// ReplaceKey is Namespace.ReplaceKey down a usable path.
func (n *MultipathNamespace) ReplaceKey(ctx context.Context, old, key uint64) error {
	return n.m.do0(ctx, n, func(hn *Namespace) error { return hn.ReplaceKey(ctx, old, key) })
}

// UnregisterKey is Namespace.UnregisterKey down a usable path.
func (n *MultipathNamespace) UnregisterKey(ctx context.Context, key uint64) error {
	return n.m.do0(ctx, n, func(hn *Namespace) error { return hn.UnregisterKey(ctx, key) })
}

// Reserve is Namespace.Reserve down a usable path.
func (n *MultipathNamespace) Reserve(ctx context.Context, key uint64, t nvme.ReservationType) error {
	return n.m.do0(ctx, n, func(hn *Namespace) error { return hn.Reserve(ctx, key, t) })
}

// Preempt is Namespace.Preempt down a usable path.
func (n *MultipathNamespace) Preempt(ctx context.Context, key, victim uint64, t nvme.ReservationType, abort bool) error {
	return n.m.do0(ctx, n, func(hn *Namespace) error { return hn.Preempt(ctx, key, victim, t, abort) })
}

// Release is Namespace.Release down a usable path.
func (n *MultipathNamespace) Release(ctx context.Context, key uint64, t nvme.ReservationType) error {
	return n.m.do0(ctx, n, func(hn *Namespace) error { return hn.Release(ctx, key, t) })
}

// ClearReservations is Namespace.ClearReservations down a usable path.
func (n *MultipathNamespace) ClearReservations(ctx context.Context, key uint64) error {
	return n.m.do0(ctx, n, func(hn *Namespace) error { return hn.ClearReservations(ctx, key) })
}

// ReservationReport is Namespace.ReservationReport down a usable path.
func (n *MultipathNamespace) ReservationReport(ctx context.Context) (nvme.ReservationStatus, error) {
	var st nvme.ReservationStatus
	err := n.m.do0(ctx, n, func(hn *Namespace) (err error) { st, err = hn.ReservationReport(ctx); return err })
	return st, err
}

// SetPersistence asks the target to keep the namespace's registrations
// and reservation through power loss (on), or not (the Reservation
// Persistence feature; Info.RESCAP bit 0 says whether it can).
func (n *Namespace) SetPersistence(ctx context.Context, on bool) error {
	v := uint32(0)
	if on {
		v = 1
	}
	_, err := n.c.admin.adminCmd(ctx, func(cmd nvme.Command) { nvme.NewAdmin(cmd, nvme.AdminSetFeatures, 0, n.ID, nvme.FeatResvPersist, v) }, 0,
		"Set Features, Reservation Persistence", nil)
	if err != nil {
		return fmt.Errorf("namespace %d: %w", n.ID, err)
	}
	return nil
}

// Persistence reports whether the namespace's registrations and
// reservation persist through power loss.
func (n *Namespace) Persistence(ctx context.Context) (bool, error) {
	res, err := n.c.admin.adminCmd(ctx, func(cmd nvme.Command) { nvme.NewAdmin(cmd, nvme.AdminGetFeatures, 0, n.ID, nvme.FeatResvPersist, 0) }, 0,
		"Get Features, Reservation Persistence", nil)
	if err != nil {
		return false, fmt.Errorf("namespace %d: %w", n.ID, err)
	}
	return res&1 != 0, nil
}

// SetPersistence is Namespace.SetPersistence down a usable path.
func (n *MultipathNamespace) SetPersistence(ctx context.Context, on bool) error {
	return n.m.do0(ctx, n, func(hn *Namespace) error { return hn.SetPersistence(ctx, on) })
}

// Persistence is Namespace.Persistence down a usable path.
func (n *MultipathNamespace) Persistence(ctx context.Context) (bool, error) {
	var on bool
	err := n.m.do0(ctx, n, func(hn *Namespace) (err error) {
		on, err = hn.Persistence(ctx)
		return err
	})
	return on, err
}
