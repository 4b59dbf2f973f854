//go:build interop

package interop

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/interop/siw"
	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// Reservations judged by nvme-cli 2.3 and the Linux 6.1 host: the guest
// registers a key and takes a Write Exclusive reservation with nvme-cli's
// resv-* commands (passed through by the kernel), and nvme-cli decodes our
// Reservation Report. Our Go host, another host, may then read but not
// write; the guest, the holder, writes with dd through the block layer.
// The Go host fences the guest (Preempt, Write Exclusive - Registrants
// Only): the guest's writes now fail, its reads go on, and nvme-cli
// reports the Go host as the only registrant and holder.
func TestNVMeKernelHostReservations(t *testing.T) {
	sub, err := target.NewSubsystem(nvmeNQN)
	require.NoError(t, err)
	mem := target.NewMemBackend(64 << 20)
	_, err = sub.AddNamespaceConfig(mem, target.NamespaceConfig{Reservations: true})
	require.NoError(t, err)
	_, ports := serveTarget(t, target.Config{}, sub, 1)
	const guestKey, goKey = 2748, 11 // 0xabc, 0xb
	script := fmt.Sprintf(`uevent sh -c 'env | grep NVME_AEN >> /tmp/uev.log' & UEV=$!
$NVME connect -t rdma -a 10.0.2.2 -s %d -q $HOSTNQN -n %s -i 1; echo "CONNECT rc=$?"
waitdev && echo "DEVICE present"
echo "HOSTID $(cat /sys/class/nvme/nvme0/hostid | tr -d -)"
$NVME resv-register /dev/nvme0n1 --nrkey=%d --rrega=0; echo "REGISTER rc=$?"
$NVME resv-acquire /dev/nvme0n1 --crkey=%d --rtype=1 --racqa=0; echo "ACQUIRE rc=$?"
$NVME resv-report /dev/nvme0n1 -e | tr -s ' \t' ' ' | sed 's/^/REPORT1 /'
echo "READY1"
waitfile tried 300
dd if=/dev/urandom of=/tmp/pat bs=1M count=1 2>/dev/null
echo "PATTERN $(sha256sum /tmp/pat | cut -d' ' -f1)"
dd if=/tmp/pat of=/dev/nvme0n1 bs=1M oflag=direct 2>/tmp/err; echo "WRITE1 rc=$?"
echo "READY2"
waitfile fenced 300
dd if=/tmp/pat of=/dev/nvme0n1 bs=1M seek=2 oflag=direct 2>/tmp/err; echo "WRITE2 rc=$?"
dd if=/dev/nvme0n1 of=/tmp/back bs=1M count=1 iflag=direct 2>/tmp/err; echo "READ2 rc=$?"
echo "READBACK $(sha256sum /tmp/back | cut -d' ' -f1)"
$NVME resv-report /dev/nvme0n1 -e | tr -s ' \t' ' ' | sed 's/^/REPORT2 /'
for i in $(seq 360); do grep -q 'NVME_AEN=0x800006' /tmp/uev.log 2>/dev/null && break; sleep 0.25; done
echo "AENS $(grep -c 'NVME_AEN=0x800006' /tmp/uev.log)"
$NVME resv-notif-log /dev/nvme0 2>&1 | tr -s ' \t' ' ' | sed 's/^/NOTIF1 /'
echo "LOG2 $($NVME get-log /dev/nvme0 --log-id=0x80 --log-len=64 -b | od -An -tx1 -v | tr -s ' \n' ' ')"
echo "MASK1 $($NVME get-feature /dev/nvme0 -f 0x82 -n 1 2>&1)"
$NVME set-feature /dev/nvme0 -f 0x82 -n 1 -v 2; echo "SETMASK rc=$?"
echo "MASK2 $($NVME get-feature /dev/nvme0 -f 0x82 -n 1 2>&1)"
$NVME resv-register /dev/nvme0n1 --nrkey=%d --rrega=0; echo "REGISTER2 rc=$?"
echo "READY3"
waitfile fenced2 300
$NVME resv-register /dev/nvme0n1 --nrkey=%d --rrega=0; echo "REGISTER3 rc=$?"
echo "READY4"
waitfile released 300
for i in $(seq 360); do [ "$(grep -c 'NVME_AEN=0x800006' /tmp/uev.log)" -ge 2 ] && break; sleep 0.25; done
echo "AENS2 $(grep -c 'NVME_AEN=0x800006' /tmp/uev.log)"
echo "LOG3 $($NVME get-log /dev/nvme0 --log-id=0x80 --log-len=64 -b | od -An -tx1 -v | tr -s ' \n' ' ')"
echo "LOG4 $($NVME get-log /dev/nvme0 --log-id=0x80 --log-len=64 -b | od -An -tx1 -v | tr -s ' \n' ' ')"
kill $UEV
$NVME disconnect -n %s; echo "DISCONNECT rc=$?"
dmesg | grep -iE 'nvme' | tail -10`, ports[0], nvmeNQN, guestKey, guestKey, guestKey, guestKey, nvmeNQN)
	vm := nvmeVM(t, script)
	const step = 2 * time.Minute
	require.Equal(t, "CONNECT rc=0", guestLine(t, vm, "CONNECT rc=", step))
	guestLine(t, vm, "DEVICE present", step)
	hostID := guestValue(t, vm, "HOSTID", step)
	require.Len(t, hostID, 32)
	require.Equal(t, "REGISTER rc=0", guestLine(t, vm, "REGISTER rc=", step))
	require.Equal(t, "ACQUIRE rc=0", guestLine(t, vm, "ACQUIRE rc=", step))
	guestLine(t, vm, "READY1", step)
	report := func(prefix string) map[string]string { return guestKV(vm, prefix) }
	r1 := report("REPORT1")
	require.Equal(t, "1", r1["rtype"], "nvme-cli's report: %v", r1)
	require.Equal(t, "1", r1["regctl"])
	require.Equal(t, "1", r1["rcsts"], "the guest holds it")
	require.Equal(t, "abc", r1["rkey"])
	require.Equal(t, "ffff", r1["cntlid"])
	require.Equal(t, hostID, r1["hostid"], "the guest's host identifier, as its Connect gave it")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	goHost := [16]byte{0x60, 0x1d, 0x0c, 0x0f, 0xfe, 0xe0, 0x40, 0x00, 0x80, 0x00, 0, 0, 0, 0, 0, 0x0b}
	n := goHostRefused(t, ctx, ports[0], goHost, "another host under Write Exclusive")
	_, err = n.ReadAtContext(ctx, make([]byte, 4096), 0)
	require.NoError(t, err, "others read")
	require.NoError(t, vm.Signal("tried"))
	pattern := guestValue(t, vm, "PATTERN", step)
	require.Equal(t, "WRITE1 rc=0", guestLine(t, vm, "WRITE1 rc=", step), "the holder writes")
	guestLine(t, vm, "READY2", step)
	requireHolds(t, mem, 0, 1<<20, pattern, "the holder's write")

	require.NoError(t, n.RegisterKey(ctx, goKey))
	require.NoError(t, n.Preempt(ctx, goKey, guestKey, nvme.ResvWriteExclusiveRegsOnly, true))
	require.NoError(t, vm.Signal("fenced"))
	require.NotEqual(t, "WRITE2 rc=0", guestLine(t, vm, "WRITE2 rc=", step), "the fenced guest cannot write")
	require.Equal(t, "READ2 rc=0", guestLine(t, vm, "READ2 rc=", step), "but reads")
	require.Equal(t, pattern, guestValue(t, vm, "READBACK", step))

	// The fence told the guest: a Reservation Log Page Available notice,
	// which the kernel passes to udev, and a Registration Preempted page
	// that nvme-cli decodes; the next read finds the log empty.
	require.Equal(t, "1", guestValue(t, vm, "AENS", step), "the kernel's uevent for the notice")
	guestLine(t, vm, "LOG2", step)
	notif := report("NOTIF1")
	require.Equal(t, "1", notif["Log Page Count"], "nvme-cli's resv-notif-log: %v", notif)
	// Type 1, Registration Preempted (Linux's NVME_PR_LOG_REGISTRATION_PREEMPTED),
	// which nvme-cli 2.3 names one off ("1 (Empty Log Page)"; later
	// versions name 0 so, as the specification does).
	require.True(t, strings.HasPrefix(notif["Resv Notif Log Page Type"], "1 "), "%v", notif)
	require.Equal(t, "0", notif["Num of Available Log Pages"])
	require.Equal(t, "1", notif["Namespace ID:"])
	require.Equal(t, zeroPage, guestValue(t, vm, "LOG2", step), "the log read empty after its one page")
	// The guest masks Registration Preempted with nvme-cli, registers
	// again, and is fenced again: no page, no notice.
	require.EqualValues(t, 0, featureValue(t, guestValue(t, vm, "MASK1", step)), "no mask at first")
	require.Equal(t, "SETMASK rc=0", guestLine(t, vm, "SETMASK rc=", step))
	require.EqualValues(t, 2, featureValue(t, guestValue(t, vm, "MASK2", step)), "REGPRE masked")
	require.Equal(t, "REGISTER2 rc=0", guestLine(t, vm, "REGISTER2 rc=", step))
	guestLine(t, vm, "READY3", step)
	require.NoError(t, n.Preempt(ctx, goKey, guestKey, nvme.ResvWriteExclusiveRegsOnly, false))
	require.NoError(t, vm.Signal("fenced2"))
	// Registered again, the guest is told when our host, the holder of a
	// registrants-only type, releases it (not masked).
	require.Equal(t, "REGISTER3 rc=0", guestLine(t, vm, "REGISTER3 rc=", step))
	guestLine(t, vm, "READY4", step)
	require.NoError(t, n.Release(ctx, goKey, nvme.ResvWriteExclusiveRegsOnly))
	require.NoError(t, vm.Signal("released"))
	require.Equal(t, "2", guestValue(t, vm, "AENS2", step), "a second notice, for the release")
	require.Equal(t, page(2, nvme.ResvNoticeReleased, 0, 1), guestValue(t, vm, "LOG3", step),
		"count 2: the masked preemption made no page")
	require.Equal(t, zeroPage, guestValue(t, vm, "LOG4", step))
	require.Equal(t, "DISCONNECT rc=0", guestLine(t, vm, "DISCONNECT rc=", step))
	require.NoError(t, n.Reserve(ctx, goKey, nvme.ResvWriteExclusiveRegsOnly)) // for what follows
	r2 := report("REPORT2")
	require.Equal(t, "3", r2["rtype"], "nvme-cli's report after the fence: %v", r2)
	require.Equal(t, "1", r2["regctl"])
	require.Equal(t, "b", r2["rkey"])
	require.Equal(t, "1", r2["rcsts"])
	require.Equal(t, hex.EncodeToString(goHost[:]), r2["hostid"], "our host's identifier")
	_, err = vm.Wait(vmCtx(t, vm, step))
	require.NoError(t, err)
	_, err = n.WriteAtContext(ctx, make([]byte, 4096), 8<<20)
	require.NoError(t, err, "the holder now")
	zeros := sha256.Sum256(make([]byte, 1<<20))
	requireHolds(t, mem, 2<<20, 1<<20, hex.EncodeToString(zeros[:]), "the fenced write did not land")
}

