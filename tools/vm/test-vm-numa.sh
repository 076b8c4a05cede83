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

NAME=test-vm-numa
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
VM_ENV="" VM_FILES=""
vm_ship_numatgtd
vm_run_and_check guest-numa.sh VM_NUMA_OK
