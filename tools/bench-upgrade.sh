#!/bin/bash
# Live-upgrade benchmark (issue 29): what the initiators and the cache see of
# `numatgtadm --upgrade`, against a plain restart, in one run. numatgtd is started as
# tgtd is (default settings, LUN from Debian's tgtadm) on a LUN file under target/bench
# (the work disk, not tmpfs); fio's libiscsi engine reads 4 KiB at random at QD32 from a
# working set that fits the cache:
#   1. before:   the cache warmed by one sequential pass, then a window of DURATION s;
#   2. upgrade:  `numatgtadm --upgrade` while fio runs (the same read load): its "not
#                serving for" line, fio's errors and largest completion latency, and the
#                daemon's RSS (VmRSS of the one process) sampled every 20 ms through it;
#   3. after:    a window right after the upgrade (the cache warm-up runs meanwhile);
#   4. restart:  SIGTERM, start again (cold cache, the LUN made again with tgtadm), a window
#                right after the start.
# Each window reports IOPS, the cache hit ratio over the window (numatgt_cache_hits_total
# and _misses_total deltas), the daemon's CPU time per I/O (utime + stime from
# /proc/PID/stat), and /proc/loadavg. Not a test: it reports numbers.
#
# CACHE_MEMORY=shared|private runs numatgtd with that `cache.memory` (a config file of
# that one setting); unset, numatgtd's default (`auto`) decides. With shared memory the
# upgrade hands the cache's memory on and the "after" window starts with every block.
#
# Env: DURATION (s per window, 20), QUICK=1 (DURATION=5, 256 MiB), LUN_SIZE (1G), WORKSET
#   (256M), NUMATGTD_BIN (target/release/numatgtd), NUMATGTADM_BIN (beside it), FIO
#   (target/tools/fio, see tools/build-fio-libiscsi.sh), BENCH_DIR (target/bench),
#   PORT_BASE (23800).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
. "$REPO/tools/bench-lib.sh"
say() { echo "bench-upgrade: $*" >&2; }

QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
  DURATION=${DURATION:-5}
  WORKSET=${WORKSET:-128M}
  LUN_SIZE=${LUN_SIZE:-256M}
else
  DURATION=${DURATION:-20}
  WORKSET=${WORKSET:-256M}
  LUN_SIZE=${LUN_SIZE:-1G}
fi
BIN=${NUMATGTD_BIN:-$REPO/target/release/numatgtd}
[ -x "$BIN" ] || BIN=$REPO/target/debug/numatgtd
ADM=${NUMATGTADM_BIN:-$(dirname "$BIN")/numatgtadm}
FIO=${FIO:-$REPO/target/tools/fio}
has_libiscsi "$FIO" || { say "no fio with the libiscsi engine at $FIO (tools/build-fio-libiscsi.sh)"; exit 1; }
[ -x "$ADM" ] || { say "no numatgtadm at $ADM"; exit 1; }
command -v tgtadm >/dev/null || { say "tgtadm missing (apt-get install tgt)"; exit 1; }

BENCH_DIR=${BENCH_DIR:-$REPO/target/bench}
RUN=$BENCH_DIR/upgrade-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUN/state"
LUN=$BENCH_DIR/upgrade-lun.img
[ "$(stat -c %s "$LUN" 2>/dev/null || echo 0)" = "$(numfmt --from=iec "$LUN_SIZE")" ] ||
  truncate -s "$LUN_SIZE" "$LUN"
PORT=$(free_port "${PORT_BASE:-23800}")
MPORT=$(free_port $((PORT + 1)))
CTL=$((3000 + $$ % 20000))
IQN=iqn.2026-11.org.numatgt:bench-upgrade
URL="iscsi://127.0.0.1:$PORT/$IQN/1"
TPID=
cleanup() {
  [ -n "$TPID" ] && stop_pid "$TPID"
  [ -n "${SAMPLER:-}" ] && kill "$SAMPLER" 2>/dev/null
  true
}
trap cleanup EXIT

CONFIG=()
case "${CACHE_MEMORY:-}" in
  "") ;;
  shared|private)
    printf 'cache:\n  memory: %s\n' "$CACHE_MEMORY" > "$RUN/numatgt.yaml"
    CONFIG=(--config "$RUN/numatgt.yaml") ;;
  *) say "CACHE_MEMORY must be shared or private"; exit 1 ;;
esac
start_target() {
  "$BIN" -f -C "$CTL" --iscsi "portal=127.0.0.1:$PORT" --metrics "127.0.0.1:$MPORT" \
    --state-dir "$RUN/state" "${CONFIG[@]}" >> "$RUN/numatgtd.log" 2>&1 &
  TPID=$!
  wait_port "$PORT" "$TPID"
  tgtadm -C "$CTL" --lld iscsi --op new --mode target --tid 1 -T "$IQN"
  tgtadm -C "$CTL" --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$LUN"
  tgtadm -C "$CTL" --lld iscsi --op bind --mode target --tid 1 -I ALL
}

