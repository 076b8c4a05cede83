#!/bin/bash
# The rdma crate's verbs, end to end over soft-RoCE: boots the QEMU guest (vm-run.sh) and runs
# guest-rdma-echo.sh in it (rdma_rxe on a guest-local dummy netdev, the rdma_echo example as
# server and client: CM private data, Send, RDMA READ/WRITE, verified bytes). The example is
# built here, on the host (cargo build -p rdma --example rdma_echo); the guest builds nothing.
# Env: RDMA_ECHO_BIN (default: build it and use <target dir>/debug/examples/rdma_echo)
#      VM_TIMEOUT (240) and the other vm-run.sh variables.
# Exits with the guest script's status (and non-zero when the success marker is missing).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
export VM_TIMEOUT=${VM_TIMEOUT:-240}
[ "$(id -u)" = 0 ] || { echo "test-vm-rdma-echo: needs root (9p export of /)" >&2; exit 1; }
# the guest runs the host's userspace: the example needs the rxe verbs provider
if ! ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-*.so >/dev/null 2>&1; then
  echo "test-vm-rdma-echo: no rxe verbs provider (ibverbs-providers): run tools/install-test-deps.sh" >&2
  exit 1
fi

NAME=test-vm-rdma-echo
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
if [ -z "${RDMA_ECHO_BIN:-}" ]; then
  (cd "$REPO" && cargo build -p rdma --example rdma_echo)
  TDIR=$(cd "$REPO" && cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
  RDMA_ECHO_BIN=$TDIR/debug/examples/rdma_echo
fi
bin=$(readlink -f "$RDMA_ECHO_BIN")
[ -x "$bin" ] || { echo "$NAME: $bin missing" >&2; exit 1; }
VM_FILES=""
case "$bin" in
  /tmp/*) VM_FILES="$bin"; export RDMA_ECHO=/vmtest/$(basename "$bin") ;;
  *) export RDMA_ECHO=$bin ;;
esac
VM_ENV="RDMA_ECHO"
export VM_ENV VM_FILES
vm_run_and_check guest-rdma-echo.sh VM_RDMA_ECHO_OK
