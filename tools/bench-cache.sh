#!/bin/bash
# Block-cache benchmark (issue 3), side by side in one run:
#   numa  = numatgtd with `cache: {mode: numa}`   (the NUMA block cache)
#   off   = numatgtd with `cache: {mode: off}`    (O_DIRECT straight to the file)
#   page  = numatgtd with `cache: {mode: page}`   (buffered I/O, kernel page cache)
#   tgtd  = Debian's tgtd, rdwr backend           (buffered I/O, the reference)
# each serving its own 1 GiB LUN file (same data, under target/bench on the work disk, not
# tmpfs) on its own 127.0.0.1 port. Workloads (fio with the libiscsi engine; iscsi-perf for
# the read-only points when fio is missing):
#   A  processing time vs request size 4K..512K, QD1 at a low fixed rate: mean and p99
#      completion latency (seed Figure 5-9)
#   B  throughput vs request size 16K..512K, random reads QD32 on warm data (Figure 5-11)
#   C  4K random read QD1 / QD32, 4K random write QD32
#   D  cache block size sweep: numatgtd numa restarted with block_size 4K..1M, 128K and 512K
#      random reads QD32 (Figure 5-10)
# Every table gives absolute numbers and the ratio to tgtd, with /proc/loadavg before and
# after. See tools/bench/README.md for how to read them. Not a test: it reports numbers.
#
# A numatgtd that does not understand the `cache:` section yet exits complaining about it;
# those configurations are reported as skipped, and (when all three are) a numatgtd with no
# cache section (`numatgtd`) runs instead so the table still compares it with tgtd.
#
# iscsi-perf fallback: reads only (C's write row is n/a), no percentiles (A2 is n/a), A runs
# unthrottled and every point reads the whole LUN rather than WORKSET.
#
# Env: DURATION (s per point, 5), QUICK=1 (~1 min smoke: DURATION=1, fewer points, 256 MiB
#   LUNs), NUMATGTD_BIN (default target/release/numatgtd, else target/debug), FIO (default
#   target/tools/fio, see tools/build-fio-libiscsi.sh; else fio on PATH if it has libiscsi;
#   else iscsi-perf), BENCH_DIR (target/bench; LUN files are kept there for the next run,
#   CLEAN=1 removes them at the end), LUN_SIZE (1G), WORKSET (bytes read/written, 512M),
#   CACHE_SIZE (cache.size_per_node, 1G), RATE_IOPS (A's fixed rate, 200), BLOCK_SIZES
#   ("4K 16K 64K 256K 1M"), MODES ("numa off page"), NO_TGTD=1, TGTD_CTL (17), PORT_BASE (23400).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
say() { echo "bench-cache: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "needs root (tgtd)"; exit 1; }

QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
  DURATION=${DURATION:-1}
  LUN_SIZE=${LUN_SIZE:-256M}
  WORKSET=${WORKSET:-64M}
  LAT_SIZES=${LAT_SIZES:-"4K 64K 512K"}
  BW_SIZES=${BW_SIZES:-"16K 128K 512K"}
  BLOCK_SIZES=${BLOCK_SIZES:-"4K 64K 1M"}
  SWEEP_SIZES=${SWEEP_SIZES:-"128K"}
else
  DURATION=${DURATION:-5}
  LUN_SIZE=${LUN_SIZE:-1G}
  WORKSET=${WORKSET:-512M}
  LAT_SIZES=${LAT_SIZES:-"4K 8K 16K 32K 64K 128K 256K 512K"}
  BW_SIZES=${BW_SIZES:-"16K 32K 64K 128K 256K 512K"}
  BLOCK_SIZES=${BLOCK_SIZES:-"4K 16K 64K 256K 1M"}
  SWEEP_SIZES=${SWEEP_SIZES:-"128K 512K"}
fi
CACHE_SIZE=${CACHE_SIZE:-1G}
RATE_IOPS=${RATE_IOPS:-200}
MODES=${MODES:-"numa off page"}
TCTL=${TGTD_CTL:-}
PORT_BASE=${PORT_BASE:-23400}
BENCH_DIR=${BENCH_DIR:-$REPO/target/bench}

bytes() { # 64K -> 65536
  local v=${1^^} m=1
  case $v in *K) m=1024 ;; *M) m=$((1 << 20)) ;; *G) m=$((1 << 30)) ;; esac
  echo $(( ${v%[KMG]} * m ))
}
LUN_BYTES=$(bytes "$LUN_SIZE")
WS_BYTES=$(bytes "$WORKSET")
[ "$WS_BYTES" -le "$LUN_BYTES" ] || { say "WORKSET > LUN_SIZE"; exit 1; }

