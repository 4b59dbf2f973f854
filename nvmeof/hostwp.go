package nvmeof

import (
	"context"
	"fmt"
)

// SetWriteProtect sets the namespace write protected, or not, for every
// host of the subsystem (Set Features 84h): while it is, writes, Write
// Zeroes and Deallocate fail with StatusNSWriteProtected, and reads go on.
// The target tells its controllers with a Namespace Attribute Changed
// notice (Identify Namespace's NSATTR then says so).
func (n *HostNamespace) SetWriteProtect(ctx context.Context, on bool) error {
	v := uint32(wpNone)
	if on {
		v = wpOn
	}
	_, err := n.c.admin.adminCmd(ctx, func(cmd Command) { NewAdmin(cmd, AdminSetFeatures, 0, n.ID, FeatWriteProtect, v) }, 0,
		"Set Features, Namespace Write Protection Config", nil)
	if err != nil {
		return fmt.Errorf("namespace %d: %w", n.ID, err)
	}
	return nil
}

// WriteProtected reports whether the namespace is write protected (in
// any of the states a target may offer: until a power cycle and
// permanently too).
func (n *HostNamespace) WriteProtected(ctx context.Context) (bool, error) {
	res, err := n.c.admin.adminCmd(ctx, func(cmd Command) { NewAdmin(cmd, AdminGetFeatures, 0, n.ID, FeatWriteProtect, 0) }, 0,
		"Get Features, Namespace Write Protection Config", nil)
	if err != nil {
		return false, fmt.Errorf("namespace %d: %w", n.ID, err)
	}
	return res&7 != wpNone, nil
}

// SetWriteProtect is HostNamespace.SetWriteProtect down a usable path.
func (n *MultipathNamespace) SetWriteProtect(ctx context.Context, on bool) error {
	return n.m.do0(ctx, n, func(hn *HostNamespace) error { return hn.SetWriteProtect(ctx, on) })
}

// WriteProtected is HostNamespace.WriteProtected down a usable path.
func (n *MultipathNamespace) WriteProtected(ctx context.Context) (bool, error) {
	var on bool
	err := n.m.do0(ctx, n, func(hn *HostNamespace) (err error) {
		on, err = hn.WriteProtected(ctx)
		return err
	})
	return on, err
}
