//go:build interop

package interop

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/goiwarp/iwarp/nvmeof/target"
)

// The kernel's host keeps a persistent discovery controller on our target
// (nvme discover -p): it enables Discovery Log Page Change Notices, and
// when a subsystem is added the notice reaches it, which it reports to
// userspace as the uevent NVME_AEN=0x70f002 (what nvme-cli's udev rule
// answers with "nvme connect-all"); the log read again through the same
// controller lists the new subsystem, and a removal is noticed too.
func TestNVMeKernelHostDiscoveryChange(t *testing.T) {
	sub, _ := memSubsystem(t)
	logs := &logLines{t: t}
	tg, err := target.New(target.Config{Logf: logs.logf}, sub)
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	hp := freePort(t)
	_, err = tg.Listen(context.Background(), "tcp", fmt.Sprintf("127.0.0.1:%d", hp))
	require.NoError(t, err)
	const nqn2 = nvmeNQN + "-added"
	script := fmt.Sprintf(`uevent sh -c 'env | grep NVME_AEN >> /tmp/uev.log' & UEV=$!
A="-t rdma -a 10.0.2.2 -s %d -q $HOSTNQN"
$NVME discover $A -p > /tmp/disc 2>&1; echo "DISCOVER rc=$?"; sed 's/^/  disc: /' /tmp/disc
echo "ENTRIES $(grep -c subnqn /tmp/disc)"
echo "READY"
for i in $(seq 360); do grep -q 'NVME_AEN=0x70f002' /tmp/uev.log 2>/dev/null && break; sleep 0.25; done
echo "AENS $(grep -c 'NVME_AEN=0x70f002' /tmp/uev.log)"
$NVME discover --device=/dev/nvme0 > /tmp/disc2 2>&1; echo "REDISCOVER rc=$?"; sed 's/^/  disc2: /' /tmp/disc2
grep -q "subnqn: *%s" /tmp/disc2 && echo "LISTED added"
echo "REMOVE_READY"
for i in $(seq 360); do [ "$(grep -c 'NVME_AEN=0x70f002' /tmp/uev.log)" -ge 2 ] && break; sleep 0.25; done
echo "AENS2 $(grep -c 'NVME_AEN=0x70f002' /tmp/uev.log)"
$NVME disconnect -d nvme0; echo "DISCONNECT rc=$?"
kill $UEV
dmesg | grep -iE 'nvme' | tail -10`, hp, nqn2)
	vm := nvmeVM(t, script)
	const step = 2 * time.Minute
	require.Equal(t, "DISCOVER rc=0", guestLine(t, vm, "DISCOVER rc=", step))
	require.Equal(t, "1", guestValue(t, vm, "ENTRIES", step))
	guestLine(t, vm, "READY", step)
	sub2, err := target.NewSubsystem(nqn2)
	require.NoError(t, err)
	require.NoError(t, tg.AddSubsystem(sub2))
	require.Equal(t, "1", guestValue(t, vm, "AENS", step), "the kernel's uevent for the notice")
	require.Equal(t, "REDISCOVER rc=0", guestLine(t, vm, "REDISCOVER rc=", step))
	guestLine(t, vm, "LISTED added", step)
	guestLine(t, vm, "REMOVE_READY", step)
	require.NoError(t, tg.RemoveSubsystem(vmCtx(t, vm, step), nqn2))
	require.Equal(t, "2", guestValue(t, vm, "AENS2", step), "a notice for the removal, after the log was read")
	require.Equal(t, "DISCONNECT rc=0", guestLine(t, vm, "DISCONNECT rc=", step))
	_, err = vm.Wait(vmCtx(t, vm, step))
	require.NoError(t, err)
	require.Equal(t, 1, logs.count(`connected to nqn.2014-08.org.nvmexpress.discovery, KATO [1-9]`),
		"one discovery controller, persistent: with a keep-alive")
}

// Referrals, judged by nvme-cli 2.3 and the Linux 6.1 host: target A's
// port refers to target B's discovery service. nvme-cli's discover lists
// A's subsystem and the referral (B's port ID and address), and
// connect-all follows the referral: the kernel connects to both targets'
// subsystems from the one address it was given.
func TestNVMeKernelHostReferral(t *testing.T) {
	serve := func(nqn string, port int, refs ...target.Referral) {
		sub, err := target.NewSubsystem(nqn)
		require.NoError(t, err)
		_, err = sub.AddNamespace(target.NewMemBackend(16<<20), 512)
		require.NoError(t, err)
		logs := &logLines{t: t}
		// The guest reaches our loopback as 10.0.2.2, and each target's
		// log must say so (the connections come from 127.0.0.1 through
		// QEMU's user network).
		tg, err := target.New(target.Config{Logf: logs.logf, AdvertiseAddr: fmt.Sprintf("10.0.2.2:%d", port)}, sub)
		require.NoError(t, err)
		t.Cleanup(func() { tg.Close() })
		_, err = tg.ListenPort(context.Background(), "tcp", fmt.Sprintf("127.0.0.1:%d", port),
			target.PortConfig{ID: uint16(port % 1000), Subsystems: []string{nqn}, Referrals: refs})
		require.NoError(t, err)
	}
	pa, pb := freePort(t), freePort(t)
	const nqnA, nqnB = nvmeNQN + "-a", nvmeNQN + "-b"
	serve(nqnB, pb)
	serve(nqnA, pa, target.Referral{Addr: fmt.Sprintf("10.0.2.2:%d", pb), PortID: uint16(pb % 1000)})
	script := fmt.Sprintf(`A="-t rdma -a 10.0.2.2 -s %d -q $HOSTNQN"
$NVME discover $A > /tmp/disc 2>&1; echo "DISCOVER rc=$?"; sed 's/^/  disc: /' /tmp/disc
echo "ENTRIES $(grep -c subnqn /tmp/disc)"
grep -q "subnqn: *%s" /tmp/disc && echo "LISTED a"
grep -q "subnqn: *nqn.2014-08.org.nvmexpress.discovery" /tmp/disc && grep -q "subtype: *discovery subsystem referral" /tmp/disc && echo "LISTED referral"
grep -q "trsvcid: *%d" /tmp/disc && echo "LISTED b's port"
$NVME connect-all $A; echo "CONNECTALL rc=$?"
sleep 1
echo "SUBSYSTEMS $(cat /sys/class/nvme-subsystem/*/subsysnqn | sort | tr '\n' ' ')"
$NVME disconnect-all; echo "DISCONNECT rc=$?"
dmesg | grep -iE 'nvme' | tail -10`, pa, nqnA, pb)
	vm := nvmeVM(t, script)
	const step = 2 * time.Minute
	require.Equal(t, "DISCOVER rc=0", guestLine(t, vm, "DISCOVER rc=", step))
	require.Equal(t, "2", guestValue(t, vm, "ENTRIES", step), "A's subsystem and the referral")
	guestLine(t, vm, "LISTED a", step)
	guestLine(t, vm, "LISTED referral", step)
	guestLine(t, vm, "LISTED b's port", step)
	require.Equal(t, "CONNECTALL rc=0", guestLine(t, vm, "CONNECTALL rc=", step))
	require.Equal(t, nqnA+" "+nqnB, guestValue(t, vm, "SUBSYSTEMS", step), "connect-all followed the referral")
	require.Equal(t, "DISCONNECT rc=0", guestLine(t, vm, "DISCONNECT rc=", step))
	_, err := vm.Wait(vmCtx(t, vm, step))
	require.NoError(t, err)
}
