#!/bin/bash
# The Debian package under a real systemd (issue 28): boots a Debian 12 guest whose PID 1
# is systemd (image: tools/vm/systemd/build-rootfs.sh, built once and cached), installs
# the numatgt .deb in it and runs guest-systemd.sh there: apt install offline beside an
# enabled tgt.service, the switch to numatgtd (Type=notify), systemd-analyze security,
# the service user and its two capabilities, Debian's tgtadm and tgt-admin -e, the kernel
# initiator writing and verifying, systemctl reload with a good and a bad configuration,
# the journal, a reboot that brings the saved configuration back and the initiator's
# sessions with it, apt remove, and Debian's tgt installed after numatgt and numatgtd
# started beside it (one daemon on port 3260 every time, no failed start on the way).
# About 3.5 minutes here (two boots under TCG), plus about a minute when the image is
# built.
#
# The guest boots this host's Debian kernel under QEMU (TCG, no network card) from a
# qcow2 overlay of the cached image, made for this run and deleted after it: the cache
# stays clean. The .deb and the guest script reach the guest over a 9p share; the image's
# numatgt-vmtest.service runs the script (kernel command line
# systemd.wants=numatgt-vmtest.service), which prints on the serial console. Two boots
# of the same overlay: the guest ends boot 1 with `systemctl reboot` (QEMU runs with
# -no-reboot, so it exits there) and the host starts it again; the script knows its phase
# from a file on the guest's disk.
#
# Usage: test-vm-systemd.sh
# Env: NUMATGT_DEB      the package (default: the newest target/debian/numatgt_*.deb;
#                       none: tools/build-deb.sh builds it)
#      VM_BOOT_TIMEOUT  seconds each boot may take before QEMU is killed (300)
#      VM_MEM (2048 MiB)  VM_CPUS (2)  VM_KVER (newest /boot/vmlinuz-*)
#      VM_CACHE         the image cache (~/.cache/numatgt-vm)
#      VM_OUT=DIR       keep the serial logs and the guest's journals there
#      SKIP_VM=1        do nothing and fail (as tools/test-all.sh's other VM stages)
# Exits 0 when every check passed; the guest's failure count otherwise (125: no result).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
NAME=test-vm-systemd
if [ "${SKIP_VM:-0}" = 1 ]; then
  echo "SKIP_VM=1: $NAME not run (counted as failed)"
  exit 1
fi
[ "$(id -u)" = 0 ] || { echo "$NAME: needs root (mmdebstrap, the image's owners)" >&2; exit 1; }
command -v qemu-system-x86_64 >/dev/null && command -v qemu-img >/dev/null ||
  { echo "$NAME: qemu-system-x86_64/qemu-img missing (tools/install-test-deps.sh)" >&2; exit 2; }
BOOT_TIMEOUT=${VM_BOOT_TIMEOUT:-300}
MEM=${VM_MEM:-2048}
CPUS=${VM_CPUS:-2}
KVER=${VM_KVER:-$(ls -1 /boot/vmlinuz-* 2>/dev/null | sed 's#^/boot/vmlinuz-##' | sort -V | tail -n 1)}
export VM_KVER=$KVER
T0=$(date +%s)

DEB=${NUMATGT_DEB:-$(ls -t "${CARGO_TARGET_DIR:-$REPO/target}"/debian/numatgt_*.deb 2>/dev/null | head -n 1 || true)}
if [ -z "$DEB" ]; then
  echo "$NAME: no package yet: tools/build-deb.sh"
  "$REPO/tools/build-deb.sh"
  DEB=$(ls -t "${CARGO_TARGET_DIR:-$REPO/target}"/debian/numatgt_*.deb | head -n 1)
fi
[ -r "$DEB" ] || { echo "$NAME: cannot read $DEB" >&2; exit 2; }
echo "$NAME: package $DEB ($(dpkg-deb --field "$DEB" Version))"

RUN=$(mktemp -d "${TMPDIR:-/tmp}/numatgt-vm-systemd.XXXXXX")
cleanup() {
  if [ -n "${VM_OUT:-}" ]; then
    mkdir -p "$VM_OUT"
    cp "$RUN"/serial-boot*.log "$RUN"/share/journal-boot*.txt "$VM_OUT/" 2>/dev/null || true
  fi
  rm -rf "$RUN"
}
trap cleanup EXIT

