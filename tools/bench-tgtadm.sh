#!/bin/bash
# The tgtd user's benchmark (issue 10): numatgtd started exactly as tgtd is (no
# configuration file, `-f -C N --iscsi portal=...`), LUNs made with Debian's tgtadm, default
# settings; Debian's tgtd beside it, same LUN size, same data, same moment.
#
#   1. "tgtadm LUN": a 512 MiB LUN on tmpfs in each target; 4 KiB random reads (iscsi-perf) at
#      QD32 and QD1, targets alternated (A B A B ...), ROUNDS rounds; median IOPS, the ratio,
#      each target's CPU time per I/O (utime+stime from /proc/PID/stat over the run / I/Os).
#   2. "LUN twice the cache": numatgtd with `cache: size_per_node: CACHE` only (default 256M)
#      and three 512 MiB LUNs made by tgtadm: the default (`numa`), `--bsopts cache=off` and
#      `--bsopts cache=page`; 4 KiB random reads QD32 over each, alternated, ROUNDS rounds.
#
# Every LUN is read once sequentially first (warm: the page cache for tgtd and `page`, the
# NUMA cache for `numa`). Prints Markdown tables, /proc/loadavg before and after (a warning
# when the machine was busy), and the command line to rerun. Not part of CI (a benchmark,
# not a timed test). Both daemons are stopped by PID. Root (tgtd, /dev/shm).
# Env: NUMATGTD_BIN (default: cargo build --release, then target/release/numatgtd),
#      ROUNDS (3), SECS (8 per run), LUN_MB (512), CACHE (256M), CACHE_EXTRA (more indented
#      lines for part 2's `cache:` section, e.g. "  block_size: 16K"), PARTS ("1 2"),
#      BENCH_DIR, KEEP_BENCH_LOGS=1.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench-lib.sh
. "$REPO/tools/bench-lib.sh"
[ "$(id -u)" = 0 ] || { echo "bench: needs root (tgtd, tmpfs)" >&2; exit 1; }
for t in tgtd tgtadm iscsi-perf timeout ss; do
  command -v "$t" >/dev/null || { echo "bench: $t missing: run tools/install-test-deps.sh" >&2; exit 1; }
done
if [ -d "${HOME:-/root}/.cargo/bin" ]; then PATH="${HOME:-/root}/.cargo/bin:$PATH"; fi
BIN=${NUMATGTD_BIN:-}
if [ -z "$BIN" ]; then
  (cd "$REPO" && cargo build --release -q -p target-server) || { echo "bench: release build failed" >&2; exit 1; }
  BIN=$REPO/target/release/numatgtd
fi
[ -x "$BIN" ] || { echo "bench: $BIN missing" >&2; exit 1; }
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-8}
LUN_MB=${LUN_MB:-512}
CACHE=${CACHE:-256M}
PARTS=${PARTS:-"1 2"}
HZ=$(getconf CLK_TCK)

NPORT=$(free_port 23390)
TPORT=$(free_port $((NPORT + 1)))
NCTL=$(free_ctl 41)
TCTL=$(free_ctl $((NCTL + 1)))
IQN=iqn.2026-11.org.numatgt:bench
if [ -z "${BENCH_DIR:-}" ]; then
  need_kb=$(( (LUN_MB * 5 + 64) * 1024 ))
  if [ "$(df --output=avail -k /dev/shm | tail -n 1)" -gt "$need_kb" ]; then
    BENCH_DIR=$(mktemp -d /dev/shm/numatgt-bench.XXXXXX)
  else
    echo "bench: /dev/shm has no room for 5 LUNs of $LUN_MB MiB" >&2; exit 1
  fi
