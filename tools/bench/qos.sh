#!/usr/bin/env bash
# Per-LUN QoS (issue 30): what a limit lets through, measured. Not a test, not in CI.
#
#   sudo tools/bench/qos.sh                 # ~2.5 min: builds release, runs, prints the table
#   sudo SECS=5 tools/bench/qos.sh          # shorter points (the 10 s of the issue by default)
#   sudo NUMATGTD_BIN=/path/numatgtd tools/bench/qos.sh
#
# numatgtd is started as tgtd is (`-f -C N --iscsi portal=127.0.0.1:PORT`, default settings),
# its LUNs made and limited with Debian's tgtadm (`--op update --params qos_…`); Debian's
# tgtd runs beside it, started the same way, for the unlimited reference point. Load: fio
# with the libiscsi engine (tools/build-fio-libiscsi.sh), one session per fio job. LUN
# files on tmpfs. Points:
#   iops     4 KiB random reads, QD32, LUN 1 at qos_iops=5000 (issue: 4750-5250)
#   bps      512 KiB sequential reads, QD32, LUN 1 at qos_bps=50000000 (47.5-52.5 MB/s)
#   burst    4 KiB random reads, QD32, LUN 1 at qos_iops=2000,qos_burst=2,qos_burst_factor=2
#            after 3 s idle: fio's per-second series (~4000 for 2 s, then ~2000)
#   share    two sessions at QD32 on LUN 1 at qos_iops=5000: each one's share (45-55 %)
#   alone    LUN 2 (no limit), 4 KiB random reads QD32, alone; tgtd's LUN the same
#   beside   LUN 2 again while LUN 1 (qos_iops=5000) is loaded by another fio: LUN 2's IOPS
#            within 10 % of `alone`, and numatgtd's CPU per I/O of LUN 2's and LUN 1's I/Os
#   paced    the same without QoS: LUN 1 unlimited, its fio paced to 5000 IOPS by itself
#            (what such a neighbour costs on this machine anyway: beside/paced is QoS's own)
# numatgtd's and tgtd's CPU time (utime+stime from /proc/PID/stat) per I/O and the load
# average are printed beside each point. Results: target/bench/qos-DATE/ (fio JSON, logs).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=../bench-lib.sh
. "$REPO/tools/bench-lib.sh"
say() { echo "bench-qos: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "needs root (tgtd, tmpfs)"; exit 1; }
for t in tgtd tgtadm timeout python3 awk; do
  command -v "$t" >/dev/null || { say "$t missing: run tools/install-test-deps.sh"; exit 1; }
done
SECS=${SECS:-10}
[[ "$SECS" =~ ^[1-9][0-9]?$ ]] || { say "SECS: 1..99, not $SECS"; exit 1; }
LUN_MB=${LUN_MB:-256}
HZ=$(getconf CLK_TCK)
IQN=iqn.2026-11.org.numatgt:bench-qos
if [ -d "${HOME:-/root}/.cargo/bin" ]; then PATH="${HOME:-/root}/.cargo/bin:$PATH"; fi
BIN_SRC=${NUMATGTD_BIN:-$REPO/target/release/numatgtd}
if [ -z "${NUMATGTD_BIN:-}" ]; then
  say "cargo build --release -p target-server"
  (cd "$REPO" && cargo build --release -q -p target-server) || { say "release build failed"; exit 1; }
fi
FIO=${FIO:-$REPO/target/tools/fio}
has_libiscsi "$FIO" || FIO=$(FIO_DIR=$(dirname "$FIO") "$REPO/tools/build-fio-libiscsi.sh" | tail -n 1) || true
has_libiscsi "$FIO" || { say "no fio with the libiscsi engine (tools/build-fio-libiscsi.sh failed)"; exit 1; }
OUT=${BENCH_OUT:-$REPO/target/bench}/qos-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
cp "$BIN_SRC" "$OUT/numatgtd"
LUN_DIR=$(mktemp -d /dev/shm/numatgt-bench-qos.XXXXXX)
declare -A PID PORT CTL
cleanup() {
  set +e
  [ -z "${PID[numatgtd]:-}" ] || stop_pid "${PID[numatgtd]}"
  [ -z "${PID[tgtd]:-}" ] || stop_tgtd_pid "${CTL[tgtd]}" "${PID[tgtd]}"
  rm -rf "$LUN_DIR"
  rm -f "$OUT/numatgtd"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start() { # NAME
  local t=$1 port ctl
  port=$(free_port "${NEXT_PORT:-23700}")
  ctl=$(free_ctl "${NEXT_CTL:-71}")
  NEXT_PORT=$((port + 1)) NEXT_CTL=$((ctl + 1))
  if [ "$t" = numatgtd ]; then
    mkdir -p "$LUN_DIR/state"
    "$OUT/numatgtd" -f -C "$ctl" --iscsi "portal=127.0.0.1:$port" --state-dir "$LUN_DIR/state" > "$OUT/$t.log" 2>&1 &
  else
    tgtd -f -C "$ctl" --iscsi "portal=127.0.0.1:$port" > "$OUT/$t.log" 2>&1 &
  fi
  PID[$t]=$! PORT[$t]=$port CTL[$t]=$ctl
  wait_port "$port" "${PID[$t]}" || { tail -n 20 "$OUT/$t.log" >&2; exit 1; }
  tgtadm -C "$ctl" --lld iscsi --op new --mode target --tid 1 -T "$IQN"
  for l in 1 2; do
    truncate -s "${LUN_MB}M" "$LUN_DIR/$t-$l.img"
    tgtadm -C "$ctl" --lld iscsi --op new --mode logicalunit --tid 1 --lun "$l" -b "$LUN_DIR/$t-$l.img"
  done
  tgtadm -C "$ctl" --lld iscsi --op bind --mode target --tid 1 -I ALL
  say "$t: pid ${PID[$t]}, 127.0.0.1:$port, control port $ctl"
}
limit() { tgtadm -C "${CTL[numatgtd]}" --lld iscsi --op update --mode logicalunit --tid 1 --lun 1 --params "$1"; }
url() { local u="iscsi://127.0.0.1:${PORT[$1]}/$IQN/$2"; echo "${u//:/\\:}"; }
fio_run() { # NAME TARGET LUN RW BS QD JOBS [extra fio options]: fio JSON in $OUT/NAME.json
  local name=$1 t=$2 l=$3 rw=$4 bs=$5 qd=$6 jobs=$7
  shift 7
  timeout -k 5 $((SECS + 40)) "$FIO" --name="$name" --ioengine=libiscsi "--filename=$(url "$t" "$l")" \
    --rw="$rw" --bs="$bs" --iodepth="$qd" --numjobs="$jobs" --size="${LUN_MB}M" --time_based \
    --runtime="$SECS" --norandommap --randrepeat=0 --output-format=json --output="$OUT/$name.json" "$@" \
    > "$OUT/$name.err" 2>&1 || say "fio $name failed: $(tail -n 2 "$OUT/$name.err" | tr '\n' ' ')"
}
row() { # NAME TICKS [JOB]: IOPS, MB/s, CPU µs per I/O of the point's fio JSON
  python3 - "$OUT/$1.json" "$2" "$HZ" "${3:-}" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ticks, hz, job = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
jobs = d["jobs"] if job == "" else [d["jobs"][int(job)]]
ios = sum(j["read"]["total_ios"] + j["write"]["total_ios"] for j in jobs)
rt = max(j["job_runtime"] for j in jobs) / 1000.0 or 1
iops = sum(j["read"]["iops"] + j["write"]["iops"] for j in jobs)
mbs = sum(j["read"]["bw_bytes"] + j["write"]["bw_bytes"] for j in jobs) / 1e6
cpu = ticks / hz * 1e6 / ios if ios else 0
print(f"{iops:.0f} {mbs:.1f} {cpu:.1f} {ios}")
PY
}
load() { cut -d' ' -f1 /proc/loadavg; }
REPORT=$OUT/report.txt
line() { printf '%s\n' "$*" | tee -a "$REPORT"; }

start numatgtd
start tgtd
# warm: one pass over both LUNs of both targets (numatgtd's cache, the page cache)
for t in numatgtd tgtd; do for l in 1 2; do
  timeout -k 5 120 "$FIO" --name=warm --ioengine=libiscsi "--filename=$(url "$t" "$l")" --rw=read \
    --bs=1M --iodepth=8 --size="${LUN_MB}M" --output="$OUT/warm-$t-$l.txt" > /dev/null 2>&1 || say "warm-up of $t LUN $l failed"
done; done
line "# numatgtd QoS, $SECS s points, fio libiscsi, $(nproc) CPUs, $(date -u +%FT%TZ)"
line "point | IOPS | MB/s | target CPU µs/IO | load | aim"

# iops
limit "qos_iops=5000"
c0=$(cpu_ticks "${PID[numatgtd]}"); fio_run iops numatgtd 1 randread 4k 32 1; c1=$(cpu_ticks "${PID[numatgtd]}")
read -r iops mbs cpu _ < <(row iops $((c1 - c0)))
line "iops (qos_iops=5000, 4k rr QD32) | $iops | $mbs | $cpu | $(load) | 4750-5250"

# bps
limit "qos_iops=0,qos_bps=50000000"
c0=$(cpu_ticks "${PID[numatgtd]}"); fio_run bps numatgtd 1 read 512k 32 1; c1=$(cpu_ticks "${PID[numatgtd]}")
read -r iops mbs cpu _ < <(row bps $((c1 - c0)))
line "bps (qos_bps=50000000, 512k sr QD32) | $iops | $mbs | $cpu | $(load) | 47.5-52.5 MB/s"

# burst: idle first, so that the bucket is full
limit "qos_bps=0,qos_iops=2000,qos_burst=2,qos_burst_factor=2"
sleep 3
c0=$(cpu_ticks "${PID[numatgtd]}")
fio_run burst numatgtd 1 randread 4k 32 1 --write_iops_log="$OUT/burst" --log_avg_msec=1000
c1=$(cpu_ticks "${PID[numatgtd]}")
read -r iops mbs cpu _ < <(row burst $((c1 - c0)))
series=$(awk -F, '{ printf "%s%d", (NR > 1 ? " " : ""), $2 }' "$OUT"/burst_iops*.log 2>/dev/null || true)
line "burst (qos_iops=2000, 2x for 2 s) | $iops | $mbs | $cpu | $(load) | per second: $series"

# share: two sessions
limit "qos_burst=0,qos_iops=5000"
c0=$(cpu_ticks "${PID[numatgtd]}"); fio_run share numatgtd 1 randread 4k 32 2; c1=$(cpu_ticks "${PID[numatgtd]}")
read -r iops _ cpu _ < <(row share $((c1 - c0)))
read -r a _ _ _ < <(row share 0 0)
read -r b _ _ _ < <(row share 0 1)
line "share (2 sessions, qos_iops=5000) | $iops | - | $cpu | $(load) | sessions $a / $b = $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.1f %% / %.1f %%", 100 * a / (a + b), 100 * b / (a + b) }') (45-55 %)"

# alone: LUN 2, unlimited, numatgtd then tgtd
c0=$(cpu_ticks "${PID[numatgtd]}"); fio_run alone numatgtd 2 randread 4k 32 1; c1=$(cpu_ticks "${PID[numatgtd]}")
read -r alone_iops mbs alone_cpu _ < <(row alone $((c1 - c0)))
line "alone (LUN 2, no limit, 4k rr QD32) | $alone_iops | $mbs | $alone_cpu | $(load) | reference"
c0=$(cpu_ticks "${PID[tgtd]}"); fio_run tgtd-alone tgtd 2 randread 4k 32 1; c1=$(cpu_ticks "${PID[tgtd]}")
read -r tiops mbs tcpu _ < <(row tgtd-alone $((c1 - c0)))
line "tgtd alone (LUN 2, 4k rr QD32) | $tiops | $mbs | $tcpu | $(load) | numatgtd/tgtd $(awk -v a="$alone_iops" -v b="$tiops" 'BEGIN { printf "%.2f", a / b }')"

# neighbour NAME [fio options of LUN 1's load]: LUN 2's 4 KiB random reads at QD32 while
# another fio loads LUN 1; sets NB_IOPS NB_MBS NB_CPU (numatgtd's CPU µs per I/O of both
# LUNs' I/Os: LUN 1's over that second-shorter window estimated at its rate) NB_LUN1
neighbour() {
  local name=$1 bg c0 c1 ios2
  shift
  fio_run "$name-lun1" numatgtd 1 randread 4k 32 1 "$@" &
  bg=$!
  sleep 1
  c0=$(cpu_ticks "${PID[numatgtd]}"); fio_run "$name" numatgtd 2 randread 4k 32 1; c1=$(cpu_ticks "${PID[numatgtd]}")
  wait "$bg" || true
  read -r NB_IOPS NB_MBS _ ios2 < <(row "$name" 0)
  read -r NB_LUN1 _ _ _ < <(row "$name-lun1" 0)
  NB_CPU=$(awk -v t=$((c1 - c0)) -v hz="$HZ" -v n="$ios2" -v l="$NB_LUN1" -v s="$SECS" 'BEGIN { printf "%.1f", t / hz * 1e6 / (n + l * s) }')
}
of_alone() { awk -v a="$1" -v b="$alone_iops" 'BEGIN { printf "%.1f %% of alone", 100 * a / b }'; }

# beside: LUN 2 while LUN 1 is loaded at its limit
neighbour beside
beside_iops=$NB_IOPS
line "beside (LUN 2 while LUN 1 at 5000) | $NB_IOPS | $NB_MBS | $NB_CPU | $(load) | $(of_alone "$NB_IOPS") (>= 90 %); LUN 1 meanwhile $NB_LUN1 IOPS"

# paced: the same neighbour without QoS (LUN 1 unlimited, its fio paced to 5000 IOPS by
# itself): what a tenant at that rate costs LUN 2 on this machine anyway (the initiators
# and the target share its CPUs), to tell QoS's own cost from the neighbour's
limit "qos_iops=0"
neighbour paced --rate_iops=5000
line "paced (LUN 2 while LUN 1 paced by fio, no QoS) | $NB_IOPS | $NB_MBS | $NB_CPU | $(load) | $(of_alone "$NB_IOPS"); beside/paced $(awk -v a="$beside_iops" -v b="$NB_IOPS" 'BEGIN { printf "%.3f", a / b }'); LUN 1 meanwhile $NB_LUN1 IOPS"
line "# raw: $OUT"
