#!/bin/bash
# Builds, once, the disk image of the systemd guest (tools/vm/test-vm-systemd.sh): a Debian
# 12 (bookworm) root filesystem made by mmdebstrap from this host's apt sources, with
# systemd as PID 1, udev, open-iscsi and Debian's tgt, plus everything the numatgt .deb
# depends on, so that `apt install ./numatgt_*.deb` works in the guest, which has no
# network. The host's Debian kernel boots it: its modules are copied in, and a small
# initramfs (busybox, virtio_blk, ext4) mounts the image as / and hands over to systemd.
#
# Output (printed as the last lines, `rootfs: FILE` and `initramfs: FILE`):
#   CACHE/systemd-rootfs-KEY.raw        raw ext4 image, sparse (IMAGE_SIZE)
#   CACHE/systemd-initramfs-KVER.cpio.gz
# KEY hashes the package list, the kernel version and this script: the same inputs give
# the cached image back at once; anything else builds a new one (older images are
# deleted). The test never writes the image: each run boots a qcow2 overlay of it.
#
# Why a raw ext4 image: `mkfs.ext4 -d DIR` fills it from mmdebstrap's directory without a
# loop mount, and QEMU opens a raw file as the read-only backing file of a qcow2 overlay,
# so the cache needs no conversion and stays clean; sparse, it takes the space of its
# files only (about 400 MB).
# Why an initramfs of our own: the Debian kernel has virtio_blk and ext4 as modules, so
# something must load them before / can be mounted. The host's /boot/initrd.img has them
# today (initramfs-tools MODULES=most) but that is the host's configuration to change;
# seven modules and busybox are built here in a second and boot faster under TCG.
#
# Inside the image besides the packages: the host kernel's modules, a fixed machine id (a
# configured system, not a first boot), /etc/fstab, a persistent journal, no getty on the
# serial console, tgt's .deb in /var/local/numatgt-vm (the test removes and installs tgt
# again with no network), and numatgt-vmtest.service, the test's entry point.
#
# Usage: build-rootfs.sh [--deb FILE] [--print-key]
#   --deb FILE     also install the packages FILE's Depends name (first alternative of each)
#   --print-key    print the image that would be used, build nothing
# Env: VM_KVER (newest /boot/vmlinuz-*), VM_CACHE (~/.cache/numatgt-vm),
#      ROOTFS_SOURCES  apt sources for mmdebstrap (default: this host's Debian sources
#                      for bookworm, without backports: the guest is a plain Debian 12)
#      IMAGE_SIZE (4G)
# Needs root (mmdebstrap --mode=root, files owned by the packages' users), mmdebstrap,
# e2fsprogs, busybox-static, kmod, xz-utils/zstd, cpio.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SELF="$HERE/$(basename "$0")"
die() { echo "build-rootfs: $*" >&2; exit 1; }

DEB=
PRINT_KEY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --deb) DEB=${2:?--deb needs a file}; shift 2 ;;
    --print-key) PRINT_KEY=1; shift ;;
    *) die "usage: build-rootfs.sh [--deb FILE] [--print-key]" ;;
  esac
done

KVER=${VM_KVER:-$(ls -1 /boot/vmlinuz-* 2>/dev/null | sed 's#^/boot/vmlinuz-##' | sort -V | tail -n 1)}
[ -n "$KVER" ] && [ -r "/boot/vmlinuz-$KVER" ] && [ -d "/lib/modules/$KVER" ] ||
  die "no readable kernel + modules (/boot/vmlinuz-${KVER:-?}); run tools/install-test-deps.sh"
CACHE=${VM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/numatgt-vm}
IMAGE_SIZE=${IMAGE_SIZE:-4G}

# The guest's packages. systemd-sysv: systemd as /sbin/init; udev: /dev/sdX of the iSCSI
# disks; open-iscsi: the kernel initiator's iscsid/iscsiadm; tgt: Debian's tgtadm,
# tgt-admin and tgt.service (enabled by its postinst, as on a server that has it);
# libcap2-bin: capsh to decode capability masks; dbus: what systemctl and systemd-analyze
# use on a Debian server (they fall back to systemd's private socket without it).
PKGS=(systemd systemd-sysv udev dbus open-iscsi tgt sg3-utils iproute2 kmod procps
  e2fsprogs util-linux libcap2-bin)