for t in timeout ss python3 tgtd tgtadm; do
  command -v "$t" >/dev/null || { say "$t missing (tools/install-test-deps.sh)"; exit 1; }
done
BIN=${NUMATGTD_BIN:-}
if [ -z "$BIN" ]; then
  if [ -x "$REPO/target/release/numatgtd" ]; then BIN=$REPO/target/release/numatgtd
  else BIN=$REPO/target/debug/numatgtd; say "WARNING: debug build (cargo build --release -p target-server for real numbers)"; fi
fi
[ -x "$BIN" ] || { say "$BIN missing: cargo build --release -p target-server"; exit 1; }

# Load generator: fio with libiscsi, else iscsi-perf (reads only, no latency percentiles).
has_libiscsi() { [ -n "$1" ] && [ -x "$1" ] && timeout 10 "$1" --enghelp=libiscsi >/dev/null 2>&1; }
FIO=${FIO:-$REPO/target/tools/fio}
if ! has_libiscsi "$FIO"; then
  FIO=$(command -v fio || true)
  has_libiscsi "$FIO" || FIO=
fi
if [ -n "$FIO" ]; then ENGINE=fio
elif command -v iscsi-perf >/dev/null; then
  ENGINE=iscsi-perf
  say "no fio with the libiscsi engine (tools/build-fio-libiscsi.sh builds one): iscsi-perf fallback, reads only, no percentiles"
else say "neither fio-libiscsi nor iscsi-perf"; exit 1; fi

mkdir -p "$BENCH_DIR"
RUN=$(mktemp -d "$BENCH_DIR/run.XXXXXX")
# Run a private copy: a rebuild of target/release during the run must not change the
# daemon between tables.
cp "$BIN" "$RUN/numatgtd"
BIN_SRC=$BIN
BIN=$RUN/numatgtd
RESULTS=$RUN/results.tsv
: > "$RESULTS"

