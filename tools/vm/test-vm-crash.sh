#!/bin/bash
# Crash consistency through the Linux kernel initiator (issue 15): boots the QEMU guest
# (vm-run.sh) and runs guest-crash.sh in it: numatgtd (started as tgtd, LUN from tgtadm,
# WCE=1) is SIGKILLed during fsync'ed ext4 writes, restarted on the same file, and every
# file whose fsync returned must be there with its checksum; e2fsck -fn clean after the
# journal replay. 4 rounds with random kill delays.
# Env: NUMATGTD_BIN (default <repo>/target/debug/numatgtd)
#      CRASH_ROUNDS (4), CRASH_DELAYS (ms per round, from its first fsync'ed file; default
#      random 100-3000)
#      VM_TIMEOUT (300) and the other vm-run.sh variables; VM_OUT=DIR keeps the daemon log.
# Exits with the guest script's status (and non-zero when the success marker is missing).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
export VM_TIMEOUT=${VM_TIMEOUT:-300}
[ "$(id -u)" = 0 ] || { echo "test-vm-crash: needs root (9p export of /, iscsid in the guest)" >&2; exit 1; }

NAME=test-vm-crash
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
VM_ENV="CRASH_ROUNDS CRASH_DELAYS" VM_FILES=""
vm_ship_numatgtd
vm_run_and_check guest-crash.sh "VM_CRASH_OK rounds="