if [ -n "$DEB" ]; then
  [ -r "$DEB" ] || die "cannot read $DEB"
  # Depends: "a (>= 1), b | c, ..." -> a b (the first alternative, no version)
  depends=$(dpkg-deb --field "$DEB" Depends | tr -d '\n')
  [ -n "$depends" ] || die "$DEB has no Depends"
  while IFS= read -r dep; do
    dep=$(echo "$dep" | sed 's/|.*//; s/(.*)//; s/:any//; s/[[:space:]]//g')
    [ -n "$dep" ] && PKGS+=("$dep")
  done < <(echo "$depends" | tr ',' '\n')
fi
mapfile -t PKGS < <(printf '%s\n' "${PKGS[@]}" | sort -u)

if [ -n "${ROOTFS_SOURCES:-}" ]; then
  SOURCES=$ROOTFS_SOURCES
else
  # the host's deb822 or one-line sources that name bookworm (not bookworm-backports)
  SOURCES=
  for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    # binary packages (Types: deb, or a `deb ` line; deb-src alone is of no use here)
    grep -Eq '^(Types:.*[[:space:]]deb([[:space:]]|$)|deb[[:space:]])' "$f" || continue
    if grep -Eq '^[^#]*(Suites:.*[[:space:]]|^deb[[:space:]].*[[:space:]])bookworm([[:space:]]|$)' "$f"; then
      SOURCES="$SOURCES $f"
    fi
  done
  SOURCES=${SOURCES# }
  [ -n "$SOURCES" ] || SOURCES=http://deb.debian.org/debian
fi

KEY=$( { printf '%s\n' "${PKGS[@]}"; echo "kernel $KVER"; echo "size $IMAGE_SIZE";
         cat "$SELF"; } | sha256sum | cut -c1-16)
IMG=$CACHE/systemd-rootfs-$KEY.raw
INITRD=$CACHE/systemd-initramfs-$KVER.cpio.gz

make_initramfs() { # the initramfs: busybox, the modules to mount /dev/vda, an /init
  local root mod f n
  [ -x /bin/busybox ] || die "/bin/busybox missing (apt-get install busybox-static)"
  root=$(mktemp -d "$CACHE/initramfs.XXXXXX")
  mkdir -p "$root/bin" "$root/lib/modules" "$root/proc" "$root/sys" "$root/dev" "$root/newroot"
  cp /bin/busybox "$root/bin/busybox"
  mknod -m 600 "$root/dev/console" c 5 1
  # virtio_blk for /dev/vda, ext4 with its dependencies, in modprobe's order; the insmod
  # lines name the files (crc32c-intel may fail on a CPU without SSE4.2: crc32c_generic)
  n=10
  for mod in virtio_blk crc32c_generic ext4; do
    while read -r _ f _; do
      [ -n "$f" ] || continue
      base=$(basename "$f"); base=${base%%.ko*}
      ls "$root/lib/modules/"*"-$base.ko" >/dev/null 2>&1 && continue
      case "$f" in
        *.ko.xz) xz -dc "$f" > "$root/lib/modules/$n-$base.ko" ;;
        *.ko.zst) zstd -qdc "$f" > "$root/lib/modules/$n-$base.ko" ;;
        *.ko) cp "$f" "$root/lib/modules/$n-$base.ko" ;;
      esac
      n=$((n + 1))
    done < <(modprobe -S "$KVER" --show-depends "$mod" | grep '^insmod ')
  done
  cat > "$root/init" <<'INIT'