# ---------------------------------------------------------------- processes, by PID only
declare -A PID PORT IQN LOG SKIP IGNORED
STARTED=()
stop_pid() { # PID: SIGTERM, up to 5 s, then SIGKILL
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return 0; }; sleep 0.1; done
  say "pid $pid ignored SIGTERM, killing"
  kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
}
stop_tgtd() {
  tgtadm -C "$TCTL" --op update --mode sys --name State -v offline >/dev/null 2>&1
  tgtadm -C "$TCTL" --lld iscsi --op delete --mode target --tid 1 --force >/dev/null 2>&1
  tgtadm -C "$TCTL" --op delete --mode system >/dev/null 2>&1
  stop_pid "${PID[tgtd]}"
}
cleanup() {
  set +e
  local n
  for n in "${STARTED[@]}"; do
    [ -n "${PID[$n]:-}" ] || continue
    if [ "$n" = tgtd ]; then stop_tgtd; else stop_pid "${PID[$n]}"; fi
    PID[$n]=
  done
  if [ "${CLEAN:-0}" = 1 ]; then rm -rf "$BENCH_DIR"; else rm -f "$RUN"/*.img "$RUN/numatgtd"; say "logs and results: $RUN"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

NEXT_PORT=$PORT_BASE
free_port() { # the next port from NEXT_PORT on that nothing listens on
  local p
  for p in $(seq "$NEXT_PORT" $((NEXT_PORT + 300))); do
    if ! ss -Hltn "sport = :$p" | grep -q .; then NEXT_PORT=$((p + 1)); echo "$p"; return 0; fi
  done
  say "no free port from $NEXT_PORT"; return 1
}
wait_port() { # PORT PID: until PID itself listens on PORT (0: yes, 1: PID exited, 2: timeout)
  local i
  for i in $(seq 1 150); do
    ss -Hltnp "sport = :$1" | grep -q "pid=$2," && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 2
}

# ---------------------------------------------------------------- LUN files
fill_lun() { # FILE: LUN_BYTES of random data (64 MiB of urandom repeated), kept between runs
  local f=$1
  [ -f "$f" ] && [ "$(stat -c %s "$f")" = "$LUN_BYTES" ] && return 0
  if [ ! -f "$BENCH_DIR/chunk.bin" ]; then head -c 64M /dev/urandom > "$BENCH_DIR/chunk.bin"; fi
  local n=$(( (LUN_BYTES + (64 << 20) - 1) / (64 << 20) )) i
  { for i in $(seq 1 "$n"); do cat "$BENCH_DIR/chunk.bin"; done; } | head -c "$LUN_BYTES" > "$f.tmp"
  mv "$f.tmp" "$f"
}

# ---------------------------------------------------------------- numatgtd
NCTL=60
start_numatgtd() { # NAME MODE|"" [BLOCK_SIZE]: 0 started, 1 failed, 3 rejected the cache section
  local name=$1 mode=$2 bs=${3:-} port yaml rc
  port=$(free_port)
  yaml=$RUN/$name.yaml
  {
    echo "portals:"
    echo "  - address: 127.0.0.1:$port"
    if [ -n "$mode" ]; then
      echo "cache:"
      echo "  mode: $mode"
      echo "  size_per_node: $CACHE_SIZE"
      [ -z "$bs" ] || echo "  block_size: $bs"
    fi
    echo "targets:"
    echo "  - iqn: iqn.2026-11.org.numatgt:bench-${name,,}"
    echo "    luns:"
    echo "      - lun: 1"
    echo "        path: $BENCH_DIR/lun-${mode:-plain}.img"
  } > "$yaml"
  fill_lun "$BENCH_DIR/lun-${mode:-plain}.img"
  mkdir -p "$RUN/state-$name"
  LOG[$name]=$RUN/$name.log
  NCTL=$((NCTL + 1))
  "$BIN" -f --config "$yaml" --state-dir "$RUN/state-$name" -C "$NCTL" > "${LOG[$name]}" 2>&1 &
  PID[$name]=$!
  STARTED+=("$name")
  PORT[$name]=$port
  IQN[$name]=iqn.2026-11.org.numatgt:bench-${name,,}
  wait_port "$port" "${PID[$name]}" && rc=0 || rc=$?
  if [ $rc = 0 ]; then
    # A daemon that uses the section says so at start (any mention of the cache other than
    # the LUNs' write_cache); one that parses and ignores it is flagged in the report.
    if [ -n "$mode" ] && ! sed 's/write_cache//g' "${LOG[$name]}" | grep -qi 'cache'; then
      IGNORED[$name]=1
      say "NOTE: $name: numatgtd accepted cache.mode=$mode but logged nothing about a cache"
    fi
    return 0
  fi
  [ $rc = 2 ] && stop_pid "${PID[$name]}"
  wait "${PID[$name]}" 2>/dev/null || true
  PID[$name]=
  if [ -n "$mode" ] && grep -q 'cache' "${LOG[$name]}"; then
    SKIP[$name]="numatgtd rejects the cache section: $(grep -m1 'cache' "${LOG[$name]}" | cut -c1-160)"
    return 3
  fi
  say "$name: numatgtd did not start:"; tail -5 "${LOG[$name]}" >&2
  SKIP[$name]="numatgtd did not start (see ${LOG[$name]})"
  return 1
}

start_tgtd() {
  local port
  local c
  if [ -z "$TCTL" ]; then # the first control port from 17 on that no running tgtd answers
    for c in $(seq 17 99); do
      timeout 5 tgtadm -C "$c" --op show --mode sys >/dev/null 2>&1 || { TCTL=$c; break; }
    done
  elif timeout 5 tgtadm -C "$TCTL" --op show --mode sys >/dev/null 2>&1; then
    say "a tgtd already answers on control port $TCTL: choose another TGTD_CTL"; return 1
  fi
  [ -n "$TCTL" ] || { say "no free tgtd control port in 17..99"; return 1; }
  fill_lun "$BENCH_DIR/lun-tgtd.img"
  port=$(free_port)
  tgtd -f -C "$TCTL" --iscsi portal=127.0.0.1:$port > "$RUN/tgtd.log" 2>&1 &
  PID[tgtd]=$!
  STARTED+=(tgtd)
  PORT[tgtd]=$port
  IQN[tgtd]=iqn.2026-11.org.numatgt:bench-tgtd
  wait_port "$port" "${PID[tgtd]}" || { tail -5 "$RUN/tgtd.log" >&2; return 1; }
  tgtadm -C "$TCTL" --lld iscsi --op new --mode target --tid 1 -T "${IQN[tgtd]}"
  tgtadm -C "$TCTL" --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$BENCH_DIR/lun-tgtd.img"
  tgtadm -C "$TCTL" --lld iscsi --op bind --mode target --tid 1 -I ALL
}

# ---------------------------------------------------------------- one measurement
# run_point NAME RW BS QD [RATE] -> "iops MiB/s clat_mean_us clat_p99_us" (- when unknown)
run_point() {
  local name=$1 rw=$2 bs=$3 qd=$4 rate=${5:-} url out
  url="iscsi://127.0.0.1:${PORT[$name]}/${IQN[$name]}/1"
  if [ "$ENGINE" = fio ]; then
    out=$RUN/fio-$name-$rw-$bs-qd$qd${rate:+-r$rate}.json
    local args=(--name=p --ioengine=libiscsi "--filename=${url//:/\\:}" --rw="$rw" --bs="$bs"
      --iodepth="$qd" --size="$WS_BYTES" --time_based --runtime="$DURATION" --ramp_time=0
      --norandommap --randrepeat=0 --output-format=json --output="$out")
    # A low fixed rate: wait 1/rate after each completion (thinktime). fio's rate_iops with
    # this async engine counts its own sleep in the completion latency.
    [ -z "$rate" ] || args+=(--thinktime=$((1000000 / rate)) --thinktime_blocks=1)
    if ! timeout -k 5 $((DURATION + 40)) "$FIO" "${args[@]}" > "$out.err" 2>&1; then
      say "fio failed: $name $rw $bs QD$qd: $(tail -n 2 "$out.err" | tr '\n' ' ')"; echo "- - - -"; return 0
    fi
    python3 - "$out" "$rw" <<'PY'
import json, sys
try:
    j = json.load(open(sys.argv[1]))["jobs"][0]
    d = j["write" if "write" in sys.argv[2] else "read"]
    c = d.get("clat_ns", {})
    p99 = c.get("percentile", {}).get("99.000000")
    print("%.0f %.1f %.1f %s" % (d["iops"], d["bw_bytes"] / 1048576, c.get("mean", 0) / 1000,
                                 "%.1f" % (p99 / 1000) if p99 else "-"))
except Exception:
    print("- - - -")
PY
  else
    [[ "$rw" == *read* ]] || { echo "- - - -"; return 0; }
    local blocks=$(( $(bytes "$bs") / 512 )) r=
    [ "$rw" = randread ] && r=-r
    out=$(timeout -k 5 -s INT $((DURATION + 1)) iscsi-perf -m "$qd" -b "$blocks" $r "$url" 2>&1 | tr '\r' '\n' || true)
    echo "$out" >> "$RUN/iscsi-perf.log"
    local iops
    iops=$(echo "$out" | sed -n 's/.*iops average \([0-9]*\).*/\1/p' | tail -n 1)
    [ -n "$iops" ] || { echo "- - - -"; return 0; }
    awk -v i="$iops" -v b="$(bytes "$bs")" -v q="$qd" 'BEGIN { printf "%d %.1f %.1f -\n", i, i * b / 1048576, (i > 0 ? q * 1e6 / i : 0) }'
  fi
}

