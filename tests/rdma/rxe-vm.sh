#!/bin/bash
# rxe-vm.sh - run a command inside a small VM that has two soft-RoCE
# (rdma_rxe) devices, so the verbs transport can be tested on a machine
# without an RDMA NIC.
#
#   tests/rdma/rxe-vm.sh [-t TIMEOUT_S] [-m MEM_MB] -- COMMAND...
#
# The VM boots Debian's stock kernel under qemu (software emulation), sees
# this machine's root file system read-only and the current directory
# read-write at the same path, and has a veth pair va/vb (192.168.77.1/.2)
# with an rxe device on each: rxa and rxb. Exit status: the command's; 124
# on timeout; 125 when the VM could not be set up.
# Needs (installed on first use): qemu-system-x86 busybox-static kmod cpio
# rdma-core ibverbs-providers ibverbs-utils iproute2; the kernel package is
# downloaded once into $FMEM_RXE_CACHE (default /var/cache/fmem-rxe).
set -euo pipefail
timeout_s=600
mem_mb=1536
while [ $# -gt 0 ]; do
    case "$1" in
    -t) timeout_s=$2; shift 2 ;;
    -m) mem_mb=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
    esac
done
[ $# -gt 0 ] || { echo "usage: rxe-vm.sh [-t S] [-m MB] -- COMMAND..." >&2; exit 125; }
cache=${FMEM_RXE_CACHE:-/var/cache/fmem-rxe}
modules="crc32_generic virtio_pci 9pnet_virtio 9p veth ib_uverbs rdma_ucm rdma_rxe"

install_tools() {
    local want=() tool
    for tool in qemu-system-x86_64:qemu-system-x86 busybox:busybox-static depmod:kmod \
        cpio:cpio rdma:iproute2 ibv_devinfo:ibverbs-utils; do
        command -v "${tool%%:*}" >/dev/null || want+=("${tool#*:}")
    done
    ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-*.so >/dev/null 2>&1 ||
        want+=(rdma-core ibverbs-providers)
    [ ${#want[@]} -eq 0 ] && return 0
    echo "rxe-vm: installing ${want[*]}" >&2
    { apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${want[@]}"; } \
        >/dev/null || { echo "rxe-vm: apt-get failed" >&2; exit 125; }
}

# Kernel and a busybox initrd holding just the modules the VM needs.
build_image() {
    [ -s "$cache/initrd.gz" ] && [ -s "$cache/vmlinuz" ] && return 0
    echo "rxe-vm: preparing a kernel and initrd in $cache (once)" >&2
    mkdir -p "$cache"
    local tmp kpkg kver root m f
    tmp=$(mktemp -d)
    kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    [ -n "$kpkg" ] || { apt-get update -qq >/dev/null; kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'); }
    (cd "$tmp" && apt-get download "$kpkg" >/dev/null 2>&1 && dpkg-deb -x ./*.deb kernel) ||
        { echo "rxe-vm: cannot fetch $kpkg" >&2; rm -rf "$tmp"; exit 125; }
    kver=$(ls "$tmp/kernel/lib/modules")
    depmod -b "$tmp/kernel" "$kver"
    root="$tmp/initrd"
    mkdir -p "$root"/{bin,dev,proc,sys,host,lib/modules/"$kver"}
    cp "$(command -v busybox)" "$root/bin/"
    for m in $modules; do
        for f in $(modprobe -d "$tmp/kernel" -S "$kver" --show-depends "$m" | awk '$1 == "insmod" {print $2}'); do
            mkdir -p "$root/$(dirname "${f#"$tmp/kernel/"}")"
            cp "$f" "$root/${f#"$tmp/kernel/"}"
        done
    done
    cp "$tmp/kernel/lib/modules/$kver"/modules.* "$root/lib/modules/$kver/"
    cat >"$root/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $modules; do modprobe \$m || echo "rxe-vm: modprobe \$m failed"; done
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,ro hostroot /host
for d in proc sys dev; do mount -o bind /\$d /host/\$d; done
for d in tmp run dev/shm; do mkdir -p /host/\$d; mount -t tmpfs tmpfs /host/\$d; done
wd=\$(sed -n 's/.* fmemwd=\([^ ]*\).*/\1/p' /proc/cmdline)
mkdir -p /host\$wd 2>/dev/null
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 workdir /host\$wd
chroot /host /bin/sh -c "cd \$wd && sh ./.fmem-rxe-job"
echo "FMEM_RXE_STATUS=\$?"
poweroff -f
EOF
    chmod +x "$root/init"
    (cd "$root" && find . | cpio -o -H newc 2>/dev/null | gzip -1) >"$cache/initrd.gz"
    cp "$tmp/kernel/boot/vmlinuz-$kver" "$cache/vmlinuz"
    rm -rf "$tmp"
}

install_tools
build_image
wd=$(pwd)
job="$wd/.fmem-rxe-job"
{
    echo 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root'
    echo 'ip link set lo up && ip link add va type veth peer name vb'
    echo 'ip addr add 192.168.77.1/24 dev va && ip addr add 192.168.77.2/24 dev vb'
    echo 'ip link set va up && ip link set vb up'
    echo 'rdma link add rxa type rxe netdev va && rdma link add rxb type rxe netdev vb || exit 125'
    echo 'ulimit -l unlimited'
    printf '%q ' "$@"
    echo
} >"$job"
log=$(mktemp)
trap 'rm -f "$job" "$log"' EXIT
set +e
# KVM is not used: nested virtualisation is unreliable here, TCG boots fast
timeout "$timeout_s" qemu-system-x86_64 -accel tcg -smp 2 -m "$mem_mb" -nographic -no-reboot \
    -nic none -kernel "$cache/vmlinuz" -initrd "$cache/initrd.gz" \
    -append "console=ttyS0 quiet panic=-1 fmemwd=$wd" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=passthrough,readonly=on,multidevs=remap \
    -virtfs local,path="$wd",mount_tag=workdir,security_model=passthrough,multidevs=remap \
    </dev/null 2>&1 | tee "$log" | sed -u -e 's/\x1b\[[0-9;?]*[A-Za-z]//g' -e 's/\x1bc//g' -e '/^\[ *[0-9.]*\]/d' -e '/SeaBIOS\|iPXE\|Booting from/d'
st=${PIPESTATUS[0]}
set -e
[ "$st" = 124 ] && { echo "rxe-vm: timed out after ${timeout_s}s" >&2; exit 124; }
status=$(sed -n 's/.*FMEM_RXE_STATUS=\([0-9]*\).*/\1/p' "$log" | tail -n 1)
[ -n "$status" ] || { echo "rxe-vm: the VM reported no result" >&2; exit 125; }
exit "$status"
