#!/usr/bin/env bash
# siwvm.sh - a throw-away QEMU VM whose Linux kernel runs the soft-iWARP
# driver (siw), so that the project's interop tests can talk to it.
#
#   siwvm.sh setup
#       Install the Debian packages needed, build siw.ko for Debian's current
#       kernel from Debian's own kernel source, and pack the initramfs. Does
#       nothing that is already done. Needs root and Debian's mirror.
#   siwvm.sh run [-p HOSTPORT:GUESTPORT]... [-t SECS] [-r RUNDIR] -- 'guest command'
#       Boot the VM (running setup first if needed), run the command in it
#       with siw0 up, stream its output, and exit with its status: 124 when
#       the time limit (default 300 s) hit, 125 when the guest never reported
#       (QEMU failed to start, the kernel panicked); then the ends of QEMU's
#       and the guest console's logs follow on stderr.
#
# The guest: Debian's kernel, a busybox initramfs with rdma-core's tools
# (rping, ibv_devinfo, rdma, perftest), eth0 = 10.0.2.15/24 on QEMU's
# user-mode network with no route out; the host is 10.0.2.2, which QEMU maps
# to the host's 127.0.0.1. -p forwards host 127.0.0.1:HOSTPORT to the guest.
# RUNDIR/share is the guest's /host (9p). In the guest, `waitport PORT` waits
# until something listens on TCP PORT (rdma_cm listeners included), and
# `waitfile NAME` until the host creates RUNDIR/share/NAME.
#
# Generated files live in $IWARP_SIWVM_WORK (default /var/tmp/goiwarp-siwvm).
# IWARP_SIWVM_ACCEL=kvm|tcg skips the KVM probe; IWARP_SIWVM_KVER=6.1.0-NN-amd64
# pins the kernel.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${IWARP_SIWVM_WORK:-/var/tmp/goiwarp-siwvm}
KDIR=$WORK/kernel                  # the unpacked kernel package, plus extra/siw.ko
INITRD=$WORK/initramfs.cpio.gz

say() { echo "siwvm: $*" >&2; }
die() { say "$*"; exit 125; }

# ------------------------------------------------------------------ setup
PKGS="qemu-system-x86 busybox-static kmod iproute2 cpio xz-utils gcc make
      ibverbs-providers ibverbs-utils rdmacm-utils librdmacm1 perftest tcpdump"
# Binaries copied into the guest, with the libraries they link: rstream and
# riostream speak rsockets; sockcat (guest/sockcat.c, built here) is a plain
# socket program to run under librspreload.so (busybox's nc is static).
GUEST_BINS="busybox kmod rdma tcpdump rping ucmatose rdma_server rdma_client ibv_devinfo ibv_devices
            ib_write_bw ib_write_lat ib_read_bw ib_read_lat ib_send_bw ib_send_lat
            rstream riostream"
GUEST_MODS="virtio_pci virtio_net 9pnet_virtio 9p crc32c_generic crc32c_intel ib_core
            ib_uverbs iw_cm rdma_cm rdma_ucm siw"