warm() { # NAME: read the whole working set once (fills the cache / page cache)
  if [ "$ENGINE" = fio ]; then
    local url="iscsi://127.0.0.1:${PORT[$1]}/${IQN[$1]}/1"
    timeout -k 5 300 "$FIO" --name=warm --ioengine=libiscsi "--filename=${url//:/\\:}" --rw=read \
      --bs=512k --iodepth=8 --size="$WS_BYTES" --output="$RUN/warm-$1.txt" >/dev/null 2>&1 ||
      say "warm-up of $1 failed"
  else
    run_point "$1" read 512K 8 >/dev/null
  fi
}

record() { echo -e "$1\t$2\t$3\t$4" >> "$RESULTS"; } # TABLE ROW TARGET VALUES

# ---------------------------------------------------------------- tables
# table ID TITLE FIELD(1=iops 2=MiB/s 3=mean us 4=p99 us) ROWS...: markdown, ratio vs tgtd
table() {
  local id=$1 title=$2 field=$3; shift 3
  python3 - "$RESULTS" "$id" "$title" "$field" "${COLS[*]}" "$@" <<'PY'
import sys
path, tid, title, field, cols = sys.argv[1:6]
rows = sys.argv[6:]
field = int(field)
cols = cols.split()
vals = {}
for line in open(path):
    t, row, tgt, v = line.rstrip("\n").split("\t")
    if t == tid:
        x = v.split()[field - 1]
        vals[(row, tgt)] = None if x == "-" else float(x)
lower = field >= 3
print(f"\n### {title}\n")
others = [c for c in cols if c != "tgtd"]
head = ["request"] + cols + ([f"{c}/tgtd" for c in others] if "tgtd" in cols else [])
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for r in rows:
    cells = [r]
    for c in cols:
        v = vals.get((r, c))
        cells.append("skipped" if (r, c) not in vals else ("n/a" if v is None else (f"{v:.0f}" if field == 1 else f"{v:.1f}")))
    if "tgtd" in cols:
        t = vals.get((r, "tgtd"))
        for c in others:
            v = vals.get((r, c))
            cells.append(f"{v / t:.2f}" if v is not None and t else "n/a")
    print("| " + " | ".join(cells) + " |")
print("\n(" + ("lower is better: ratio < 1 means faster than tgtd" if lower else "higher is better: ratio > 1 means more than tgtd") + ")")
PY
}

