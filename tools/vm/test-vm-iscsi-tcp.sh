#!/bin/bash
# Linux kernel initiator test: boots the QEMU guest (vm-run.sh) and runs guest-iscsi-tcp.sh
# in it against numatgtd (default) or Debian's tgtd (TARGET=tgtd).
# Env: TARGET=numatgtd|tgtd  NUMATGTD_BIN (default <repo>/target/debug/numatgtd)
#      VM_TIMEOUT (300) and the other vm-run.sh variables.
# Exits with the guest script's status (and non-zero when the success marker is missing).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
export TARGET=${TARGET:-numatgtd}
export VM_TIMEOUT=${VM_TIMEOUT:-300}
[ "$(id -u)" = 0 ] || { echo "test-vm-iscsi-tcp: needs root (9p export of /, iscsid in the guest)" >&2; exit 1; }

VM_ENV="TARGET"
VM_FILES=""
if [ "$TARGET" = numatgtd ]; then
  BIN=${NUMATGTD_BIN:-$REPO/target/debug/numatgtd}
  BIN=$(readlink -f "$BIN")
  [ -x "$BIN" ] || { echo "test-vm-iscsi-tcp: $BIN missing: cargo build --workspace first" >&2; exit 1; }
  case "$BIN" in
    # the guest mounts its own /tmp, hiding the host's: ship the binary in the run share
    /tmp/*) VM_FILES="$BIN"; export NUMATGTD=/vmtest/$(basename "$BIN") ;;
    *) export NUMATGTD=$BIN ;;
  esac
  VM_ENV="$VM_ENV NUMATGTD"
fi
export VM_ENV VM_FILES

LOG=$(mktemp "${TMPDIR:-/tmp}/numatgt-vm-log.XXXXXX")
trap 'rm -f "$LOG"' EXIT
start=$(date +%s)
set +e
"$HERE/vm-run.sh" "$HERE/guest-iscsi-tcp.sh" 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
set -e
took=$(( $(date +%s) - start ))
if [ "$rc" = 0 ] && ! grep -q "VM_ISCSI_TCP_OK target=$TARGET" "$LOG"; then
  echo "test-vm-iscsi-tcp: guest exited 0 but printed no success marker" >&2
  rc=1
fi
echo "test-vm-iscsi-tcp: target=$TARGET rc=$rc in ${took}s"
exit "$rc"
