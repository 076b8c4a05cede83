#!/bin/bash
# The long soak of issue 15: 32 qemu-io sessions of verified random I/O against numatgtd for
# SECONDS (default 600), then every byte of the LUN compared with the model, RSS and
# descriptors checked flat (tests/tests/soak.rs; CI runs the same test for 60 s).
#   tools/soak.sh [SECONDS]
# Builds the debug numatgtd first (or uses NUMATGTD_BIN). Needs qemu-io with the libiscsi
# driver (tools/install-test-deps.sh). Loopback only; bounded by SECONDS + 10 minutes.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
SECS=${1:-600}
case "$SECS" in '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;; esac
if [ -d "${HOME:-/root}/.cargo/bin" ]; then PATH="${HOME:-/root}/.cargo/bin:$PATH"; fi
if [ -z "${NUMATGTD_BIN:-}" ]; then
  cargo build -q -p target-server
  NUMATGTD_BIN=${CARGO_TARGET_DIR:-$REPO/target}/debug/numatgtd
fi
export NUMATGTD_BIN NUMATGT_SOAK_SECS=$SECS
exec timeout -k 30 $((SECS + 600)) cargo test -q -p tests --test soak -- --nocapture
