#!/bin/bash
# Quick start: build numatgtd and serve the demo LUN (1 GiB sparse file, LUN 1 of
# iqn.2026-11.org.numatgt:demo on 127.0.0.1:3260) in the foreground. Ctrl-C stops it.
# Usage: sudo tools/demo.sh [extra numatgtd options, e.g. --iscsi portal=127.0.0.1:3261]
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-build-deps.sh
cargo build --release -p target-server
STATE=${NUMATGT_STATE_DIR:-/var/lib/numatgt}
exec target/release/numatgtd -f --demo --state-dir "$STATE" "$@"