#!/bin/busybox sh
# numatgt systemd guest: load the disk and ext4 modules, mount root= (default /dev/vda)
# read-write and hand over to systemd (/sbin/init) on it.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
die() { echo "numatgt-initramfs: $*"; poweroff -f; }
for m in /lib/modules/*.ko; do insmod "$m" 2>/dev/null; done
root=/dev/vda
for arg in $(cat /proc/cmdline); do
  case "$arg" in root=/dev/*) root=${arg#root=} ;; esac
done
i=0
until [ -b "$root" ]; do
  i=$((i + 1)); [ $i -le 100 ] || die "no $root"; sleep 0.1
done
mount -t ext4 -o rw "$root" /newroot || die "cannot mount $root"
[ -L /newroot/sbin/init ] || [ -x /newroot/sbin/init ] || die "no /sbin/init on $root"
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /sbin/init
INIT
  chmod 0755 "$root/init"
  (cd "$root" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) > "$INITRD.tmp.$$"
  mv "$INITRD.tmp.$$" "$INITRD"
  rm -rf "$root"
}

if [ "$PRINT_KEY" = 1 ]; then
  echo "packages: ${PKGS[*]}"
  echo "sources: $SOURCES"
  echo "rootfs: $IMG"
  echo "initramfs: $INITRD"
  exit 0
fi
[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap --mode=root)"
mkdir -p "$CACHE"
exec 9> "$CACHE/systemd-rootfs.lock"
flock 9

if [ ! -s "$INITRD" ] || [ "$SELF" -nt "$INITRD" ]; then
  make_initramfs
fi

if [ -s "$IMG" ]; then
  echo "build-rootfs: cached ($KEY: ${PKGS[*]})"
else
  command -v mmdebstrap >/dev/null || die "mmdebstrap missing (apt-get install mmdebstrap)"
  t0=$(date +%s)
  # a directory apt's _apt user can enter (it downloads as _apt)
  DIR=$(mktemp -d "${TMPDIR:-/var/tmp}/numatgt-rootfs.XXXXXX")
  chmod 0755 "$DIR"
  trap 'rm -rf "$DIR" "$IMG.tmp"' EXIT
  echo "build-rootfs: mmdebstrap bookworm (${PKGS[*]}) from $SOURCES"
  # shellcheck disable=SC2086  # SOURCES is a list of files or URLs
  mmdebstrap --mode=root --variant=minbase --format=directory \
    --include="$(IFS=,; echo "${PKGS[*]}")" \
    --aptopt='Acquire::Languages "none"' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --customize-hook='mkdir -p "$1/var/local/numatgt-vm" && { cp "$1"/var/cache/apt/archives/tgt_*.deb "$1/var/local/numatgt-vm/" 2>/dev/null || chroot "$1" sh -c "cd /var/local/numatgt-vm && apt-get download tgt"; }' \
    bookworm "$DIR" $SOURCES
  ls "$DIR"/var/local/numatgt-vm/tgt_*.deb >/dev/null || die "tgt's .deb was not kept"

  # the host kernel's modules (iscsi_tcp, virtio, 9p, ext4, sd_mod...)
  mkdir -p "$DIR/usr/lib/modules"
  cp -a "/lib/modules/$KVER" "$DIR/usr/lib/modules/"
  depmod -b "$DIR" "$KVER"

  # a configured, not a first, boot: fixed machine id (no systemd-firstboot questions,
  # no ConditionFirstBoot units), host name, fstab, persistent journal
  tr -d '-' < /proc/sys/kernel/random/uuid > "$DIR/etc/machine-id"
  echo numatgt-systemd > "$DIR/etc/hostname"
  printf '127.0.0.1 localhost\n127.0.1.1 numatgt-systemd\n::1 localhost ip6-localhost ip6-loopback\n' > "$DIR/etc/hosts"
  echo '/dev/vda / ext4 rw,errors=remount-ro 0 1' > "$DIR/etc/fstab"
  mkdir -p "$DIR/var/log/journal"
  # the serial console carries the test's output: no login prompt on it
  ln -sf /dev/null "$DIR/etc/systemd/system/serial-getty@ttyS0.service"
  ln -sf /dev/null "$DIR/etc/systemd/system/getty@tty1.service"
  # the test's entry point: started when the kernel command line says
  # systemd.wants=numatgt-vmtest.service; runs the script the host shares over 9p
  cat > "$DIR/etc/systemd/system/numatgt-vmtest.service" <<'UNIT'
[Unit]
Description=numatgt guest test (the host's script on the 9p share vmtest)
After=multi-user.target

[Service]
Type=exec
ExecStartPre=/bin/sh -c 'modprobe -a 9pnet_virtio 9p; mkdir -p /vmtest; mountpoint -q /vmtest || mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 vmtest /vmtest'
ExecStart=/bin/sh /vmtest/boot
StandardInput=null
StandardOutput=tty
StandardError=inherit
TTYPath=/dev/ttyS0
TTYReset=no
TTYVHangup=no
UNIT
  rm -f "$IMG.tmp"
  truncate -s "$IMAGE_SIZE" "$IMG.tmp"
  mkfs.ext4 -q -F -L numatgt-root -d "$DIR" "$IMG.tmp"
  e2fsck -fn "$IMG.tmp" >/dev/null 2>&1 || die "e2fsck of the new image failed"
  mv "$IMG.tmp" "$IMG"
  printf '%s\n' "${PKGS[@]}" > "$IMG.packages"
  rm -rf "$DIR"
  trap - EXIT
  # keep one image: the older ones take a gigabyte each
  for old in "$CACHE"/systemd-rootfs-*.raw; do
    [ "$old" = "$IMG" ] || rm -f "$old" "$old.packages"
  done
  echo "build-rootfs: built $IMG in $(( $(date +%s) - t0 ))s ($(du -h "$IMG" | cut -f1) used of $IMAGE_SIZE)"
fi
echo "rootfs: $IMG"
echo "initramfs: $INITRD"
