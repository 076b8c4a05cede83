#!/bin/bash
# iSER test with the Linux kernel initiator: boots the QEMU guest (vm-run.sh) and runs
# guest-iser.sh in it: soft-RoCE (rdma_rxe) on a guest-local dummy netdev, the target serving
# iSER and TCP, open-iscsi with an iser iface (login, mkfs.ext4, 64 MiB write + verify), the
# same bytes over TCP and iSER, (numatgtd) a live upgrade under iSER I/O (the session asked
# to log out, logging in again to the new executable, no I/O error), a session killed
# mid-I/O then a fresh login, and (numatgtd)
# `rdma link delete` under iSER reads finishing within 10 s while TCP reads go on; prints one
# ISER_PERF line (O_DIRECT read MB/s under TCG, for ratios between targets only).
# TARGET=numatgtd (default) starts numatgtd as tgtd is, with --iser portal=IP:3260, configured
# by tgtadm --lld iser; TARGET=tgtd runs Debian's tgtd, the baseline peer.
# Env: TARGET=numatgtd|tgtd  NUMATGTD_BIN (default <repo>/target/debug/numatgtd)
#      SAME_TARGET (see guest-iser.sh)
#      ISER_LIBISCSI=0: leave out the libiscsi step (fast runs); ISER_SCALE=0: leave out the
#      many-sessions step; ISER_SCALE_NS ("1 8 32") sessions at once, ISER_STORM_ROUNDS (10),
#      ISER_MAX_CONN_KIB: bound on the registered KiB per connection at the largest N;
#      ISER_MPATH=0: leave out the dm-multipath step over two iSER portals (MP_MB, MP_IP2)
#      ISER_UPGRADE=0: leave out the live upgrade under iSER I/O (numatgtadm beside numatgtd)
#      LIBISCSI_MEASURE=1: print libiscsi's iscsi-test-cu counts over iser:// without
#      checking them against guest-iser-libiscsi.sh's table; LIBISCSI_VS_LIO=1: the same
#      libiscsi WRITEs to LIO too, for the record
#      VM_TIMEOUT (1080: the whole script takes 10-12 min under TCG on a slow 2-core host)
#      and the other vm-run.sh variables; VM_OUT=DIR keeps the target log.
# Exits with the guest script's status (and non-zero when the success marker is missing).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
export TARGET=${TARGET:-numatgtd}
export VM_TIMEOUT=${VM_TIMEOUT:-1080}
[ "$(id -u)" = 0 ] || { echo "test-vm-iser: needs root (9p export of /, iscsid in the guest)" >&2; exit 1; }
# the guest runs the host's userspace: tgtd/numatgtd need the rxe verbs provider
if ! ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-*.so >/dev/null 2>&1; then
  echo "test-vm-iser: no rxe verbs provider (ibverbs-providers): run tools/install-test-deps.sh" >&2
  exit 1
fi

NAME="test-vm-iser target=$TARGET"
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
VM_ENV="TARGET SAME_TARGET"
VM_FILES=""
case "$TARGET" in
  numatgtd)
    vm_ship_numatgtd
    # the misbehaving iSER initiator (tools/src/iser_hostile.rs), built here
    HOSTILE=${ISER_HOSTILE_BIN:-$(dirname "$NUMATGTD")/iser-hostile}
    if [ ! -x "$HOSTILE" ]; then
      (cd "$REPO" && cargo build -q -p tools --bin iser-hostile)
      HOSTILE=$REPO/target/debug/iser-hostile
    fi
    case "$HOSTILE" in
      /tmp/*) VM_FILES="$VM_FILES $HOSTILE"; export ISER_HOSTILE=/vmtest/$(basename "$HOSTILE") ;;
      *) export ISER_HOSTILE=$HOSTILE ;;
    esac
    VM_ENV="$VM_ENV ISER_HOSTILE LIBISCSI_MEASURE LIBISCSI_VS_LIO ISER_LIBISCSI ISER_UPGRADE"
    VM_ENV="$VM_ENV ISER_SCALE ISER_SCALE_NS ISER_STORM_ROUNDS ISER_MAX_CONN_KIB ISER_MPATH MP_MB MP_IP2"
    # the libiscsi, many-sessions, multipath and durable-writes steps, sourced by guest-iser.sh
    VM_FILES="$VM_FILES $HERE/guest-iser-libiscsi.sh $HERE/guest-iser-scale.sh $HERE/guest-iser-mpath.sh"
    VM_FILES="$VM_FILES $HERE/guest-iser-durable.sh"
    ;;
  tgtd) ;;
  *) echo "$NAME: TARGET must be numatgtd or tgtd" >&2; exit 2 ;;
esac
export VM_ENV VM_FILES
vm_run_and_check guest-iser.sh "VM_ISER_OK target=$TARGET"
