package host

import (
	"context"
	"fmt"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// SetWriteProtect sets the namespace write protected, or not, for every
// host of the subsystem (Set Features 84h): while it is, writes, Write
// Zeroes and Deallocate fail with StatusNSWriteProtected, and reads go on.
// The target tells its controllers with a Namespace Attribute Changed
// notice (Identify Namespace's NSATTR then says so).
func (n *Namespace) SetWriteProtect(ctx context.Context, on bool) error {
	s := nvme.WPNone
	if on {
		s = nvme.WPOn
	}
	return n.SetWriteProtectState(ctx, s)
}

// SetWriteProtectState sets the namespace's write protection state: also
// WPUntilPowerCycle, which no later Set Features changes until the target
// restarts (StatusFeatureNotChangeable), where the controller offers it
// (Identify Controller's NWPC, bit s-1).
func (n *Namespace) SetWriteProtectState(ctx context.Context, s nvme.WPState) error {
	_, err := n.c.admin.adminCmd(ctx, func(cmd nvme.Command) {
		nvme.NewAdmin(cmd, nvme.AdminSetFeatures, 0, n.ID, nvme.FeatWriteProtect, uint32(s))
	}, 0,
		"Set Features, Namespace Write Protection Config", nil)
	if err != nil {
		return fmt.Errorf("namespace %d: %w", n.ID, err)
	}
	return nil
}

// WriteProtected reports whether the namespace is write protected (in
// any of the states a target may offer: until a power cycle and
// permanently too).
func (n *Namespace) WriteProtected(ctx context.Context) (bool, error) {
	s, err := n.WriteProtection(ctx)
	return s != nvme.WPNone, err
}

// WriteProtection returns the namespace's write protection state (Get
// Features 84h).
func (n *Namespace) WriteProtection(ctx context.Context) (nvme.WPState, error) {
	res, err := n.c.admin.adminCmd(ctx, func(cmd nvme.Command) { nvme.NewAdmin(cmd, nvme.AdminGetFeatures, 0, n.ID, nvme.FeatWriteProtect, 0) }, 0,
		"Get Features, Namespace Write Protection Config", nil)
	if err != nil {
		return nvme.WPNone, fmt.Errorf("namespace %d: %w", n.ID, err)
	}
	return nvme.WPState(res & 7), nil
}

// SetWriteProtect is Namespace.SetWriteProtect down a usable path.
func (n *MultipathNamespace) SetWriteProtect(ctx context.Context, on bool) error {
	return n.m.do0(ctx, n, func(hn *Namespace) error { return hn.SetWriteProtect(ctx, on) })
}

// SetWriteProtectState is Namespace.SetWriteProtectState down a usable path.
func (n *MultipathNamespace) SetWriteProtectState(ctx context.Context, st nvme.WPState) error {
	return n.m.do0(ctx, n, func(hn *Namespace) error { return hn.SetWriteProtectState(ctx, st) })
}

// WriteProtection is Namespace.WriteProtection down a usable path.
func (n *MultipathNamespace) WriteProtection(ctx context.Context) (nvme.WPState, error) {
	var st nvme.WPState
	err := n.m.do0(ctx, n, func(hn *Namespace) (err error) {
		st, err = hn.WriteProtection(ctx)
		return err
	})
	return st, err
}

// WriteProtected is Namespace.WriteProtected down a usable path.
func (n *MultipathNamespace) WriteProtected(ctx context.Context) (bool, error) {
	s, err := n.WriteProtection(ctx)
	return s != nvme.WPNone, err
}
