#!/bin/sh
# Builds the test initramfs for kernel KVER: busybox-static, the 9p/overlay modules (unpacked
# from .ko.xz/.ko.zst when compressed), guest-init.sh as /init and guest-stage2.sh as /stage2.
# Usage: mkinitramfs.sh KVER OUT.cpio.gz
set -eu
KVER=${1:?usage: mkinitramfs.sh KVER OUT.cpio.gz}
OUT=${2:?usage: mkinitramfs.sh KVER OUT.cpio.gz}
HERE=$(cd "$(dirname "$0")" && pwd)
[ -x /bin/busybox ] || { echo "mkinitramfs: /bin/busybox missing (apt-get install busybox-static)" >&2; exit 2; }
ROOT=$(mktemp -d)
trap 'rm -rf "$ROOT"' EXIT
mkdir -p "$ROOT/bin" "$ROOT/lib/modules" "$ROOT/proc" "$ROOT/sys" "$ROOT/dev" \
  "$ROOT/lower" "$ROOT/rw" "$ROOT/newroot"
cp /bin/busybox "$ROOT/bin/busybox"
for mod in netfs 9pnet 9pnet_virtio 9p overlay; do
  f=$(modinfo -k "$KVER" -n "$mod")
  case "$f" in
    "(builtin)"|"") ;;
    *.ko.xz)  xz -dc "$f" > "$ROOT/lib/modules/$mod.ko" ;;
    *.ko.zst) zstd -qdc "$f" > "$ROOT/lib/modules/$mod.ko" ;;
    *)        cp "$f" "$ROOT/lib/modules/$mod.ko" ;;
  esac
done
cp "$HERE/guest-init.sh" "$ROOT/init"
cp "$HERE/guest-stage2.sh" "$ROOT/stage2"
chmod 0755 "$ROOT/init" "$ROOT/stage2"
TMPOUT="$OUT.tmp.$$"
(cd "$ROOT" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) > "$TMPOUT"
mv "$TMPOUT" "$OUT"