apt_install() {
    local want=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || want+=("$p")
    done
    [ ${#want[@]} = 0 ] && return
    say "apt-get install ${want[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends "${want[@]}" >&2
}

# Debian builds its kernels without CONFIG_RDMA_SIW, so siw.ko is compiled
# here, unchanged, from the linux-source package of the very same version.
build_kernel() {
    if [ -f "$KDIR/KVER" ]; then
        local k; k=$(cat "$KDIR/KVER")
        [ -f "$KDIR/lib/modules/$k/extra/siw.ko" ] && [ -d "/usr/src/linux-headers-$k" ] && return
    fi
    local kver ver series src=$WORK/src
    kver=${IWARP_SIWVM_KVER:-$(apt-cache depends linux-image-amd64 | sed -n 's/^ *Depends: linux-image-//p' | head -1)}
    [ -n "$kver" ] || die "cannot tell which kernel linux-image-amd64 is (apt-get update?)"
    ver=$(apt-cache show "linux-image-$kver" | sed -n 's/^Version: //p' | head -1)
    series=$(echo "$kver" | cut -d. -f1,2)        # 6.1.0-56-amd64 -> 6.1
    say "building siw.ko for $kver ($ver)"
    apt_install "linux-headers-$kver"
    rm -rf "$KDIR" "$src" "$WORK/debs"
    mkdir -p "$KDIR" "$src" "$WORK/debs"
    (cd "$WORK/debs" && apt-get download "linux-image-$kver=$ver" "linux-source-$series=$ver" >&2)
    dpkg-deb -x "$WORK/debs/linux-image-${kver}_${ver}_amd64.deb" "$KDIR"
    dpkg-deb --fsys-tarfile "$WORK/debs/linux-source-${series}_${ver}_all.deb" |
        tar -xO "./usr/src/linux-source-$series.tar.xz" | xz -dc |
        tar -x -C "$src" --strip-components=4 "linux-source-$series/drivers/infiniband/sw/siw"
    make -s -C "/usr/src/linux-headers-$kver" M="$src/siw" CONFIG_RDMA_SIW=m modules >&2
    mkdir -p "$KDIR/lib/modules/$kver/extra"
    strip --strip-debug -o "$KDIR/lib/modules/$kver/extra/siw.ko" "$src/siw/siw.ko"
    depmod -b "$KDIR" "$kver"
    rm -rf "$WORK/debs"                            # 200 MB we no longer need
    echo "$kver" > "$KDIR/KVER"
}

build_initramfs() {
    local kver stamp r=$WORK/root f l m
    kver=$(cat "$KDIR/KVER")
    stamp="$kver $(cat "$0" "$HERE/guest-init.sh" "$HERE/guest/sockcat.c" | sha256sum | cut -c1-16)"
    [ -f "$INITRD" ] && [ "$(cat "$INITRD.stamp" 2>/dev/null)" = "$stamp" ] && return
    say "packing $INITRD"
    rm -rf "$r"
    mkdir -p "$r"/{usr/bin,usr/sbin,usr/lib,usr/lib64,etc/libibverbs.d,proc,sys,dev,tmp,run,host}
    for d in bin sbin lib lib64; do ln -s "usr/$d" "$r/$d"; done
    # Every binary and shared object, and every library ldd says they need.
    local files=(/usr/lib/x86_64-linux-gnu/libibverbs/libsiw-rdmav*.so /usr/lib/x86_64-linux-gnu/libgcc_s.so.1
                 /usr/lib/x86_64-linux-gnu/rsocket/librspreload.so)
    gcc -O2 -Wall -o "$WORK/sockcat" "$HERE/guest/sockcat.c"
    install -D -m 755 "$WORK/sockcat" "$r/usr/bin/sockcat"
    for f in $GUEST_BINS; do files+=("$(command -v "$f")"); done
    for f in "${files[@]}"; do
        for l in "$f" $(ldd "$f" 2>/dev/null | grep -o '/[^ ]*'); do
            [ -e "$r$l" ] || { mkdir -p "$r$(dirname "$l")"; cp -L "$l" "$r$l"; }
        done
    done
    for a in $("$r/usr/bin/busybox" --list); do [ -e "$r/usr/bin/$a" ] || ln -s busybox "$r/usr/bin/$a"; done
    for a in modprobe insmod lsmod rmmod modinfo; do ln -sf ../bin/kmod "$r/usr/sbin/$a"; done
    cp /etc/libibverbs.d/siw.driver "$r/etc/libibverbs.d/"
    printf 'root:x:0:0:root:/root:/bin/sh\ntcpdump:x:0:0::/:/bin/sh\n' > "$r/etc/passwd"
    printf 'root:x:0:\n' > "$r/etc/group"
    printf '127.0.0.1 localhost\n10.0.2.15 siwvm\n10.0.2.2 host\n' > "$r/etc/hosts"
    # The modules, with their dependencies.
    for m in $GUEST_MODS; do
        modprobe -d "$KDIR" -S "$kver" --show-depends "$m" | awk '$1 == "insmod" { print $2 }'
    done | sort -u | while read -r m; do
        mkdir -p "$r$(dirname "${m#"$KDIR"}")"
        cp "$m" "$r${m#"$KDIR"}"
    done
    cp "$KDIR/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} "$r/lib/modules/$kver/"
    depmod -b "$r" "$kver"
    install -m 755 "$HERE/guest-init.sh" "$r/init"
    cat > "$r/usr/bin/waitport" <<'EOF'
#!/bin/sh
# waitport PORT [SECS]: wait until something listens on TCP PORT.
n=$(( ${2:-30} * 10 ))
while ! netstat -ltn | grep -q ":$1 "; do
    n=$((n - 1)); [ $n -gt 0 ] || { echo "waitport: nothing listens on $1" >&2; exit 1; }
    sleep 0.1
done
EOF
    cat > "$r/usr/bin/waitfile" <<'EOF'
#!/bin/sh
# waitfile NAME [SECS]: wait until the host creates /host/NAME.
n=$(( ${2:-60} * 10 ))
while [ ! -e "/host/$1" ]; do
    n=$((n - 1)); [ $n -gt 0 ] || { echo "waitfile: no /host/$1" >&2; exit 1; }
    sleep 0.1
done
EOF
    chmod 755 "$r/usr/bin/waitport" "$r/usr/bin/waitfile"
    (cd "$r" && find . | cpio -o -H newc --quiet | gzip -1) > "$INITRD.tmp"
    mv "$INITRD.tmp" "$INITRD"
    echo "$stamp" > "$INITRD.stamp"
}

# kvm when /dev/kvm works for this kernel (it boots to its banner), else tcg.
# Probed once; the answer is kept in $WORK/accel.
accel() {
    if [ -n "${IWARP_SIWVM_ACCEL:-}" ]; then echo "$IWARP_SIWVM_ACCEL"; return; fi
    if [ ! -f "$WORK/accel" ]; then
        local a=tcg
        if [ -w /dev/kvm ] && timeout 20 qemu-system-x86_64 -accel kvm -cpu host -m 256 \
            -display none -nodefaults -no-reboot -serial stdio \
            -kernel "$KDIR/boot/vmlinuz-$(cat "$KDIR/KVER")" -append "console=ttyS0 panic=-1" \
            </dev/null 2>/dev/null | grep -aqm1 'Linux version'; then
            a=kvm
        fi
        echo $a > "$WORK/accel"
    fi
    cat "$WORK/accel"
}

setup() {
    [ "$(id -u)" = 0 ] || die "setup needs root (apt-get, depmod)"
    mkdir -p "$WORK"
    exec 9>"$WORK/.lock"
    flock 9                          # one setup at a time
    apt_install $PKGS
    build_kernel
    build_initramfs
    accel >/dev/null
    exec 9>&-
}

# -------------------------------------------------------------------- run
run() {
    local fwds=() timeout=300 rundir= o
    while getopts "p:t:r:" o; do
        case $o in
        p) fwds+=("$OPTARG") ;;
        t) timeout=$OPTARG ;;
        r) rundir=$OPTARG ;;
        *) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;/^set -e/d' >&2; exit 2 ;;
        esac
    done
    shift $((OPTIND - 1))
    [ $# -gt 0 ] || die "run: no guest command"
    setup
    local kver acc net f qrc rc
    kver=$(cat "$KDIR/KVER")
    acc=$(accel)
    rundir=${rundir:-$WORK/runs/$(date +%Y%m%d-%H%M%S)-$$}
    mkdir -p "$rundir/share"
    printf '%s\n' "$*" > "$rundir/share/.cmd.sh"
    : > "$rundir/output.log"
    net=user,id=n0,net=10.0.2.0/24,host=10.0.2.2
    for f in "${fwds[@]}"; do net+=",hostfwd=tcp:127.0.0.1:${f%%:*}-:${f##*:}"; done
    local cpu=max; [ "$acc" = kvm ] && cpu=host
    say "accel=$acc kernel=$kver rundir=$rundir"
    # --foreground keeps QEMU in our process group, so that whoever started us
    # can kill the group; the watchdog kills QEMU if our parent goes away.
    timeout --foreground -k 5 "$timeout" qemu-system-x86_64 -accel "$acc" -cpu "$cpu" -machine q35 \
        -m 1024 -smp 2 -nodefaults -display none -no-reboot \
        -kernel "$KDIR/boot/vmlinuz-$kver" -initrd "$INITRD" \
        -append "console=ttyS0 panic=-1 quiet loglevel=5" \
        -serial file:"$rundir/console.log" -serial file:"$rundir/output.log" \
        -netdev "$net" -device virtio-net-pci,netdev=n0 \
        -virtfs local,path="$rundir/share",mount_tag=host,security_model=none,id=fs0 \
        </dev/null >"$rundir/qemu.log" 2>&1 &
    qpid=$! parent=$PPID
    echo $qpid > "$rundir/qemu.pid"
    ( while kill -0 $qpid 2>/dev/null; do
          kill -0 $parent 2>/dev/null || { kill $qpid; break; }
          sleep 1
      done ) &
    wd=$!
    trap 'kill $qpid $wd 2>/dev/null || true' EXIT
    tail -n +1 -f --pid=$qpid "$rundir/output.log" | grep -av --line-buffered '^SIWVM_EXIT=' || true
    qrc=0; wait $qpid || qrc=$?
    rc=$(sed -n 's/^SIWVM_EXIT=\([0-9]*\).*/\1/p' "$rundir/output.log" | tail -1)
    if [ -z "$rc" ]; then
        if [ $qrc = 124 ] || [ $qrc = 137 ]; then say "time limit of ${timeout}s hit"; rc=124
        else say "the guest never reported its exit status (QEMU exit status $qrc)"; rc=125; fi
        say "QEMU log:"; tail -20 "$rundir/qemu.log" >&2 || true
        say "guest console (last lines):"; tail -30 "$rundir/console.log" >&2 2>/dev/null || true
    fi
    exit "$rc"
}

case "${1:-}" in
setup) setup; say "ready: $(cat "$KDIR/KVER"), accel $(accel), $INITRD" ;;
run) shift; run "$@" ;;
*) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;/^set -e/d' >&2; exit 2 ;;
esac
