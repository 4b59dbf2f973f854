//go:build interop

package interop

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/interop/siw"
	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
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
	tg, err := target.New(target.Config{Logf: logs.logf}, sub)
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	hp1, hp2 := freePort(t), freePort(t)
	p1, err := tg.ListenPort(context.Background(), "tcp", fmt.Sprintf("127.0.0.1:%d", hp1), target.PortConfig{Subsystems: []string{nvmeNQN}})
	require.NoError(t, err)
	p2, err := tg.ListenPort(context.Background(), "tcp", fmt.Sprintf("127.0.0.1:%d", hp2), target.PortConfig{Subsystems: []string{nvmeNQN},
		ANA: map[uint32]nvme.ANAState{1: nvme.ANANonOptimized}})
	require.NoError(t, err)

	script := fmt.Sprintf(`for p in %[1]d %[2]d; do
  $NVME connect -t rdma -a 10.0.2.2 -s $p -q $HOSTNQN -n %[3]s -i 1; echo "CONNECT $p rc=$?"
done
waitdev && echo "DEVICE present"
ctrl() { for c in /sys/class/nvme/nvme*; do a=$(cat $c/address); s=${a#*trsvcid=}; [ "${s%%%%,*}" = "$1" ] && echo ${c##*/}; done; }
state() { cat /sys/class/nvme/$(ctrl $1)/nvme*c*n1/ana_state; }
waitstate() { for i in $(seq 360); do [ "$(state $1)" = "$2" ] && return 0; sleep 0.25; done; return 1; }
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
	require.NoError(t, p1.SetANAState(1, nvme.ANAInaccessible))
	require.NoError(t, p2.SetANAState(1, nvme.ANAOptimized))
	guestLine(t, vm, "SWITCHED", step)
	require.Equal(t, "WRITE2 rc=0", guestLine(t, vm, "WRITE2 rc=", step))
	require.Equal(t, pattern, guestValue(t, vm, "READBACK2", step))

	guestLine(t, vm, "READY2", step)
	require.NoError(t, p2.SetANAState(1, nvme.ANAInaccessible))
	guestLine(t, vm, "NO PATH", step)
	guestLine(t, vm, "QUEUED", step)
	guestLine(t, vm, "READY3", step)
	require.NoError(t, p1.SetANAState(1, nvme.ANAOptimized))
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

// Our multipath host (host.Multipath) against the Linux kernel's nvmet
// on two ports, its namespace in ANA group 2: optimized through port 1,
// non-optimized through port 2. I/O goes down port 1; nvmet's states
// flipped in the guest (port 2 optimized, then port 1 inaccessible) reach
// the host as nvmet's ANA Change notices, and the I/O moves to port 2.
// What each path wrote is in the guest's backing file.
func TestNVMeGoMultipathKernelTarget(t *testing.T) {
	hp1, hp2 := freePort(t), freePort(t)
	script := fmt.Sprintf(guestNvmetSubsystem + `for p in 1 2; do
  mkdir $C/ports/$p; echo rdma > $C/ports/$p/addr_trtype; echo ipv4 > $C/ports/$p/addr_adrfam
  echo 10.0.2.15 > $C/ports/$p/addr_traddr; echo $((4419+p)) > $C/ports/$p/addr_trsvcid
  mkdir $C/ports/$p/ana_groups/2 || echo "ANA GROUP FAILED"
done
echo optimized > $C/ports/1/ana_groups/2/ana_state || echo "ANA STATE FAILED"
echo non-optimized > $C/ports/2/ana_groups/2/ana_state || echo "ANA STATE FAILED"
echo 2 > $C/subsystems/$N/namespaces/1/ana_grpid || echo "ANA GRPID FAILED"
echo 1 > $C/subsystems/$N/namespaces/1/enable || echo "NS ENABLE FAILED"
for p in 1 2; do ln -s $C/subsystems/$N $C/ports/$p/subsystems/$N || echo "PORT LINK FAILED"; done
waitport 4420 && waitport 4421 && echo "TARGET READY"
waitfile flip 300
echo optimized > $C/ports/2/ana_groups/2/ana_state && echo inaccessible > $C/ports/1/ana_groups/2/ana_state && echo "FLIPPED"
waitfile done 300
echo "FILE1 $(dd if=/tmp/nvme.img bs=1M skip=1 count=4 2>/dev/null | sha256sum | cut -d' ' -f1)"
echo "FILE2 $(dd if=/tmp/nvme.img bs=1M skip=8 count=4 2>/dev/null | sha256sum | cut -d' ' -f1)"
dmesg | grep -iE 'nvmet' | tail -20`)
	vm := nvmeVM(t, script, siw.Forward{Host: hp1, Guest: 4420}, siw.Forward{Host: hp2, Guest: 4421})
	guestLine(t, vm, "TARGET READY", 2*time.Minute)
	require.NotContains(t, vm.Output(), "FAILED")
	ctx := vmCtx(t, vm, 3*time.Minute)
	addrs := []string{fmt.Sprintf("127.0.0.1:%d", hp1), fmt.Sprintf("127.0.0.1:%d", hp2)}
	m, err := host.ConnectMultipath(ctx, "tcp", addrs, nvmeNQN, host.MultipathConfig{
		Config: host.Config{HostNQN: nvmeHostNQN, IOQueues: 1, QueueDepth: 16}})
	require.NoError(t, err)
	defer m.Close()
	for _, p := range m.Paths() {
		require.NoError(t, p.Err, "path %s", p.Addr)
	}
	require.Equal(t, nvme.ANAOptimized, m.Paths()[0].States[2], "nvmet's log through port 1")
	require.Equal(t, nvme.ANANonOptimized, m.Paths()[1].States[2], "and through port 2")
	ns, err := m.Namespace(ctx, 1)
	require.NoError(t, err)
	require.EqualValues(t, 2, ns.Info.ANAGroup)
	a, b := make([]byte, 4<<20), make([]byte, 4<<20)
	for i := range a {
		a[i], b[i] = byte(i*7+i>>13), byte(i*13+i>>11+1)
	}
	_, err = ns.WriteAtContext(ctx, a, 1<<20)
	require.NoError(t, err)
	before := m.Paths()
	require.NotZero(t, before[0].Commands)
	require.Zero(t, before[1].Commands, "nothing down the non-optimized path")

	require.NoError(t, vm.Signal("flip"))
	guestLine(t, vm, "FLIPPED", time.Minute)
	require.Eventually(t, func() bool {
		ps := m.Paths()
		return ps[0].States[2] == nvme.ANAInaccessible && ps[1].States[2] == nvme.ANAOptimized
	}, time.Minute, 10*time.Millisecond, "nvmet's notices reached the paths: %+v", m.Paths())
	_, err = ns.WriteAtContext(ctx, b, 8<<20)
	require.NoError(t, err)
	got := make([]byte, 4<<20)
	_, err = ns.ReadAtContext(ctx, got, 1<<20)
	require.NoError(t, err)
	require.Equal(t, sha256.Sum256(a), sha256.Sum256(got), "read back down port 2")
	after := m.Paths()
	require.Equal(t, before[0].Commands, after[0].Commands, "nothing more down port 1")
	require.NotZero(t, after[1].Commands)
	require.Zero(t, after[0].PathErrors+after[1].PathErrors, "moved by the notices, before any command was refused")
	require.NoError(t, ns.Flush(ctx))
	require.NoError(t, m.Close())
	require.NoError(t, vm.Signal("done"))
	sa, sb := sha256.Sum256(a), sha256.Sum256(b)
	require.Equal(t, hex.EncodeToString(sa[:]), guestValue(t, vm, "FILE1", time.Minute), "written down port 1")
	require.Equal(t, hex.EncodeToString(sb[:]), guestValue(t, vm, "FILE2", time.Minute), "written down port 2")
}
