//go:build interop

package interop

import (
	"fmt"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// The kernel's host sets namespace write protection on our target with
// nvme-cli (Set Features 84h): our target tells it (Namespace Attribute
// Changed), the kernel reads NSATTR and turns the block device read-only
// (/sys/block/nvme0n1/ro), a direct write fails, reads go on, Get
// Features and Identify Namespace say so; turned off, the device is
// writable again and the write lands. Then protected until a power cycle
// (state 2): read-only again, Get Features says 2, and turning it off
// fails (Feature Not Changeable).
func TestNVMeKernelHostWriteProtect(t *testing.T) {
	sub, mem := memSubsystem(t)
	_, ports := serveTarget(t, target.Config{}, sub, 1)
	script := fmt.Sprintf(`$NVME connect -t rdma -a 10.0.2.2 -s %d -q $HOSTNQN -n %s -i 1; echo "CONNECT rc=$?"
waitdev && echo "DEVICE present"
waitro() { for i in $(seq 360); do [ "$(cat /sys/block/nvme0n1/ro)" = $1 ] && return 0; sleep 0.25; done; return 1; }
echo "RO0 $(cat /sys/block/nvme0n1/ro)"
echo "NWPC $($NVME id-ctrl /dev/nvme0 | sed -n 's/^nwpc *: *//p')"
$NVME set-feature /dev/nvme0 -n 1 -f 0x84 -v 1; echo "PROTECT rc=$?"
waitro 1 && echo "RO1 1"
echo "GETWP $($NVME get-feature /dev/nvme0 -n 1 -f 0x84 | grep -o 'Current value:0x[0-9a-f]*')"
echo "NSATTR $($NVME id-ns /dev/nvme0n1 | sed -n 's/^nsattr[[:space:]]*:[[:space:]]*//p')"
dd if=/dev/urandom of=/tmp/pat bs=4k count=1 2>/dev/null
echo "PATTERN $(sha256sum /tmp/pat | cut -d' ' -f1)"
dd if=/tmp/pat of=/dev/nvme0n1 bs=4k oflag=direct 2>/dev/null; echo "WRITE_PROTECTED rc=$?"
dd if=/dev/nvme0n1 of=/dev/null bs=4k count=1 iflag=direct 2>/dev/null; echo "READ rc=$?"
$NVME set-feature /dev/nvme0 -n 1 -f 0x84 -v 0; echo "UNPROTECT rc=$?"
waitro 0 && echo "RO2 0"
dd if=/tmp/pat of=/dev/nvme0n1 bs=4k oflag=direct 2>/dev/null; echo "WRITE rc=$?"
$NVME set-feature /dev/nvme0 -n 1 -f 0x84 -v 2; echo "PROTECT2 rc=$?"
waitro 1 && echo "RO3 1"
echo "GETWP2 $($NVME get-feature /dev/nvme0 -n 1 -f 0x84 | grep -o 'Current value:0x[0-9a-f]*')"
$NVME set-feature /dev/nvme0 -n 1 -f 0x84 -v 0 > /tmp/unp 2>&1; echo "UNPROTECT2 rc=$?"
sed 's/^/  unprotect: /' /tmp/unp
echo "RO4 $(cat /sys/block/nvme0n1/ro)"
$NVME disconnect -n %s; echo "DISCONNECT rc=$?"
dmesg | grep -iE 'nvme|protect' | tail -10`, ports[0], nvmeNQN, nvmeNQN)
	vm := nvmeVM(t, script)
	const step = 2 * time.Minute
	require.Equal(t, "CONNECT rc=0", guestLine(t, vm, "CONNECT rc=", step))
	require.Equal(t, "0", guestValue(t, vm, "RO0", step))
	require.Equal(t, "3", guestValue(t, vm, "NWPC", step), "Identify Controller's NWPC: states 1 and 2")
	require.Equal(t, "PROTECT rc=0", guestLine(t, vm, "PROTECT rc=", step))
	require.Equal(t, "1", guestValue(t, vm, "RO1", step), "the kernel turned the device read-only")
	require.Equal(t, "Current value:0x00000001", guestValue(t, vm, "GETWP", step))
	require.Equal(t, "1", guestValue(t, vm, "NSATTR", step), "Identify Namespace's NSATTR")
	pattern := guestValue(t, vm, "PATTERN", step)
	require.NotEqual(t, "WRITE_PROTECTED rc=0", guestLine(t, vm, "WRITE_PROTECTED rc=", step))
	require.Equal(t, "READ rc=0", guestLine(t, vm, "READ rc=", step))
	require.Equal(t, "UNPROTECT rc=0", guestLine(t, vm, "UNPROTECT rc=", step))
	require.Equal(t, "0", guestValue(t, vm, "RO2", step), "writable again")
	require.Equal(t, "WRITE rc=0", guestLine(t, vm, "WRITE rc=", step))
	require.Equal(t, "PROTECT2 rc=0", guestLine(t, vm, "PROTECT2 rc=", step))
	require.Equal(t, "1", guestValue(t, vm, "RO3", step), "read-only until a power cycle")
	require.Equal(t, "Current value:0x00000002", guestValue(t, vm, "GETWP2", step))
	require.NotEqual(t, "UNPROTECT2 rc=0", guestLine(t, vm, "UNPROTECT2 rc=", step), "state 2 is not changeable")
	require.Equal(t, "1", guestValue(t, vm, "RO4", step), "still read-only")
	require.Equal(t, "DISCONNECT rc=0", guestLine(t, vm, "DISCONNECT rc=", step))
	_, err := vm.Wait(vmCtx(t, vm, step))
	require.NoError(t, err)
	requireHolds(t, mem, 0, 4096, pattern, "the write after protection ended")
}
