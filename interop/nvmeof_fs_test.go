//go:build interop

package interop

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/interop/siw"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The kernel's host runs a file system on our target, and the file
// system's own checker judges what reached the disk: a real workload, not
// dd's sequential megabytes. The guest mounts an ext4 file system (made
// here with lazy inode tables, and without the discard that would let
// mke2fs count them zeroed, so that the kernel zeroes them with Write
// Zeroes) with online discard, and on three I/O queues (two for reads,
// one for writes: nvme connect -W 1) copies a tree of its kernel modules,
// writes files of awkward sizes and two hundred small ones while a 24 MiB
// one streams, deletes a directory
// (discards), syncs (flushes), unmounts, drops its caches, mounts again
// and checks every file's SHA-256. Then, on this side, e2fsck finds the
// image clean and debugfs reads every file out of it with the guest's
// SHA-256: metadata, journal and data as the kernel meant them. The
// journal's commits arrive as writes with Force Unit Access, which the
// target makes durable (WriteAtFUA). This test found that the target
// refused every discard: Linux sends a Dataset Management buffer of 256
// ranges whatever the number it fills (nvmeof/host's TestDSMLongerBuffer).
func TestNVMeKernelHostFilesystem(t *testing.T) {
	img := ext4Image(t, "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard")

	fb, err := target.OpenFileBackend(img)
	require.NoError(t, err)
	t.Cleanup(func() { fb.Close() })
	be := &countingBackend{FileBackend: fb}
	sub, err := target.NewSubsystem(nvmeNQN)
	require.NoError(t, err)
	_, err = sub.AddNamespace(be, 512)
	require.NoError(t, err)
	logs, ports := serveTarget(t, target.Config{}, sub, 1)

	script := fmt.Sprintf(`/usr/sbin/modprobe -d /host/mods ext4 || echo "MODPROBE FAILED ext4"
$NVME connect -t rdma -a 10.0.2.2 -s %d -q $HOSTNQN -n %s -i 2 -W 1; echo "CONNECT rc=$?"
waitdev && echo "DEVICE present"
echo "QUEUES $(cat /sys/class/nvme/nvme0/queue_count)"
mkdir -p /mnt
mount -t ext4 -o discard,init_itable=0 /dev/nvme0n1 /mnt; echo "MOUNT rc=$?"
cp -a /host/mods /mnt/mods; echo "COPY rc=$?"
mkdir /mnt/r
for s in 1 511 512 513 4095 4096 4097 65537 1000000 3000001; do
  dd if=/dev/urandom of=/mnt/r/f$s bs=$s count=1 2>/dev/null
done
(dd if=/dev/urandom of=/mnt/r/big bs=1M count=24 2>/dev/null; echo "BIG rc=$?") &
(for i in $(seq 200); do echo "small file $i" > /mnt/r/s$i; done; echo "SMALL done") &
wait
rm -rf /mnt/mods/lib/modules/*/kernel/drivers; echo "REMOVE rc=$?"
# ext4lazyinit zeroes the inode tables, but starts at a random moment up to
# 5 s after the mount (EXT4_DEF_LI_MAX_START_DELAY): wait for its thread to
# finish, at most 30 s, so that its Write Zeroes come before the unmount.
for i in $(seq 300); do grep -qx ext4lazyinit /proc/[0-9]*/comm 2>/dev/null || break; sleep 0.1; done
echo "LAZYINIT waited $i"
sync; echo "SYNC rc=$?"
`+guestExt4Reread+`$NVME disconnect -n %s; echo "DISCONNECT rc=$?"
echo "FS_ERRORS $(dmesg | grep -ciE 'EXT4-fs error|I/O error|critical medium|buffer I/O')"
echo "ERROR_RECOVERIES $(dmesg | grep -c 'starting error recovery')"
dmesg | grep -iE 'ext4|nvme|error' | tail -20`, ports[0], nvmeNQN, nvmeNQN)
	vm := nvmeVMShare(t, vmShare{mods: []string{"ext4"}}, script)
	const step = 3 * time.Minute
	require.Equal(t, "CONNECT rc=0", guestLine(t, vm, "CONNECT rc=", step))
	guestLine(t, vm, "DEVICE present", step)
	require.Equal(t, "4", guestValue(t, vm, "QUEUES", step), "admin queue, two I/O queues and a write queue")
	require.Equal(t, "MOUNT rc=0", guestLine(t, vm, "MOUNT rc=", step))
	require.Equal(t, "COPY rc=0", guestLine(t, vm, "COPY rc=", step))
	require.Equal(t, "BIG rc=0", guestLine(t, vm, "BIG rc=", step))
	require.Equal(t, "REMOVE rc=0", guestLine(t, vm, "REMOVE rc=", step))
	require.Equal(t, "SYNC rc=0", guestLine(t, vm, "SYNC rc=", step))
	files := requireReread(t, vm, step)
	require.Equal(t, "DISCONNECT rc=0", guestLine(t, vm, "DISCONNECT rc=", step))
	assert.Equal(t, "0", guestValue(t, vm, "FS_ERRORS", step), "ext4 and block-layer errors (dmesg)")
	assert.Equal(t, "0", guestValue(t, vm, "ERROR_RECOVERIES", step), "the host's error recoveries (dmesg)")
	_, err = vm.Wait(vmCtx(t, vm, step))
	require.NoError(t, err)

	n := judgeExt4(t, img, vm, files)
	require.Greater(t, n, 211, "files written: 211 in r/ and the modules left")

	// What the file system asked of the target besides reads and writes.
	t.Logf("target: %d Write Zeroes, %d Deallocate, %d Flush, %d FUA writes", be.zeroes.Load(), be.deallocs.Load(),
		be.flushes.Load(), be.fua.Load())
	assert.Positive(t, be.zeroes.Load(), "Write Zeroes (the lazy inode tables)")
	assert.Positive(t, be.deallocs.Load(), "Deallocate (online discard of the deleted directory)")
	assert.Positive(t, be.flushes.Load(), "Flush (before the journal's commits)")
	assert.Positive(t, be.fua.Load(), "writes with Force Unit Access (the journal's commit records)")
	assert.Zero(t, logs.count(`connection ended`), "queues that ended early")
}

