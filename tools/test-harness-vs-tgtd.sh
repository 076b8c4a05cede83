#!/bin/bash
# Validates the test harness itself: runs the integration tests (and the VM test) against
# Debian's tgtd instead of numatgtd. Tests of numatgtd-only behaviour (config errors, signal
# handling, log lines) are skipped explicitly. Root (tgtd). Not part of CI.
# Extra args go to the test binaries, e.g. `-- --ignored` is not needed: use ALL=1 to also run
# the full iscsi-test-cu report (target/test-reports/iscsi-test-cu-all-tgtd.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "test-harness-vs-tgtd: needs root (tgtd)" >&2; exit 1; }
export NUMATGT_TEST_TARGET=tgtd
rc=0
cargo test -p tests -- --skip unknown_field_is_rejected --skip block_size_1000_is_rejected \
  --skip sigterm_with_open_sessions --skip logs_listening_line "$@" || rc=1
if [ "${ALL:-0}" = 1 ]; then
  cargo test -p tests --test conformance -- --ignored --nocapture iscsi_test_cu_all_report || rc=1
fi
TARGET=tgtd tools/vm/test-vm-iscsi-tcp.sh || rc=1
echo "test-harness-vs-tgtd: rc=$rc"
exit $rc
