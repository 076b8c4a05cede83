#!/bin/bash
# Linux kernel initiator test: boots the QEMU guest (vm-run.sh) and runs guest-iscsi-tcp.sh
# in it against numatgtd started as tgtd is and configured with tgtadm (default), numatgtd
# from a YAML file (TARGET=numatgtd-yaml), or Debian's tgtd (TARGET=tgtd).
# Env: TARGET=numatgtd|numatgtd-yaml|tgtd  NUMATGTD_BIN (default <repo>/target/debug/numatgtd)
#      VM_TIMEOUT (300) and the other vm-run.sh variables.
# Exits with the guest script's status (and non-zero when the success marker is missing).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
export TARGET=${TARGET:-numatgtd}
export VM_TIMEOUT=${VM_TIMEOUT:-300}
[ "$(id -u)" = 0 ] || { echo "test-vm-iscsi-tcp: needs root (9p export of /, iscsid in the guest)" >&2; exit 1; }

NAME="test-vm-iscsi-tcp target=$TARGET"
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
VM_ENV="TARGET"
VM_FILES="$HERE/guest-cd.sh $HERE/guest-tape.sh $HERE/guest-changer.sh $HERE/guest-passthrough.sh"
case "$TARGET" in
  numatgtd*) vm_ship_numatgtd ;;
esac
export VM_ENV VM_FILES
vm_run_and_check guest-iscsi-tcp.sh "VM_ISCSI_TCP_OK target=$TARGET"