// ext4Image makes a 256 MiB ext4 image with mkfs.ext4 and opts, after
// checking that the tools that judge it (e2fsprogs, kmod) are here.
func ext4Image(t *testing.T, opts ...string) string {
	t.Helper()
	for _, tool := range []string{"mkfs.ext4", "e2fsck", "debugfs", "depmod", "modprobe"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "%s (e2fsprogs, kmod) judges this test", tool)
	}
	img := filepath.Join(t.TempDir(), "fs.img")
	require.NoError(t, os.WriteFile(img, nil, 0o644))
	require.NoError(t, os.Truncate(img, 256<<20))
	out, err := exec.Command("mkfs.ext4", append(append([]string{"-q", "-F"}, opts...), img)...).CombinedOutput()
	require.NoError(t, err, "mkfs.ext4: %s", out)
	return img
}

// guestExt4Reread lists the files of the ext4 on /mnt with their SHA-256
// (the SUM lines judgeExt4 reads), unmounts it, drops the guest's caches,
// mounts it again and checks every file; requireReread follows it.
const guestExt4Reread = `(cd /mnt && find . -type f | sort | xargs sha256sum) > /tmp/sums
umount /mnt; echo "UMOUNT rc=$?"
echo 3 > /proc/sys/vm/drop_caches
mount -t ext4 /dev/nvme0n1 /mnt; echo "MOUNT2 rc=$?"
(cd /mnt && sha256sum -c /tmp/sums > /tmp/check 2>&1); echo "VERIFY rc=$?"
grep -v ': OK$' /tmp/check | head -5
echo "FILES $(wc -l < /tmp/sums)"
sed 's/^/SUM /' /tmp/sums
umount /mnt; echo "UMOUNT2 rc=$?"
`

// requireReread checks what guestExt4Reread reports and returns the
// number of files it listed.
func requireReread(t *testing.T, vm *siw.VM, step time.Duration) string {
	t.Helper()
	require.Equal(t, "UMOUNT rc=0", guestLine(t, vm, "UMOUNT rc=", step))
	require.Equal(t, "MOUNT2 rc=0", guestLine(t, vm, "MOUNT2 rc=", step))
	require.Equal(t, "VERIFY rc=0", guestLine(t, vm, "VERIFY rc=", step), "every file read back after the remount")
	files := guestValue(t, vm, "FILES", step)
	require.Equal(t, "UMOUNT2 rc=0", guestLine(t, vm, "UMOUNT2 rc=", step))
	return files
}

// judgeExt4 has this side's tools judge the ext4 image the guest wrote:
// e2fsck finds it clean, and debugfs reads every file the guest listed
// (its "SUM sha256 ./path" lines, files of them) with the guest's SHA-256,
// and no other. It returns how many files there are.
func judgeExt4(t *testing.T, img string, vm *siw.VM, files string) int {
	t.Helper()
	sums := map[string]string{} // path in the file system → SHA-256
	for _, l := range vm.Lines() {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "SUM" {
			sums[strings.TrimPrefix(f[2], "./")] = f[1]
		}
	}
	require.Equal(t, files, fmt.Sprint(len(sums)), "the guest's list of files")
	out, err := exec.Command("e2fsck", "-fn", img).CombinedOutput()
	require.NoError(t, err, "e2fsck finds the image clean:\n%s", out)
	dump := t.TempDir()
	out, err = exec.Command("debugfs", "-R", "rdump / "+dump, img).CombinedOutput()
	require.NoError(t, err, "debugfs: %s", out)
	for path, want := range sums {
		b, err := os.ReadFile(filepath.Join(dump, path))
		if !assert.NoError(t, err, "debugfs's copy of %s", path) {
			continue
		}
		got := sha256.Sum256(b)
		assert.Equal(t, want, hex.EncodeToString(got[:]), "%s as debugfs reads it from the image", path)
	}
	n := 0
	filepath.WalkDir(dump, func(_ string, d os.DirEntry, _ error) error {
		if d != nil && d.Type().IsRegular() {
			n++
		}
		return nil
	})
	assert.Equal(t, len(sums), n, "regular files in the image (none deleted left, none missing)")
	return len(sums)
}