// page is a Reservation Notification log page as od prints it.
func page(count uint64, t nvme.ReservationNoticeType, more int, nsid uint32) string {
	b := make([]byte, 64)
	binary.LittleEndian.PutUint64(b, count)
	b[8], b[9] = byte(t), byte(more)
	binary.LittleEndian.PutUint32(b[12:], nsid)
	var sb strings.Builder
	for i, x := range b {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%02x", x)
	}
	return sb.String()
}

var zeroPage = page(0, 0, 0, 0)

// featureValue is the value nvme-cli's get-feature prints (%#010x: no 0x
// for 0).
func featureValue(t *testing.T, out string) uint64 {
	t.Helper()
	_, v, ok := strings.Cut(out, "Current value:")
	require.True(t, ok, "%q", out)
	n, err := strconv.ParseUint(strings.TrimSpace(v), 0, 32)
	require.NoError(t, err, "%q", out)
	return n
}

// Persist Through Power Loss, judged by nvme-cli 2.3 and the Linux 6.1
// host: the guest registers with CPTPL 11b (nvme resv-register --cptpl=3)
// and takes a Write Exclusive reservation; nvme-cli reads the Reservation
// Persistence feature (83h) and the report's PTPLS. The target stops (its
// state only in the reservation file) and a new one serves the same file
// on the same port: the kernel reconnects, nvme-cli reports the same
// registration and reservation, our Go host, another host, is still
// refused its write, and the guest, the holder, still writes.
func TestNVMeKernelHostPTPL(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ns1.resv")
	mem := target.NewMemBackend(64 << 20) // the data outlives the restart too
	port := freePort(t)
	serve := func() *target.Target {
		sub, err := target.NewSubsystem(nvmeNQN)
		require.NoError(t, err)
		_, err = sub.AddNamespaceConfig(mem, target.NamespaceConfig{Reservations: true, ReservationFile: file})
		require.NoError(t, err)
		logs := &logLines{t: t}
		tg, err := target.New(target.Config{Logf: logs.logf}, sub)
		require.NoError(t, err)
		_, err = tg.Listen(context.Background(), "tcp", fmt.Sprintf("127.0.0.1:%d", port))
		require.NoError(t, err)
		return tg
	}
	tg := serve()
	t.Cleanup(func() { tg.Close() })
	const guestKey = 2748 // 0xabc
	script := fmt.Sprintf(`$NVME connect -t rdma -a 10.0.2.2 -s %d -q $HOSTNQN -n %s -i 1 --reconnect-delay=1 --ctrl-loss-tmo=120; echo "CONNECT rc=$?"
waitdev && echo "DEVICE present"
$NVME id-ns /dev/nvme0n1 | grep -i rescap | tr -s ' \t' ' ' | sed 's/^/RESCAP /'
$NVME resv-register /dev/nvme0n1 --nrkey=%d --rrega=0 --cptpl=3; echo "REGISTER rc=$?"
$NVME resv-acquire /dev/nvme0n1 --crkey=%d --rtype=1 --racqa=0; echo "ACQUIRE rc=$?"
echo "PERSIST $($NVME get-feature /dev/nvme0 -f 0x83 -n 1 2>&1)"
$NVME resv-report /dev/nvme0n1 -e | tr -s ' \t' ' ' | sed 's/^/REPORT1 /'
echo "READY1"
waitfile restarted 300
for i in $(seq 360); do [ "$(cat /sys/class/nvme/nvme0/state)" = live ] && [ "$(cat /sys/class/nvme/nvme0/transport 2>/dev/null)" = rdma ] && break; sleep 0.25; done
echo "STATE $(cat /sys/class/nvme/nvme0/state)"
$NVME resv-report /dev/nvme0n1 -e | tr -s ' \t' ' ' | sed 's/^/REPORT2 /'
dd if=/dev/urandom of=/tmp/pat bs=1M count=1 2>/dev/null
echo "PATTERN $(sha256sum /tmp/pat | cut -d' ' -f1)"
dd if=/tmp/pat of=/dev/nvme0n1 bs=1M oflag=direct 2>/tmp/err; echo "WRITE rc=$?"
$NVME disconnect -n %s; echo "DISCONNECT rc=$?"
dmesg | grep -iE 'nvme' | tail -15`, port, nvmeNQN, guestKey, guestKey, nvmeNQN)
	vm := nvmeVM(t, script)
	const step = 2 * time.Minute
	require.Equal(t, "CONNECT rc=0", guestLine(t, vm, "CONNECT rc=", step))
	guestLine(t, vm, "DEVICE present", step)
	require.Equal(t, "REGISTER rc=0", guestLine(t, vm, "REGISTER rc=", step))
	require.Equal(t, "ACQUIRE rc=0", guestLine(t, vm, "ACQUIRE rc=", step))
	require.EqualValues(t, 1, featureValue(t, guestValue(t, vm, "PERSIST", step)), "PTPL on, by CPTPL")
	guestLine(t, vm, "READY1", step)
	report := func(prefix string) map[string]string { return guestKV(vm, prefix) }
	require.Equal(t, "rescap : 0xff", guestValue(t, vm, "RESCAP", step), "nvme-cli's id-ns: the six types, IEKEY and PTPL")
	r1 := report("REPORT1")
	require.Equal(t, "1", r1["ptpls"], "nvme-cli's report: %v", r1)
	require.Equal(t, "1", r1["rtype"])
	require.Equal(t, "abc", r1["rkey"])

	tg.Close() // the state is in the file only now
	tg = serve()
	require.NoError(t, vm.Signal("restarted"))
	require.Equal(t, "live", guestValue(t, vm, "STATE", step), "the kernel reconnected")
	guestLine(t, vm, "PATTERN", step)
	r2 := report("REPORT2")
	for _, k := range []string{"gen", "rtype", "regctl", "ptpls", "rkey", "hostid", "rcsts"} {
		require.Equal(t, r1[k], r2[k], "%s after the restart: before %v, after %v", k, r1, r2)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	goHostRefused(t, ctx, port, [16]byte{0xb}, "still fenced off after the restart")
	pattern := guestValue(t, vm, "PATTERN", step)
	require.Equal(t, "WRITE rc=0", guestLine(t, vm, "WRITE rc=", step), "the holder writes after the restart")
	requireHolds(t, mem, 0, 1<<20, pattern, "the holder's write")
	require.Equal(t, "DISCONNECT rc=0", guestLine(t, vm, "DISCONNECT rc=", step))
	_, err := vm.Wait(vmCtx(t, vm, step))
	require.NoError(t, err)
}

// guestKV collects the "key : value" lines nvme-cli printed that the
// guest script marked with prefix.
func guestKV(vm *siw.VM, prefix string) map[string]string {
	kv := map[string]string{}
	for _, l := range vm.Lines() {
		i := strings.Index(l, prefix+" ")
		if i < 0 {
			continue
		}
		k, v, ok := strings.Cut(l[i+len(prefix)+1:], " : ")
		if ok {
			kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return kv
}

// goHostRefused connects our Go host (host identifier id) to the target
// on 127.0.0.1:port, checks that a write to namespace 1 gets Reservation
// Conflict, and returns the namespace (closed with the test).
func goHostRefused(t *testing.T, ctx context.Context, port int, id [16]byte, why string) *host.Namespace {
	t.Helper()
	c, err := host.Connect(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", port), nvmeNQN, host.Config{IOQueues: 1, HostID: id})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	n, err := c.Namespace(ctx, 1)
	require.NoError(t, err)
	_, err = n.WriteAtContext(ctx, make([]byte, 4096), 8<<20)
	var se *nvme.StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, nvme.StatusReservationConflict|nvme.DNR, se.Status, why)
	return n
}