fi
mkdir -p "$BENCH_DIR/state"
NPID= TPID=
stop_tgtd() { [ -n "$TPID" ] || return 0; stop_tgtd_pid "$TCTL" "$TPID"; TPID=; }
stop_numatgtd() { [ -n "$NPID" ] || return 0; stop_pid "$NPID"; NPID=; }
cleanup() {
  set +e
  stop_tgtd; stop_numatgtd
  if [ "${KEEP_BENCH_LOGS:-0}" = 1 ]; then rm -f "$BENCH_DIR"/*.img; echo "bench: logs kept in $BENCH_DIR"; else rm -rf "$BENCH_DIR"; fi
}
trap cleanup EXIT
RUN_IOPS=0 RUN_CPU=0
run() { # PID URL QD -> RUN_IOPS (average), RUN_CPU (target CPU µs per I/O)
  local pid=$1 url=$2 qd=$3 out t0 t1
  t0=$(cpu_ticks "$pid")
  out=$(timeout -k 5 -s INT "$SECS" iscsi-perf -m "$qd" -b 8 -r "$url" 2>&1 | tr '\r' '\n' || true)
  t1=$(cpu_ticks "$pid")
  echo "$out" >> "$BENCH_DIR/perf.log"
  RUN_IOPS=$(echo "$out" | sed -n 's/.*iops average \([0-9]*\).*/\1/p' | tail -n 1)
  RUN_IOPS=${RUN_IOPS:-0}
  # iscsi-perf's average covers the whole run; I/Os = IOPS x seconds it ran
  RUN_CPU=$(awk -v d=$((t1 - t0)) -v hz="$HZ" -v i="$RUN_IOPS" -v s="$SECS" \
    'BEGIN { if (i > 0) printf "%.1f", d / hz * 1e6 / (i * s); else print "n/a" }')
}
warm() { # URL: one sequential pass (128 KiB reads) over the LUN
  timeout -k 5 -s INT "$(( LUN_MB / 256 + 3 ))" iscsi-perf -m 8 -b 256 "$1" >/dev/null 2>&1 || true
}
load_check() { # the benchmark itself keeps about 2 runnable (initiator + target): warn above 3
  local l; l=$(cut -d' ' -f1 /proc/loadavg)
  awk -v l="$l" 'BEGIN { exit !(l > 3.0) }' && echo "> WARNING: load average $l before this part (the benchmark itself accounts for about 2): another process shares the CPUs; ratios are still same-run, absolute numbers are low" || true
}
start_numatgtd() { # [CONFIG]
  local args=(-f -C "$NCTL" --iscsi "portal=127.0.0.1:$NPORT" --state-dir "$BENCH_DIR/state")
  [ $# -gt 0 ] && args+=(--config "$1")
  "$BIN" "${args[@]}" >> "$BENCH_DIR/numatgtd.log" 2>&1 &
  NPID=$!
  wait_port "$NPORT" "$NPID" || { tail -20 "$BENCH_DIR/numatgtd.log"; exit 1; }
}
lun() { # CTL TID LUN FILE [tgtadm options...]
  local ctl=$1 tid=$2 n=$3 f=$4; shift 4
  tgtadm -C "$ctl" --lld iscsi --op new --mode logicalunit --tid "$tid" --lun "$n" -b "$f" "$@"
}

# start on a quiet machine: wait (at most 60 s) for the 1-minute load to fall below 1
for _ in $(seq 1 12); do
  awk '{ exit !($1 >= 1.0) }' /proc/loadavg || break
  sleep 5
done
echo "bench: LUN files in $BENCH_DIR ($LUN_MB MiB each, random data)"
head -c "${LUN_MB}M" /dev/urandom > "$BENCH_DIR/a.img"
for f in tgtd numa off page; do cp "$BENCH_DIR/a.img" "$BENCH_DIR/$f.img"; done
rm -f "$BENCH_DIR/a.img"
LOAD0=$(cat /proc/loadavg)
echo "bench: numatgtd=$BIN; loadavg $LOAD0; $(nproc) CPUs"
echo "rerun: ROUNDS=$ROUNDS SECS=$SECS LUN_MB=$LUN_MB CACHE=$CACHE tools/bench-tgtadm.sh"

# ---- part 1: tgtd-style start, tgtadm LUN, default settings ----
part1() {
start_numatgtd
tgtd -f -C "$TCTL" --iscsi "portal=127.0.0.1:$TPORT" > "$BENCH_DIR/tgtd.log" 2>&1 &
TPID=$!
wait_port "$TPORT" "$TPID" || { tail -20 "$BENCH_DIR/tgtd.log"; exit 1; }
for c in "$NCTL" "$TCTL"; do
  tgtadm -C "$c" --lld iscsi --op new --mode target --tid 1 -T "$IQN"
  tgtadm -C "$c" --lld iscsi --op bind --mode target --tid 1 -I ALL
done
lun "$NCTL" 1 1 "$BENCH_DIR/numa.img"
lun "$TCTL" 1 1 "$BENCH_DIR/tgtd.img"
NURL="iscsi://127.0.0.1:$NPORT/$IQN/1" TURL="iscsi://127.0.0.1:$TPORT/$IQN/1"
warm "$NURL"; warm "$TURL"
echo
echo "## 4 KiB random read, ${LUN_MB} MiB tmpfs LUN made by tgtadm, both daemons started as tgtd (median of $ROUNDS alternated runs of ${SECS} s)"
load_check
echo
echo "| queue depth | numatgtd IOPS | tgtd IOPS | ratio | numatgtd CPU µs/IO | tgtd CPU µs/IO |"
echo "|---|---|---|---|---|---|"
for qd in 32 1; do
  ni="" ti="" nc="" tc=""
  for r in $(seq 1 "$ROUNDS"); do
    run "$NPID" "$NURL" "$qd"; ni="$ni $RUN_IOPS"; nc="$nc $RUN_CPU"
    run "$TPID" "$TURL" "$qd"; ti="$ti $RUN_IOPS"; tc="$tc $RUN_CPU"
  done
  n=$(echo "$ni" | median) t=$(echo "$ti" | median)
  ratio=$(awk -v a="$n" -v b="$t" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
  echo "| QD$qd | $n ($ni ) | $t ($ti ) | **$ratio** | $(echo "$nc" | median) | $(echo "$tc" | median) |"
done
stop_tgtd; stop_numatgtd
grep -h "NUMA block cache ready" "$BENCH_DIR/numatgtd.log" | tail -n 1 | sed 's/^.*INFO/numatgtd:/'
}

# ---- part 2: a LUN twice the cache: numa vs off vs page ----
part2() {
cat > "$BENCH_DIR/small-cache.yaml" <<YAML
cache:
  size_per_node: $CACHE
${CACHE_EXTRA:-}
YAML
start_numatgtd "$BENCH_DIR/small-cache.yaml"
tgtadm -C "$NCTL" --lld iscsi --op new --mode target --tid 1 -T "$IQN"
tgtadm -C "$NCTL" --lld iscsi --op bind --mode target --tid 1 -I ALL
lun "$NCTL" 1 1 "$BENCH_DIR/numa.img"
lun "$NCTL" 1 2 "$BENCH_DIR/off.img" --bsopts cache=off
lun "$NCTL" 1 3 "$BENCH_DIR/page.img" --bsopts cache=page
for l in 1 2 3; do warm "iscsi://127.0.0.1:$NPORT/$IQN/$l"; done
echo
echo "## 4 KiB random read QD32 over a ${LUN_MB} MiB LUN, cache.size_per_node $CACHE (LUNs made by tgtadm; median of $ROUNDS alternated runs of ${SECS} s)"
load_check
echo
echo "| LUN cache mode | IOPS | runs | CPU µs/IO | vs numa |"
echo "|---|---|---|---|---|"
declare -A IOPS CPU RUNS
for r in $(seq 1 "$ROUNDS"); do
  for l in 1 2 3; do
    run "$NPID" "iscsi://127.0.0.1:$NPORT/$IQN/$l" 32
    RUNS[$l]="${RUNS[$l]:-} $RUN_IOPS"; CPU[$l]="${CPU[$l]:-} $RUN_CPU"
  done
done
for l in 1 2 3; do IOPS[$l]=$(echo "${RUNS[$l]}" | median); done
for l in 1 2 3; do
  name=$(case $l in 1) echo "numa (default)";; 2) echo "off (--bsopts cache=off)";; 3) echo "page (--bsopts cache=page)";; esac)
  vs=$(awk -v a="${IOPS[$l]}" -v b="${IOPS[1]}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
  echo "| $name | ${IOPS[$l]} | ${RUNS[$l]} | $(echo "${CPU[$l]}" | median) | $vs |"
done
kill -USR1 "$NPID"; sleep 0.5
grep -h "cache report: node=" "$BENCH_DIR/numatgtd.log" | tail -n 2 | sed 's/^.*cache report:/cache report:/' | cut -c1-260
stop_numatgtd
}

for p in $PARTS; do "part$p"; done
echo
echo "bench: loadavg before $LOAD0, after $(cat /proc/loadavg)"
