#!/bin/bash
# ALUA + dm-multipath through the Linux kernel initiator (issue 16): boots the QEMU guest
# (vm-run.sh) and runs guest-multipath.sh in it: two numatgtd gateways (ALUA groups 1 and 2,
# active-non-optimized peers) export one LUN from one backing file, open-iscsi logs in to both,
# multipathd (prio alua, group_by_prio) builds the map; the owning gateway is SIGKILLed during
# fsync'ed ext4 writes, which must go on through the other one; gateway 1 comes back and the
# map fails back; every acknowledged file is checked and e2fsck -fn must be clean.
# Env: NUMATGTD_BIN (default <repo>/target/debug/numatgtd)
#      MPATH_REPLACEMENT (5), MPATH_BEFORE (4), MPATH_AFTER (4), MPATH_FAILBACK (1),
#      MPATH_MODE (ano; standby: the owner dies, an admin moves ownership), MPATH_ADMIN (3):
#      see guest-multipath.sh
#      MPATH_BACKEND (file; rbd: an RBD image on a mini Ceph cluster started inside the guest
#      with tools/ceph/up.sh, explicit ALUA with gateway 2 standby; after the kill the kernel
#      activates gateway 2's group with STPG, gateway 2 fences the dead owner and takes the
#      LUN over; then guest-rbd-thin.sh: GET LBA STATUS of a thin RBD LUN, by sg_get_lba_status,
#      against rbd diff, before and after a blkdiscard; VM_MEM defaults to 3072 and VM_TIMEOUT
#      to 420 then), OSD_BYTES (the memstore size, up.sh's 1 GiB)
#      VM_TIMEOUT (240) and the other vm-run.sh variables; VM_OUT=DIR keeps the daemon logs.
# Exits with the guest script's status (and non-zero when the success marker is missing).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BACKEND=${MPATH_BACKEND:-file}
# rbd: Ceph alone takes 70-100 s to come up in a TCG guest
if [ "$BACKEND" = rbd ]; then export VM_TIMEOUT=${VM_TIMEOUT:-420}; else export VM_TIMEOUT=${VM_TIMEOUT:-240}; fi
[ "$(id -u)" = 0 ] || { echo "test-vm-multipath: needs root (9p export of /, iscsid in the guest)" >&2; exit 1; }
for t in multipath multipathd; do
  command -v "$t" >/dev/null || { echo "test-vm-multipath: $t missing (tools/install-test-deps.sh installs multipath-tools)" >&2; exit 1; }
done

NAME=test-vm-multipath
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
VM_ENV="MPATH_REPLACEMENT MPATH_BEFORE MPATH_AFTER MPATH_FAILBACK MPATH_MODE MPATH_ADMIN MPATH_BACKEND OSD_BYTES" VM_FILES=""
if [ "$BACKEND" = rbd ]; then
  for t in ceph-mon ceph-osd ceph rbd sg_rtpg curl tgtadm sg_get_lba_status blkdiscard sg_persist sg_raw; do
    command -v "$t" >/dev/null || { echo "test-vm-multipath: $t missing (tools/install-test-deps.sh)" >&2; exit 1; }
  done
  # the Ceph cluster runs in the guest's RAM (memstore) beside two gateways' caches
  export VM_MEM=${VM_MEM:-3072}
  VM_FILES="$REPO/tools/ceph/up.sh $REPO/tools/ceph/down.sh $HERE/guest-rbd-thin.sh $HERE/guest-pr-shared.sh $HERE/guest-ship.sh"
fi
vm_ship_numatgtd
if [ "$BACKEND" = rbd ] && [ "${MPATH_MODE:-}" = ship ]; then
  vm_run_and_check guest-multipath.sh "VM_MPATH_OK mode=ship backend=rbd ship=sent:"
elif [ "$BACKEND" = rbd ]; then
  vm_run_and_check guest-multipath.sh "VM_MPATH_OK mode=stpg backend=rbd pr_shared=register,reserve,conflict,preempt,clear lba_status=rbd_diff("
else
  vm_run_and_check guest-multipath.sh "VM_MPATH_OK mode="
fi
