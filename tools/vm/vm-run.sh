#!/bin/bash
# Runs SCRIPT as root inside a throw-away QEMU guest and exits with its exit status.
#
# The guest boots this host's Debian kernel (/boot/vmlinuz-KVER) with a tiny initramfs
# (mkinitramfs.sh) that mounts the host's root filesystem read-only over virtio-9p under a
# tmpfs overlay: the guest runs the host's binaries but cannot change the host. It has no
# network card at all (-nic none): everything the test does stays inside the guest.
#
# Usage: vm-run.sh SCRIPT   (it may source /vmtest/guest-lib.sh, the guest scripts' helpers)
# Env:   VM_TIMEOUT  seconds before the guest is killed (300)
#        VM_MEM (2048 MiB)  VM_CPUS (2)  VM_NODES NUMA nodes (2)  VM_ACCEL tcg|kvm (tcg)
#        VM_KVER     kernel version (newest /boot/vmlinuz-*)
#        VM_CACHE    where the initramfs is cached (~/.cache/numatgt-vm)
#        VM_ENV      names of host variables to export into the script's environment
#        VM_FILES    host files copied into the run share, visible as /vmtest/<basename>
#        VM_OUT      host dir shared writable as /vmtest/out
# Exit:  the script's status; 125 when the guest produced none (boot failure, timeout).
set -euo pipefail
SCRIPT=${1:?usage: vm-run.sh SCRIPT}
[ -r "$SCRIPT" ] || { echo "vm-run: cannot read $SCRIPT" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
TIMEOUT=${VM_TIMEOUT:-300}
MEM=${VM_MEM:-2048}
CPUS=${VM_CPUS:-2}
NODES=${VM_NODES:-2}
ACCEL=${VM_ACCEL:-tcg}
KVER=${VM_KVER:-$(ls -1 /boot/vmlinuz-* 2>/dev/null | sed 's#^/boot/vmlinuz-##' | sort -V | tail -n 1)}
CACHE=${VM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/numatgt-vm}
KERNEL=/boot/vmlinuz-$KVER
if [ -z "$KVER" ] || [ ! -r "$KERNEL" ] || [ ! -d "/lib/modules/$KVER" ]; then
  echo "vm-run: no readable kernel + modules (${KERNEL:-none}); run tools/install-test-deps.sh" >&2
  exit 2
fi
command -v qemu-system-x86_64 >/dev/null || { echo "vm-run: qemu-system-x86_64 missing" >&2; exit 2; }

mkdir -p "$CACHE"
INITRD=$CACHE/initramfs-$KVER.cpio.gz
for f in guest-init.sh guest-stage2.sh mkinitramfs.sh; do
  if [ ! -s "$INITRD" ] || [ "$HERE/$f" -nt "$INITRD" ]; then
    "$HERE/mkinitramfs.sh" "$KVER" "$INITRD"
    break
  fi
done

SHARE=$(mktemp -d "${TMPDIR:-/tmp}/numatgt-vm.XXXXXX")
trap 'rm -rf "$SHARE"' EXIT
cp "$SCRIPT" "$SHARE/script"
# the guest scripts' shared helpers, as /vmtest/guest-lib.sh
cp "$HERE/guest-lib.sh" "$SHARE/guest-lib.sh"
pwd > "$SHARE/cwd"
: > "$SHARE/env"
for name in ${VM_ENV:-}; do
  if [ -n "${!name+set}" ]; then printf 'export %s=%q\n' "$name" "${!name}" >> "$SHARE/env"; fi
done
for f in ${VM_FILES:-}; do cp "$f" "$SHARE/"; done

case "$ACCEL" in
  kvm) ACC=(-accel kvm -cpu host) ;;
  # TCG: /dev/kvm on Firecracker-style hosts cannot run a stock kernel
  *) ACC=(-accel tcg,thread=multi,tb-size=512 -cpu max) ;;
esac
TOPO=()
if [ "$NODES" -gt 1 ]; then
  per_mem=$((MEM / NODES))
  per_cpu=$((CPUS / NODES))
  [ "$per_cpu" -ge 1 ] || { echo "vm-run: VM_CPUS must be >= VM_NODES" >&2; exit 2; }
  for ((n = 0; n < NODES; n++)); do
    first=$((n * per_cpu)); last=$((first + per_cpu - 1))
    TOPO+=(-object "memory-backend-ram,id=mem$n,size=${per_mem}M"
           -numa "node,nodeid=$n,cpus=$first-$last,memdev=mem$n")
  done
  SMP="$CPUS,sockets=$NODES,cores=$per_cpu,threads=1"
else
  SMP=$CPUS
fi
OUTSHARE=()
if [ -n "${VM_OUT:-}" ]; then
  mkdir -p "$VM_OUT"
  OUTSHARE=(-virtfs "local,path=$VM_OUT,mount_tag=vmout,security_model=none")
fi

set +e
timeout --foreground -k 5 "$TIMEOUT" qemu-system-x86_64 "${ACC[@]}" -M pc -m "$MEM" -smp "$SMP" "${TOPO[@]}" \
  -kernel "$KERNEL" -initrd "$INITRD" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
  -virtfs "local,path=$SHARE,mount_tag=vmtest,security_model=none" "${OUTSHARE[@]}" \
  -nic none -display none -vga none -monitor none -serial stdio -no-reboot < /dev/null
qemu_rc=$?
set -e
if [ -s "$SHARE/rc" ]; then
  exit "$(cat "$SHARE/rc")"
fi
if [ "$qemu_rc" = 124 ]; then
  echo "vm-run: guest killed after VM_TIMEOUT=${TIMEOUT}s" >&2
else
  echo "vm-run: guest left no exit status (qemu exit $qemu_rc)" >&2
fi
exit 125