// The file system test across a restart of the iwarp-nvmet binary: it is
// killed (SIGKILL) while the guest's ext4 copies a module tree and writes
// 300 files, and started again on the same file. The kernel reconnects
// by itself, the file system sees no error, every file reads back after a
// remount, and here e2fsck and debugfs judge the image.
func TestNVMeKernelHostFilesystemRestart(t *testing.T) {
	img := ext4Image(t)
	bin := buildNvmet(t)
	hp := freePort(t)
	var out1, out2 syncBuffer
	first := startNvmet(t, bin, hp, img, &out1)
	script := fmt.Sprintf(`/usr/sbin/modprobe -d /host/mods ext4 || echo "MODPROBE FAILED ext4"
$NVME connect -t rdma -a 10.0.2.2 -s %d -q $HOSTNQN -n %s -i 2 --reconnect-delay=1 --ctrl-loss-tmo=120; echo "CONNECT rc=$?"
waitdev && echo "DEVICE present"
mkdir -p /mnt
mount -t ext4 /dev/nvme0n1 /mnt; echo "MOUNT rc=$?"
(cp -a /host/mods /mnt/mods && mkdir /mnt/w && for i in $(seq 300); do
   dd if=/dev/urandom of=/mnt/w/f$i bs=4k count=$((i %% 17 + 1)) 2>/dev/null || exit 1
 done && sync; echo $? > /tmp/wl.rc) &
sleep 1; echo "WORKING"
wait
echo "WORKLOAD rc=$(cat /tmp/wl.rc)"
echo "STATE $(cat /sys/class/nvme/nvme0/state)"
`+guestExt4Reread+`$NVME disconnect -n %s; echo "DISCONNECT rc=$?"
echo "FS_ERRORS $(dmesg | grep -ciE 'EXT4-fs error|I/O error|critical medium|buffer I/O')"
echo "RECONNECTS $(dmesg | grep -c 'Successfully reconnected')"
dmesg | grep -iE 'ext4|nvme|error' | tail -20`, hp, nvmeNQN, nvmeNQN)
	vm := nvmeVMShare(t, vmShare{mods: []string{"ext4"}}, script)
	const step = 3 * time.Minute
	require.Equal(t, "CONNECT rc=0", guestLine(t, vm, "CONNECT rc=", step))
	require.Equal(t, "MOUNT rc=0", guestLine(t, vm, "MOUNT rc=", step))
	guestLine(t, vm, "WORKING", step)
	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	first.Wait()
	t.Logf("target killed; its log:\n%s", out1.String())
	time.Sleep(time.Second)
	second := startNvmet(t, bin, hp, img, &out2)
	require.Equal(t, "WORKLOAD rc=0", guestLine(t, vm, "WORKLOAD rc=", 4*time.Minute), "the file system's work across the restart")
	require.Equal(t, "live", guestValue(t, vm, "STATE", step))
	files := requireReread(t, vm, step)
	require.Equal(t, "DISCONNECT rc=0", guestLine(t, vm, "DISCONNECT rc=", step))
	assert.Equal(t, "0", guestValue(t, vm, "FS_ERRORS", step), "ext4 and block-layer errors (dmesg)")
	assert.NotEqual(t, "0", guestValue(t, vm, "RECONNECTS", step), "the kernel reconnected")
	_, err := vm.Wait(vmCtx(t, vm, step))
	require.NoError(t, err)
	require.NoError(t, second.Process.Signal(os.Interrupt))
	require.NoError(t, second.Wait(), "iwarp-nvmet's exit after SIGINT:\n%s", out2.String())
	n := judgeExt4(t, img, vm, files)
	require.Greater(t, n, 300, "files written: 300 in w/ and the modules")
}

// countingBackend counts the commands a file system sends beyond plain
// reads and writes.
type countingBackend struct {
	*target.FileBackend
	zeroes, deallocs, flushes, fua atomic.Int64
}

func (b *countingBackend) WriteAtFUA(p []byte, off int64) (int, error) {
	b.fua.Add(1)
	return b.FileBackend.WriteAtFUA(p, off)
}

func (b *countingBackend) Zero(off, n int64, deallocate bool) error {
	if deallocate {
		b.deallocs.Add(1)
	} else {
		b.zeroes.Add(1)
	}
	return b.FileBackend.Zero(off, n, deallocate)
}

func (b *countingBackend) Flush() error {
	b.flushes.Add(1)
	return b.FileBackend.Flush()
}
