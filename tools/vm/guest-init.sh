#!/bin/busybox sh
# /init of the test initramfs. Mounts the host's root filesystem (virtio-9p, read-only) under
# a RAM-backed overlay so the guest can write anywhere, then switch_roots into it and runs
# stage 2 (guest-stage2.sh) as PID 1.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
die() { echo "numatgt-vm: $*"; poweroff -f; }
for mod in netfs 9pnet 9pnet_virtio 9p overlay; do
  if [ -f "/lib/modules/$mod.ko" ]; then insmod "/lib/modules/$mod.ko" || die "insmod $mod failed"; fi
done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /lower \
  || die "cannot mount the host root over 9p"
mount -t tmpfs -o mode=0755,size=80% rw /rw || die "tmpfs for the overlay"
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot \
  || die "overlay mount failed"
mkdir -p /newroot/.numatgt-vm
cp /stage2 /newroot/.numatgt-vm/stage2
umount /proc
umount /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /bin/sh /.numatgt-vm/stage2