t=$(date +%s)
if ! "$HERE/systemd/build-rootfs.sh" --deb "$DEB" | tee "$RUN/rootfs.out"; then
  echo "$NAME: build-rootfs.sh failed" >&2
  exit 2
fi
IMG=$(sed -n 's/^rootfs: //p' "$RUN/rootfs.out")
INITRD=$(sed -n 's/^initramfs: //p' "$RUN/rootfs.out")
[ -s "$IMG" ] && [ -s "$INITRD" ] || { echo "$NAME: build-rootfs.sh gave no image" >&2; exit 2; }
T_ROOTFS=$(( $(date +%s) - t ))

qemu-img create -q -f qcow2 -F raw -b "$IMG" "$RUN/disk.qcow2"
SHARE=$RUN/share
mkdir -p "$SHARE"
chmod 0755 "$RUN" "$SHARE"
cp "$HERE/guest-systemd.sh" "$SHARE/boot"
cp "$HERE/guest-lib.sh" "$SHARE/guest-lib.sh"
cp "$DEB" "$SHARE/"

APPEND="console=ttyS0 root=/dev/vda rw quiet loglevel=3 panic=-1 systemd.show_status=error"
APPEND="$APPEND systemd.firstboot=off systemd.wants=numatgt-vmtest.service"

boot() { # N: one boot of the overlay; its serial output goes to serial-bootN.log and stdout
  local n=$1 rc t
  t=$(date +%s)
  echo "$NAME: boot $n (timeout ${BOOT_TIMEOUT}s)"
  set +e
  timeout --foreground -k 5 "$BOOT_TIMEOUT" qemu-system-x86_64 \
    -accel tcg,thread=multi,tb-size=512 -cpu max -M pc -m "$MEM" -smp "$CPUS" \
    -kernel "/boot/vmlinuz-$KVER" -initrd "$INITRD" -append "$APPEND" \
    -drive "file=$RUN/disk.qcow2,if=virtio,format=qcow2,cache=unsafe" \
    -virtfs "local,path=$SHARE,mount_tag=vmtest,security_model=none" \
    -device virtio-rng-pci -nic none -display none -vga none -monitor none \
    -serial stdio -no-reboot < /dev/null 2>&1 | tee "$RUN/serial-boot$n.log"
  rc=${PIPESTATUS[0]}
  set -e
  BOOT_SECS[$n]=$(( $(date +%s) - t ))
  echo "$NAME: boot $n ended after ${BOOT_SECS[$n]}s (qemu exit $rc)"
  [ "$rc" != 124 ] || echo "$NAME: boot $n killed after VM_BOOT_TIMEOUT=${BOOT_TIMEOUT}s" >&2
}

declare -a BOOT_SECS
result() { # RC: the summary line, and exit
  echo "$NAME: rootfs ${T_ROOTFS}s, boot 1 ${BOOT_SECS[1]:-0}s, boot 2 ${BOOT_SECS[2]:-0}s, total $(( $(date +%s) - T0 ))s"
  echo "$NAME: $(cat "$RUN"/serial-boot*.log | grep -c '^CHECK PASS') checks passed," \
    "$(cat "$RUN"/serial-boot*.log | grep -c '^CHECK FAIL') failed"
  echo "$NAME: rc=$1"
  exit "$1"
}

boot 1
if ! grep -q '^VM_SYSTEMD_PHASE1_DONE' "$RUN/serial-boot1.log"; then
  echo "$NAME: boot 1 did not finish (no VM_SYSTEMD_PHASE1_DONE)" >&2
  if [ -s "$SHARE/rc" ]; then result "$(cat "$SHARE/rc")"; fi
  result 125
fi
boot 2
if [ -s "$SHARE/rc" ] && grep -q '^VM_SYSTEMD_\(OK\|FAIL\)' "$RUN/serial-boot2.log"; then
  rc=$(cat "$SHARE/rc")
  if [ "$rc" = 0 ] && ! grep -q '^VM_SYSTEMD_OK' "$RUN/serial-boot2.log"; then rc=1; fi
  result "$rc"
fi
echo "$NAME: boot 2 left no result" >&2
result 125
