#!/bin/sh
# PID 1 of the test guest, on the overlay root (the host's userspace, writable in RAM).
# Sets up the usual pseudo filesystems, mounts the per-run share from the host (/vmtest:
# script, env, files; /vmtest/out when VM_OUT is given), runs /vmtest/script, stores its exit
# status in /vmtest/rc and powers the guest off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/lock /var/tmp
mount -t configfs configfs /sys/kernel/config 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
hostname numatgt-vm
ip link set lo up
# no udevd here: load the SCSI disk driver by hand so iSCSI LUNs become /dev/sdX
modprobe -a sd_mod sg 2>/dev/null
# open-iscsi state private to this guest (never the host's records)
rm -rf /etc/iscsi/nodes /etc/iscsi/send_targets /etc/iscsi/ifaces /var/lib/iscsi 2>/dev/null
mkdir -p /etc/iscsi /var/lib/iscsi
echo "InitiatorName=$(iscsi-iname -p iqn.2026-11.org.numatgt.vm)" > /etc/iscsi/initiatorname.iscsi
mkdir -p /vmtest
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 vmtest /vmtest
if mkdir -p /vmtest/out && ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 vmout /vmtest/out 2>/dev/null; then
  rmdir /vmtest/out 2>/dev/null
fi
cd "$(cat /vmtest/cwd 2>/dev/null || echo /)" 2>/dev/null || cd /
echo "numatgt-vm: guest up after $(cut -d' ' -f1 /proc/uptime)s; running the test script"
( [ -f /vmtest/env ] && . /vmtest/env; exec sh /vmtest/script ) > /dev/console 2>&1 < /dev/null
rc=$?
echo "$rc" > /vmtest/rc
sync
echo "numatgt-vm: script exit status $rc after $(cut -d' ' -f1 /proc/uptime)s"
echo 1 > /proc/sys/kernel/sysrq
echo o > /proc/sysrq-trigger
sleep 10