metric() { # NAME: its value (sum of its series) from the metrics port
  curl -s "http://127.0.0.1:$MPORT/metrics" | awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $2 } END { printf "%d\n", s }'
}
rss_kb() { awk '$1 == "VmRSS:" { print $2 }' "/proc/$TPID/status" 2>/dev/null || echo 0; }

fio_read() { # NAME SECONDS: 4K random reads QD32 over the working set -> json
  timeout -k 5 $(($2 + 60)) "$FIO" --name="$1" --ioengine=libiscsi "--filename=${URL//:/\\:}" \
    --rw=randread --bs=4k --iodepth=32 --size="$WORKSET" --time_based --runtime="$2" \
    --norandommap --randrepeat=0 --output-format=json --output="$RUN/$1.json" > "$RUN/$1.err" 2>&1
}
fio_fields() { # NAME -> "iops errors max_clat_ms"
  python3 - "$RUN/$1.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
r = j["read"]
print("%.0f %d %.1f" % (r["iops"], j["error"], r["clat_ns"]["max"] / 1e6))
PY
}

window() { # NAME: one measured window -> a result row
  local h0 m0 t0 h1 m1 t1 load
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  h0=$(metric numatgt_cache_hits_total); m0=$(metric numatgt_cache_misses_total); t0=$(cpu_ticks "$TPID")
  fio_read "$1" "$DURATION" || say "fio failed in $1: $(tail -n 2 "$RUN/$1.err" | tr '\n' ' ')"
  h1=$(metric numatgt_cache_hits_total); m1=$(metric numatgt_cache_misses_total); t1=$(cpu_ticks "$TPID")
  read -r iops errs maxms < <(fio_fields "$1")
  python3 - "$1" "$iops" "$errs" "$maxms" $((h1 - h0)) $((m1 - m0)) $((t1 - t0)) "$(getconf CLK_TCK)" "$DURATION" "$load" <<'PY' | tee -a "$RUN/results.md"
import sys
name, iops, errs, maxms, hits, misses, ticks, hz, dur, load = sys.argv[1:11]
hits, misses, ticks, hz = int(hits), int(misses), int(ticks), int(hz)
ios = float(iops) * float(dur)
ratio = hits / (hits + misses) if hits + misses else 0.0
cpu_us = ticks / hz * 1e6 / ios if ios else 0.0
print(f"| {name} | {float(iops):.0f} | {ratio * 100:.1f} % | {hits} / {misses} | {cpu_us:.1f} | {errs} | {maxms} | {load} |")
PY
}

say "numatgtd $BIN, LUN $LUN ($LUN_SIZE), working set $WORKSET, $DURATION s windows, cache.memory ${CACHE_MEMORY:-default}, run dir $RUN"
start_target
"$FIO" --name=warm --ioengine=libiscsi "--filename=${URL//:/\\:}" --rw=read --bs=512k --iodepth=8 \
  --size="$WORKSET" --output="$RUN/warm.txt" > /dev/null 2>&1 || say "warm-up read failed"
{
  echo "| window | IOPS | cache hit ratio | hits / misses | CPU us per I/O | fio errors | max latency ms | loadavg |"
  echo "|---|---|---|---|---|---|---|---|"
} | tee "$RUN/results.md"
window before

# the upgrade under the same load, the RSS sampled through it
rss0=$(rss_kb)
( max=0; while kill -0 "$TPID" 2>/dev/null; do r=$(rss_kb); [ "${r:-0}" -gt "$max" ] && max=$r && echo "$max" > "$RUN/rss-max"; sleep 0.02; done ) &
SAMPLER=$!
fio_read during $((DURATION / 2 + 6)) &
FPID=$!
sleep $((DURATION / 4 + 2))
line=$(timeout 120 "$ADM" -C "$CTL" --upgrade 2>&1) || say "upgrade failed: $line"
wait "$FPID" || say "fio failed during the upgrade: $(tail -n 2 "$RUN/during.err" | tr '\n' ' ')"
kill "$SAMPLER" 2>/dev/null; wait "$SAMPLER" 2>/dev/null || true; SAMPLER=
read -r diops derrs dmax < <(fio_fields during)
rss_max=$(cat "$RUN/rss-max" 2>/dev/null || echo 0)
rss1=$(rss_kb)
window after
warm=$(curl -s "http://127.0.0.1:$MPORT/metrics" | grep '^numatgt_cache_warm_blocks' | tr '\n' ' ')

# a plain restart for comparison: the cache starts cold
stop_pid "$TPID"; TPID=
start_target
window restart
stop_pid "$TPID"; TPID=

cat <<EOF | tee -a "$RUN/results.md"

upgrade: $line
under load: fio IOPS $diops over the upgrade's window, errors $derrs, largest completion latency $dmax ms
RSS (VmRSS, kB): before $rss0, largest through the upgrade $rss_max, after $rss1
warm start: $warm
EOF
say "results in $RUN/results.md"
