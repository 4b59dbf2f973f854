#!/bin/sh
# /init of the siw VM (busybox sh; see siwvm.sh). It loads siw, puts eth0 on
# QEMU's user-mode network (10.0.2.15/24, no route out; the host is 10.0.2.2),
# adds the RDMA device siw0 on eth0, mounts the host's share at /host, runs
# /host/.cmd.sh with its output on the second serial port, reports
# "SIWVM_EXIT=<status>" there and powers off. Kernel messages go to the
# first serial port.
export PATH=/usr/sbin:/usr/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
echo /usr/sbin/modprobe > /proc/sys/kernel/modprobe
OUT=/dev/ttyS1
stty -F $OUT raw -echo
fail() { echo "siwvm guest: $*" > $OUT; }

for m in virtio_pci virtio_net 9pnet_virtio 9p crc32c_intel crc32c_generic siw rdma_ucm; do
    modprobe $m 2>/dev/null || fail "modprobe $m failed"
done
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
hostname siwvm
rdma link add siw0 type siw netdev eth0 || fail "rdma link add siw0 failed"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 host /host || fail "9p mount failed"
ulimit -l unlimited
cd /host

sh /host/.cmd.sh > $OUT 2>&1 < /dev/null
echo "SIWVM_EXIT=$?" > $OUT
sync
poweroff -f
