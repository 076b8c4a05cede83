#!/bin/bash
# Quick start: build numatgtd and serve the demo LUN (1 GiB sparse file, LUN 1 of
# iqn.2026-11.org.numatgt:demo on 127.0.0.1:3260) in the foreground. Ctrl-C stops it.
# Usage: sudo tools/demo.sh [extra numatgtd options, e.g. --iscsi portal=127.0.0.1:3261]
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
for p in libhwloc-dev libudev-dev pkg-config; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then echo "demo: run as root to install ${need[*]}" >&2; exit 1; fi
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}"
fi
cargo build --release -p target-server
STATE=${NUMATGT_STATE_DIR:-/var/lib/numatgt}
exec target/release/numatgtd -f --demo --state-dir "$STATE" "$@"