loadavg() { echo "loadavg $1: $(cut -d' ' -f1-3 /proc/loadavg)"; }

# ================================================================ run
T0=$(date +%s)
say "engine=$ENGINE${FIO:+ ($FIO)} numatgtd=$BIN_SRC DURATION=${DURATION}s LUN=$LUN_SIZE workset=$WORKSET run dir=$RUN"

COLS=()
for m in $MODES; do
  start_numatgtd "$m" "$m" && COLS+=("$m") || true
done
if [ ${#COLS[@]} = 0 ]; then
  say "no cache mode ran; numatgtd with no cache section instead (column 'numatgtd')"
  if start_numatgtd numatgtd ""; then COLS+=(numatgtd); fi
fi
if [ "${NO_TGTD:-0}" != 1 ]; then
  if start_tgtd; then COLS+=(tgtd); else SKIP[tgtd]="tgtd did not start"; fi
fi
[ ${#COLS[@]} -gt 0 ] || { say "nothing to measure"; exit 1; }

echo "# numatgt block-cache benchmark ($(date -u +%FT%TZ), $(nproc) CPUs, $(uname -r))"
echo
echo "engine: $ENGINE; ${DURATION}s per point; LUN $LUN_SIZE files in $BENCH_DIR; working set $WORKSET; numatgtd: $BIN_SRC ($(stat -c %y "$BIN_SRC" | cut -d. -f1))"
for m in $MODES numatgtd tgtd; do
  [ -z "${SKIP[$m]:-}" ] || echo "- skipped **$m**: ${SKIP[$m]}"
done
echo "- measured: ${COLS[*]}"
ign=
for m in $MODES; do [ -z "${IGNORED[$m]:-}" ] || ign+=" $m"; done
[ -z "$ign" ] || echo "- **WARNING**: numatgtd accepted the cache section for$ign but its log shows no cache: it probably ignores the mode, so these columns are one code path (today's O_DIRECT path) measured several times; their spread is run-to-run noise."


for n in "${COLS[@]}"; do warm "$n"; done

# A: processing time vs request size, QD1 at a low fixed rate
A_HOW="random read QD1 at $RATE_IOPS IOPS"
[ "$ENGINE" = fio ] || A_HOW="iscsi-perf: unthrottled QD1 over the whole LUN, latency = 1/IOPS"
echo; loadavg before
for bs in $LAT_SIZES; do
  for n in "${COLS[@]}"; do record A "$bs" "$n" "$(run_point "$n" randread "$bs" 1 "$RATE_IOPS")"; done
done
table A "A1. Processing time vs request size: mean completion latency (µs), $A_HOW (Fig. 5-9)" 3 $LAT_SIZES
table A "A2. Processing time vs request size: p99 completion latency (µs), same runs" 4 $LAT_SIZES
loadavg after

# B: throughput vs request size, QD32 on warm data
echo; loadavg before
for bs in $BW_SIZES; do
  for n in "${COLS[@]}"; do record B "$bs" "$n" "$(run_point "$n" randread "$bs" 32)"; done
done
table B "B. Throughput vs request size (MiB/s), random read QD32, warm working set (Fig. 5-11)" 2 $BW_SIZES
loadavg after

# C: 4K
echo; loadavg before
for n in "${COLS[@]}"; do
  record C "randread-QD1" "$n" "$(run_point "$n" randread 4K 1)"
  record C "randread-QD32" "$n" "$(run_point "$n" randread 4K 32)"
  record C "randwrite-QD32" "$n" "$(run_point "$n" randwrite 4K 32)"
done
table C "C. 4 KiB IOPS" 1 randread-QD1 randread-QD32 randwrite-QD32
table C "C'. 4 KiB mean completion latency (µs)" 3 randread-QD1 randread-QD32 randwrite-QD32
loadavg after

# D: cache block size sweep (numa only; tgtd measured once as the reference)
echo
if [[ " ${COLS[*]} " == *" numa "* ]]; then
  loadavg before
  stop_pid "${PID[numa]}"; PID[numa]=
  SAVED_COLS=("${COLS[@]}")
  COLS=()
  for bs in $BLOCK_SIZES; do
    n=numa-$bs
    if start_numatgtd "$n" numa "$bs"; then
      # the numa LUN file is shared by the sweep's daemons, one at a time
      COLS+=("$n"); warm "$n"
      for rs in $SWEEP_SIZES; do record D "$rs" "$n" "$(run_point "$n" randread "$rs" 32)"; done
      stop_pid "${PID[$n]}"; PID[$n]=
    else
      echo "- skipped block_size $bs: ${SKIP[$n]:-}"
    fi
  done
  if [[ " ${SAVED_COLS[*]} " == *" tgtd "* ]]; then
    COLS+=(tgtd)
    for rs in $SWEEP_SIZES; do record D "$rs" tgtd "$(run_point tgtd randread "$rs" 32)"; done
  fi
  if [ ${#COLS[@]} = 0 ] || [ "${COLS[*]}" = tgtd ]; then
    echo "### D. Cache block size sweep: skipped (no numatgtd with cache.block_size started)"
  else
  table D "D. Cache block size sweep (MiB/s), random read QD32, numatgtd numa with cache.block_size = column (Fig. 5-10)" 2 $SWEEP_SIZES
  fi
  loadavg after
  COLS=("${SAVED_COLS[@]}")
else
  echo "### D. Cache block size sweep: skipped (no numatgtd with cache mode numa)"
fi
echo
echo "total $(( $(date +%s) - T0 )) s"
