//go:build interop

package interop

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof"
	"github.com/stretchr/testify/require"
)

// The kernel's multipath host against ANA, as an administrator uses it to
// move I/O between ports with no host losing its namespace. Two paths to
// one subsystem: port 1 optimized, port 2 non-optimized.
//   - Linux reads our ANA log: sysfs shows each path's state, and nvme-cli's
//     ana-log decodes the page.
//   - Port 1 made inaccessible and port 2 optimized: the notices reach the
//     host, which reads the log again and moves its I/O to port 2.
//   - Both made inaccessible: a write waits in the host ("no usable path")
//     and completes once port 1 is optimized again.
//
// Every write reads back equal, here and in the guest, and neither
// controller reconnects.
func TestNVMeKernelHostANA(t *testing.T) {
	sub, mem := memSubsystem(t)
	logs := &logLines{t: t}
	tg, err := nvmeof.NewTarget(nvmeof.TargetConfig{Logf: logs.logf}, sub)
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	hp1, hp2 := freePort(t), freePort(t)
	p1, err := tg.ListenPort(context.Background(), "tcp", fmt.Sprintf("127.0.0.1:%d", hp1), nvmeof.PortConfig{Subsystems: []string{nvmeNQN}})
	require.NoError(t, err)
	p2, err := tg.ListenPort(context.Background(), "tcp", fmt.Sprintf("127.0.0.1:%d", hp2), nvmeof.PortConfig{Subsystems: []string{nvmeNQN},
		ANA: map[uint32]nvmeof.ANAState{1: nvmeof.ANANonOptimized}})
	require.NoError(t, err)

	script := fmt.Sprintf(`for p in %[1]d %[2]d; do
  $NVME connect -t rdma -a 10.0.2.2 -s $p -q $HOSTNQN -n %[3]s -i 1; echo "CONNECT $p rc=$?"
done
waitdev && echo "DEVICE present"
ctrl() { for c in /sys/class/nvme/nvme*; do a=$(cat $c/address); s=${a#*trsvcid=}; [ "${s%%%%,*}" = "$1" ] && echo ${c##*/}; done; }
state() { cat /sys/class/nvme/$(ctrl $1)/nvme*c*n1/ana_state; }
waitstate() { for i in $(seq 240); do [ "$(state $1)" = "$2" ] && return 0; sleep 0.25; done; return 1; }
echo "STATES $(state %[1]d) $(state %[2]d)"
for p in %[1]d %[2]d; do $NVME ana-log /dev/$(ctrl $p) | tr -s ' \t' ' ' | sed "s/^/ANALOG $p /"; done
dd if=/dev/urandom of=/tmp/pat bs=1M count=4 2>/dev/null
echo "PATTERN $(sha256sum /tmp/pat | cut -d' ' -f1)"
dd if=/tmp/pat of=/dev/nvme0n1 bs=1M seek=1 oflag=direct 2>/tmp/err; echo "WRITE1 rc=$?"
echo "READY1"
waitstate %[1]d inaccessible && waitstate %[2]d optimized && echo "SWITCHED"
dd if=/tmp/pat of=/dev/nvme0n1 bs=1M seek=8 oflag=direct 2>/tmp/err; echo "WRITE2 rc=$?"
dd if=/dev/nvme0n1 of=/tmp/back bs=1M skip=8 count=4 iflag=direct 2>/tmp/err
echo "READBACK2 $(sha256sum /tmp/back | cut -d' ' -f1)"
echo "READY2"
waitstate %[2]d inaccessible && echo "NO PATH"
(dd if=/tmp/pat of=/dev/nvme0n1 bs=1M seek=16 oflag=direct 2>/tmp/err3; echo "rc=$?" > /tmp/w3) &
sleep 3
[ -e /tmp/w3 ] || echo "QUEUED"
echo "READY3"
wait
echo "WRITE3 $(cat /tmp/w3)"
echo "STATES3 $(state %[1]d) $(state %[2]d)"
dd if=/dev/nvme0n1 of=/tmp/back bs=1M skip=16 count=4 iflag=direct 2>/tmp/err
echo "READBACK3 $(sha256sum /tmp/back | cut -d' ' -f1)"
echo "CONNECTS $(dmesg | grep -c 'new ctrl')"
$NVME disconnect -n %[3]s; echo "DISCONNECT rc=$?"
dmesg | grep -iE 'nvme|ana' | tail -20`, hp1, hp2, nvmeNQN)
	vm := nvmeVM(t, script)
	const step = 2 * time.Minute
	for _, p := range []int{hp1, hp2} {
		require.Equal(t, fmt.Sprintf("CONNECT %d rc=0", p), guestLine(t, vm, fmt.Sprintf("CONNECT %d rc=", p), step))
	}
	guestLine(t, vm, "DEVICE present", step)
	require.Equal(t, "optimized non-optimized", guestValue(t, vm, "STATES", step), "each path's ana_state in sysfs")
	for _, c := range []struct {
		port  int
		state string
	}{{hp1, "optimized"}, {hp2, "non-optimized"}} {
		l := guestLine(t, vm, fmt.Sprintf("ANALOG %d ngrps", c.port), step)
		require.True(t, strings.HasSuffix(strings.TrimSpace(l), " 1"), "nvme-cli's ana-log: one group: %q", l)
		l = guestLine(t, vm, fmt.Sprintf("ANALOG %d state", c.port), step)
		require.True(t, strings.HasSuffix(strings.TrimSpace(l), " "+c.state), "nvme-cli's ana-log through port %d: %q", c.port, l)
	}
	pattern := guestValue(t, vm, "PATTERN", step)
	require.Equal(t, "WRITE1 rc=0", guestLine(t, vm, "WRITE1 rc=", step))

	guestLine(t, vm, "READY1", step)
	require.NoError(t, p1.SetANAState(1, nvmeof.ANAInaccessible))
	require.NoError(t, p2.SetANAState(1, nvmeof.ANAOptimized))
	guestLine(t, vm, "SWITCHED", step)
	require.Equal(t, "WRITE2 rc=0", guestLine(t, vm, "WRITE2 rc=", step))
	require.Equal(t, pattern, guestValue(t, vm, "READBACK2", step))

	guestLine(t, vm, "READY2", step)
	require.NoError(t, p2.SetANAState(1, nvmeof.ANAInaccessible))
	guestLine(t, vm, "NO PATH", step)
	guestLine(t, vm, "QUEUED", step)
	guestLine(t, vm, "READY3", step)
	require.NoError(t, p1.SetANAState(1, nvmeof.ANAOptimized))
	require.Equal(t, "rc=0", guestValue(t, vm, "WRITE3", step), "the write held while no path was usable")
	require.Equal(t, "optimized inaccessible", guestValue(t, vm, "STATES3", step))
	require.Equal(t, pattern, guestValue(t, vm, "READBACK3", step))
	require.Equal(t, "2", guestValue(t, vm, "CONNECTS", step), "one controller a path, none reconnected")
	require.Equal(t, "DISCONNECT rc=0", guestLine(t, vm, "DISCONNECT rc=", step))
	_, err = vm.Wait(vmCtx(t, vm, step))
	require.NoError(t, err)
	for _, off := range []int64{1 << 20, 8 << 20, 16 << 20} {
		requireHolds(t, mem, off, 4<<20, pattern, fmt.Sprintf("the namespace's 4 MiB at %d MiB", off>>20))
	}
	require.Equal(t, 4, logs.count(`ANA group 1`), "four state changes")
}
