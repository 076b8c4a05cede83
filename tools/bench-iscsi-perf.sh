#!/bin/bash
# Side-by-side read benchmark: numatgtd vs Debian's tgtd, same machine, same moment.
# Each serves a 1 GiB file LUN (on /dev/shm when it has room, else /tmp) on its own
# 127.0.0.1 port; `iscsi-perf` (libiscsi, 4 KiB random reads) runs ~10 s per point at QD 1
# and QD 32, alternating targets. Prints IOPS, the numatgtd/tgtd ratio and /proc/loadavg.
# Both daemons are stopped by PID (tgtd after the tgtadm offline/delete dance).
# Not part of CI. Env: NUMATGTD_BIN (default target/release/numatgtd, else target/debug),
#   QDS ("1 32"), SECS (11), BENCH_DIR, NUMATGT_PORT, TGTD_PORT (free ones from 23290), TGTD_CTL (17).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench-lib.sh
. "$REPO/tools/bench-lib.sh"
[ "$(id -u)" = 0 ] || { echo "bench: needs root (tgtd)" >&2; exit 1; }
for t in tgtd tgtadm iscsi-perf timeout; do
  command -v "$t" >/dev/null || { echo "bench: $t missing: run tools/install-test-deps.sh" >&2; exit 1; }
done
BIN=${NUMATGTD_BIN:-}
if [ -z "$BIN" ]; then
  if [ -x "$REPO/target/release/numatgtd" ]; then BIN=$REPO/target/release/numatgtd
  else BIN=$REPO/target/debug/numatgtd; echo "bench: WARNING: debug build (cargo build --release for real numbers)"; fi
fi
[ -x "$BIN" ] || { echo "bench: $BIN missing" >&2; exit 1; }
QDS=${QDS:-"1 32"}
SECS=${SECS:-11}
NPORT=${NUMATGT_PORT:-$(free_port 23290)}
TPORT=${TGTD_PORT:-$(free_port $((NPORT + 1)))}
TCTL=${TGTD_CTL:-17}
NIQN=iqn.2026-11.org.numatgt:bench
TIQN=iqn.2026-11.org.numatgt:bench-tgtd
if [ -z "${BENCH_DIR:-}" ]; then
  if [ "$(df --output=avail -k /dev/shm 2>/dev/null | tail -n 1)" -gt $((3 * 1024 * 1024)) ] 2>/dev/null; then
    BENCH_DIR=$(mktemp -d /dev/shm/numatgt-bench.XXXXXX)
  else
    BENCH_DIR=$(mktemp -d /tmp/numatgt-bench.XXXXXX)
  fi
fi
mkdir -p "$BENCH_DIR"
NPID= TPID=
cleanup() {
  set +e
  if [ -n "$TPID" ]; then
    tgtadm -C "$TCTL" --op update --mode sys --name State -v offline >/dev/null 2>&1
    tgtadm -C "$TCTL" --lld iscsi --op delete --mode target --tid 1 --force >/dev/null 2>&1
    tgtadm -C "$TCTL" --op delete --mode system >/dev/null 2>&1
    stop_pid "$TPID"
  fi
  [ -n "$NPID" ] && stop_pid "$NPID"
  if [ "${KEEP_BENCH_LOGS:-0}" = 1 ]; then rm -f "$BENCH_DIR"/*.img; echo "bench: logs kept in $BENCH_DIR"; else rm -rf "$BENCH_DIR"; fi
}
trap cleanup EXIT

echo "bench: LUN files in $BENCH_DIR (1 GiB each, random data)"
head -c 1G /dev/urandom > "$BENCH_DIR/numatgt.img"
cp "$BENCH_DIR/numatgt.img" "$BENCH_DIR/tgtd.img"

cat > "$BENCH_DIR/numatgtd.yaml" <<YAML
portals:
  - address: 127.0.0.1:$NPORT
targets:
  - iqn: $NIQN
    luns:
      - lun: 1
        path: $BENCH_DIR/numatgt.img
        block_size: 512
YAML
mkdir -p "$BENCH_DIR/state"
"$BIN" -f --config "$BENCH_DIR/numatgtd.yaml" --state-dir "$BENCH_DIR/state" -C "${NUMATGT_CTL:-18}" > "$BENCH_DIR/numatgtd.log" 2>&1 &
NPID=$!
tgtd -f -C "$TCTL" --iscsi portal=127.0.0.1:$TPORT > "$BENCH_DIR/tgtd.log" 2>&1 &
TPID=$!
wait_port "$NPORT" "$NPID" || { tail -20 "$BENCH_DIR/numatgtd.log"; exit 1; }
wait_port "$TPORT" "$TPID" || { tail -20 "$BENCH_DIR/tgtd.log"; exit 1; }
tgtadm -C "$TCTL" --lld iscsi --op new --mode target --tid 1 -T "$TIQN"
tgtadm -C "$TCTL" --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$BENCH_DIR/tgtd.img"
tgtadm -C "$TCTL" --lld iscsi --op bind --mode target --tid 1 -I ALL

perf() { # URL QD -> average IOPS (0 when the run failed; output kept in $BENCH_DIR)
  local out
  out=$(timeout -k 5 -s INT "$SECS" iscsi-perf -m "$2" -b 8 -r "$1" 2>&1 | tr '\r' '\n' || true)
  echo "$out" >> "$BENCH_DIR/perf.log"
  echo "$out" | sed -n 's/.*iops average \([0-9]*\).*/\1/p' | tail -n 1 | grep . || echo 0
}

echo "bench: numatgtd=$BIN (pid $NPID, port $NPORT), tgtd (pid $TPID, port $TPORT)"
echo "bench: loadavg before: $(cat /proc/loadavg)"
printf '%-28s %12s %12s %8s\n' "workload" "numatgtd" "tgtd" "ratio"
for qd in $QDS; do
  n=$(perf "iscsi://127.0.0.1:$NPORT/$NIQN/1" "$qd")
  t=$(perf "iscsi://127.0.0.1:$TPORT/$TIQN/1" "$qd")
  ratio=$(awk -v a="$n" -v b="$t" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
  printf '%-28s %12s %12s %8s\n' "4KiB randread QD$qd IOPS" "$n" "$t" "$ratio"
done
echo "bench: loadavg after: $(cat /proc/loadavg)"
