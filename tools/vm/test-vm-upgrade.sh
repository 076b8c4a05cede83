#!/bin/bash
# Live upgrade through the Linux kernel initiator (issue 29): boots the QEMU guest
# (vm-run.sh) and runs guest-upgrade.sh in it: numatgtd (started as tgtd, LUN from tgtadm)
# is upgraded three times, alternating two builds, while fio writes and verifies on ext4
# at QD8; fio must see no error and no mismatch, the kernel's session stays, e2fsck clean.
# Env: NUMATGTD_BIN (default <repo>/target/debug/numatgtd) and NUMATGTD_BIN_B (default
#      <repo>/target/release/numatgtd, built when missing): the two builds
#      UPGRADES (3), FIO_SECS (40), SHMEM_ADVISE (1: the guest's shmem_enabled set to
#      advise, so the cache's memory goes along; 0: left alone, read back); VM_TIMEOUT
#      (300) and the other vm-run.sh variables;
#      VM_OUT=DIR keeps the daemon log.
# Exits with the guest script's status (and non-zero when the success marker is missing).
set -euo pipefail
if [ "${SKIP_VM:-0}" = 1 ]; then
  echo "SKIP_VM=1: test-vm-upgrade not run (counted as failed)"
  exit 1
fi
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
export VM_TIMEOUT=${VM_TIMEOUT:-300}
[ "$(id -u)" = 0 ] || { echo "test-vm-upgrade: needs root (9p export of /, iscsid in the guest)" >&2; exit 1; }

NAME=test-vm-upgrade
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
B=${NUMATGTD_BIN_B:-${CARGO_TARGET_DIR:-$REPO/target}/release/numatgtd}
if [ ! -x "$B" ]; then
  echo "$NAME: building the second build ($B): cargo build --release -p target-server"
  (cd "$REPO" && cargo build --release -p target-server --bin numatgtd)
fi
B=$(readlink -f "$B")
case "$B" in
  /tmp/*) echo "$NAME: $B: the guest cannot see /tmp of the host" >&2; exit 1 ;;
esac
export NUMATGTD_B=$B
VM_ENV="UPGRADES FIO_SECS NUMATGTD_B SHMEM_ADVISE" VM_FILES=""
vm_ship_numatgtd
vm_run_and_check guest-upgrade.sh "VM_UPGRADE_OK upgrades="
