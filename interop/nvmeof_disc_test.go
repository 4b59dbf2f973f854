//go:build interop

package interop

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/goiwarp/iwarp/nvmeof"
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
	tg, err := nvmeof.NewTarget(nvmeof.TargetConfig{Logf: logs.logf}, sub)
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
for i in $(seq 120); do grep -q 'NVME_AEN=0x70f002' /tmp/uev.log 2>/dev/null && break; sleep 0.25; done
echo "AENS $(grep -c 'NVME_AEN=0x70f002' /tmp/uev.log)"
$NVME discover --device=/dev/nvme0 > /tmp/disc2 2>&1; echo "REDISCOVER rc=$?"; sed 's/^/  disc2: /' /tmp/disc2
grep -q "subnqn: *%s" /tmp/disc2 && echo "LISTED added"
echo "REMOVE_READY"
for i in $(seq 120); do [ "$(grep -c 'NVME_AEN=0x70f002' /tmp/uev.log)" -ge 2 ] && break; sleep 0.25; done
echo "AENS2 $(grep -c 'NVME_AEN=0x70f002' /tmp/uev.log)"
$NVME disconnect -d nvme0; echo "DISCONNECT rc=$?"
kill $UEV
dmesg | grep -iE 'nvme' | tail -10`, hp, nqn2)
	vm := nvmeVM(t, script)
	const step = 2 * time.Minute
	require.Equal(t, "DISCOVER rc=0", guestLine(t, vm, "DISCOVER rc=", step))
	require.Equal(t, "1", guestValue(t, vm, "ENTRIES", step))
	guestLine(t, vm, "READY", step)
	sub2, err := nvmeof.NewSubsystem(nqn2)
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
