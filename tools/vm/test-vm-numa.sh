#!/bin/bash
# NUMA block cache test on a real two-node kernel: boots the QEMU guest (vm-run.sh, 2 vCPUs,
# 2 NUMA nodes) and runs guest-numa.sh in it: numatgtd must see 2 real nodes, its cache arenas
# must be bound to their nodes (placement_local >= 0.99 by move_pages) and a cached sequential
# read through the kernel initiator must be served >= 90% from local memory (issue 3's proof).
# Env: NUMATGTD_BIN (default <repo>/target/debug/numatgtd)
#      VM_TIMEOUT (300) and the other vm-run.sh variables (VM_NODES must stay 2).
#      VM_OUT=DIR keeps the daemon log (numatgtd-numa.log) on the host.
# Exits with the guest script's status (and non-zero when the success marker is missing).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
export VM_TIMEOUT=${VM_TIMEOUT:-300}
export VM_NODES=${VM_NODES:-2}
export VM_CPUS=${VM_CPUS:-2}
[ "$(id -u)" = 0 ] || { echo "test-vm-numa: needs root (9p export of /, iscsid in the guest)" >&2; exit 1; }

BIN=${NUMATGTD_BIN:-$REPO/target/debug/numatgtd}
BIN=$(readlink -f "$BIN")
[ -x "$BIN" ] || { echo "test-vm-numa: $BIN missing: cargo build --workspace first" >&2; exit 1; }
VM_FILES=""
case "$BIN" in
  # the guest mounts its own /tmp, hiding the host's: ship the binary in the run share
  /tmp/*) VM_FILES="$BIN"; export NUMATGTD=/vmtest/$(basename "$BIN") ;;
  *) export NUMATGTD=$BIN ;;
esac
export VM_ENV="NUMATGTD" VM_FILES

LOG=$(mktemp "${TMPDIR:-/tmp}/numatgt-vm-log.XXXXXX")
trap 'rm -f "$LOG"' EXIT
start=$(date +%s)
set +e
"$HERE/vm-run.sh" "$HERE/guest-numa.sh" 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
set -e
took=$(( $(date +%s) - start ))
if [ "$rc" = 0 ] && ! grep -q "VM_NUMA_OK" "$LOG"; then
  echo "test-vm-numa: guest exited 0 but printed no success marker" >&2
  rc=1
fi
echo "test-vm-numa: rc=$rc in ${took}s"
exit "$rc"
