#!/bin/bash
# One benchmark anyone can rerun (issue 14): numatgtd against Debian's tgtd, same run, same
# machine, each started the way a user starts it.
#
#   numatgtd   started like tgtd (`-f -C N --iscsi portal=127.0.0.1:PORT`), LUN made by
#              Debian's tgtadm, default settings
#   numatgtd-poll  the same, plus `--busy-poll BUSY_POLL` (event threads keep polling
#              BUSY_POLL µs after their last event before sleeping); BUSY_POLL=0: left out
#   tgtd       Debian's tgtd, rdwr LUN (the reference)
#   tgtd-null  Debian's tgtd, LUN with `--bstype null` (no storage at all: the floor)
#   numatgtd-null  numatgtd started like tgtd, LUN with `--bstype null` made by tgtadm
#              (numatgtd's own floor); NUMATGTD_NULL=0: left out (a numatgtd without null)
#   numatgtd-base  only with BASE_BIN=PATH: another numatgtd binary (the one before a change),
#              started and given its LUN exactly as numatgtd: before/after in the same run
#
# Each on its own free 127.0.0.1 port and tgtd control port (never 3260 nor the default
# control port), the same LUN size (LUN_MB) of the same random data on tmpfs, each LUN read
# once sequentially (warm). Then every point of the matrix runs in alternation (numatgtd,
# numatgtd-poll, tgtd, tgtd-null, numatgtd-null, numatgtd, ... ROUNDS rounds of SECS s each). Load: fio with
# the libiscsi engine (target/tools/fio; built by tools/build-fio-libiscsi.sh when missing;
# numjobs = sessions), else iscsi-perf for the read points of 1 session (no percentiles).
#
# Per point: median IOPS and MB/s of each target, numatgtd/tgtd and numatgtd/tgtd-null (and
# the same for numatgtd-poll), numatgtd-null/tgtd-null and numatgtd/numatgtd-null, p50/p99 completion latency (fio), each target's CPU µs per I/O
# (utime+stime of /proc/PID/stat over the point / I/Os done), the initiator's (fio's) CPU µs
# per I/O, and a note where fio used >= 90 % of a CPU per session (initiator-bound). Per run:
# one-stream loopback TCP throughput (before and after), /proc/loadavg before and after, a
# warning when the 1-minute load was above CPUs/2 at the start. Output: a Markdown table
# (stdout and RUN_DIR/results.md), RUN_DIR/results.csv, RUN_DIR/chart.png (gnuplot;
# tools/install-bench-deps.sh), the raw fio JSON and the daemons' logs,
# RUN_DIR = target/bench/run-YYYYmmdd-HHMMSS.
# Everything started is stopped by PID on exit, Ctrl-C or error. Root (tgtd, /dev/shm).
#
# RBD=1 (issue 16): the same on Ceph RBD LUNs instead. tools/ceph/up.sh brings up a throw-away
# cluster (1 monitor + 1 memstore OSD on 127.0.0.1, in a mktemp directory), one image per
# target of LUN_MB (256) MiB of the same random data (rbd import), and the columns are
#   numatgtd          --bstype rbd, default settings (cache numa)
#   numatgtd-nocache  the same plus `cache=off` in --bsopts (every I/O goes to the cluster),
#                     and NOCACHE_BSOPTS after it (e.g. `rbd_cache=true`: librbd's own
#                     cache, writearound by default, as tgt-rbd runs with)
#   tgtd-rbd          Debian's tgtd with tgt-rbd's bs_rbd, the same --backing-store/--bsopts
# points (default) rr4k-qd1 rr4k-qd32 rw4k-qd32 sr64k-qd8; write points end with a
# SYNCHRONIZE CACHE (fio --end_fsync=1) inside the measured time, so a write-back cache is
# not credited with writes still in RAM. Adds the OSD's CPU µs per I/O and an `rbd bench`
# baseline (librbd straight, no iSCSI) of the same cluster. The cluster is stopped by PID
# (tools/ceph/down.sh) after the targets, on exit, Ctrl-C or error.
#
# Env: QUICK=1 (smoke: 1 round, 2 s points, 4 points), ROUNDS (3), SECS (5), SESSIONS ("1";
#   e.g. "1 2 4 8"), POINTS (all: rr4k-qd1 rr4k-qd32 rw4k-qd32 sr64k-qd8 sr64k-qd32
#   sr512k-qd8 sr512k-qd32 sw128k-qd8), LUN_MB (512), NUMATGTD_BIN (default: cargo build
#   --release, target/release/numatgtd), FIO (target/tools/fio), ENGINE (fio|iscsi-perf),
#   BENCH_OUT (target/bench), PORT_BASE (23500), CTL_BASE (61), BUSY_POLL (50 µs; 0: no
#   numatgtd-poll column), NUMATGTD_NULL (1; 0: no numatgtd-null column), BASE_BIN (unset; a
#   numatgtd binary: the numatgtd-base column, numatgtd/base ratios), RBD (0; 1: the RBD
#   mode above, no numatgtd-poll, numatgtd-null or numatgtd-base column), NOCACHE_BSOPTS
#   (RBD=1: more bsopts for numatgtd-nocache, ";"-separated), ISER (0; 1: run
#   tools/bench/iser.sh instead: the iSER benchmark in the QEMU guest, its own knobs).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# ISER=1 (issue 24): the iSER benchmark in the QEMU guest instead, tools/bench/iser.sh
if [ "${ISER:-0}" = 1 ]; then exec "$HERE/iser.sh" "$@"; fi
# shellcheck source=../bench-lib.sh
. "$REPO/tools/bench-lib.sh"
say() { echo "bench: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "needs root (tgtd, tmpfs)"; exit 1; }
for t in tgtd tgtadm timeout ss python3 awk; do
  command -v "$t" >/dev/null || { say "$t missing: run tools/install-test-deps.sh"; exit 1; }
done

ALL_POINTS="rr4k-qd1 rr4k-qd32 rw4k-qd32 sr64k-qd8 sr64k-qd32 sr512k-qd8 sr512k-qd32 sw128k-qd8"
RBD=${RBD:-0}
case $RBD in 0 | 1) ;; *) say "RBD: 0 or 1, not $RBD"; exit 1 ;; esac
if [ "$RBD" = 1 ]; then
  for t in ceph-mon ceph-osd ceph rbd uuidgen; do
    command -v "$t" >/dev/null || { say "$t missing (RBD=1): run tools/install-test-deps.sh"; exit 1; }
  done
  [ -e /usr/lib/tgt/backing-store/bs_rbd.so ] || { say "tgtd has no rbd backing store: apt-get install tgt-rbd"; exit 1; }
  POINTS=${POINTS:-"rr4k-qd1 rr4k-qd32 rw4k-qd32 sr64k-qd8"}
  LUN_MB=${LUN_MB:-256}
fi
if [ "${QUICK:-0}" = 1 ]; then
  ROUNDS=${ROUNDS:-1} SECS=${SECS:-2} POINTS=${POINTS:-"rr4k-qd1 rr4k-qd32 rw4k-qd32 sr512k-qd8"}
else
  ROUNDS=${ROUNDS:-3} SECS=${SECS:-5} POINTS=${POINTS:-$ALL_POINTS}
fi
SESSIONS=${SESSIONS:-1}
PORT_BASE=${PORT_BASE:-23500} CTL_BASE=${CTL_BASE:-61}
# never 3260 (a tgtd of the machine may serve it) nor the default control port 0
if ! { [ "$PORT_BASE" -gt 3260 ] && [ "$CTL_BASE" -ge 1 ]; }; then say "PORT_BASE must be > 3260, CTL_BASE >= 1"; exit 1; fi
LUN_MB=${LUN_MB:-512}
BUSY_POLL=${BUSY_POLL:-50}
[ "$RBD" = 0 ] || BUSY_POLL=0 # no numatgtd-poll column on RBD
if ! { [[ "$BUSY_POLL" =~ ^[0-9]+$ ]] && [ "$BUSY_POLL" -le 10000 ]; }; then
  say "BUSY_POLL: 0..10000 (µs), not $BUSY_POLL"; exit 1
fi
BUSY_POLL=$((10#$BUSY_POLL))
HZ=$(getconf CLK_TCK)
NCPU=$(nproc)
IQN=iqn.2026-11.org.numatgt:bench
NUMATGTD_NULL=${NUMATGTD_NULL:-1}
case $NUMATGTD_NULL in 0 | 1) ;; *) say "NUMATGTD_NULL: 0 or 1, not $NUMATGTD_NULL"; exit 1 ;; esac
[ "$RBD" = 0 ] || NUMATGTD_NULL=0 # no numatgtd-null column on RBD
TARGETS=(numatgtd tgtd tgtd-null)
[ "$BUSY_POLL" = 0 ] || TARGETS=(numatgtd numatgtd-poll tgtd tgtd-null)
[ "$NUMATGTD_NULL" = 0 ] || TARGETS+=(numatgtd-null)
BASE_BIN=${BASE_BIN:-}
[ "$RBD" = 0 ] || BASE_BIN= # no numatgtd-base column on RBD
if [ -n "$BASE_BIN" ]; then
  [ -x "$BASE_BIN" ] || { say "BASE_BIN=$BASE_BIN is not an executable"; exit 1; }
  TARGETS=(numatgtd numatgtd-base "${TARGETS[@]:1}")
fi
[ "$RBD" = 0 ] || TARGETS=(numatgtd numatgtd-nocache tgtd-rbd)
FILE_TARGETS=() # the targets with a LUN file on tmpfs (not the null ones; none with RBD=1)
for t in "${TARGETS[@]}"; do [[ "$t" == *-null ]] || [ "$RBD" = 1 ] || FILE_TARGETS+=("$t"); done

# shellcheck source=points.sh
. "$HERE/points.sh" # point_spec
for p in $POINTS; do
  point_spec "$p" >/dev/null || { say "unknown point $p (known: $ALL_POINTS)"; exit 1; }
  [ -z "$(point_fio_flags "$p")" ] || { say "point $p needs the kernel's block layer (tools/bench/iser.sh), not libiscsi"; exit 1; }
done
for s in $SESSIONS; do [[ "$s" =~ ^[1-9][0-9]?$ ]] || { say "SESSIONS: 1..99, not $s"; exit 1; }; done

# ---- the daemon and the load generator
if [ -d "${HOME:-/root}/.cargo/bin" ]; then PATH="${HOME:-/root}/.cargo/bin:$PATH"; fi
BIN_SRC=${NUMATGTD_BIN:-}
if [ -z "$BIN_SRC" ]; then
  say "cargo build --release -p target-server"
  (cd "$REPO" && cargo build --release -q -p target-server) || { say "release build failed"; exit 1; }
  BIN_SRC=$REPO/target/release/numatgtd
fi
[ -x "$BIN_SRC" ] || { say "$BIN_SRC missing"; exit 1; }
FIO=${FIO:-$REPO/target/tools/fio}
ENGINE=${ENGINE:-fio}
if [ "$ENGINE" = fio ] && ! has_libiscsi "$FIO"; then
  say "no fio with the libiscsi engine at $FIO: building it (tools/build-fio-libiscsi.sh, ~1 min)"
  FIO=$(FIO_DIR=$(dirname "$FIO") "$REPO/tools/build-fio-libiscsi.sh" | tail -n 1) || true
  has_libiscsi "$FIO" || { say "fio build failed: iscsi-perf fallback"; ENGINE=iscsi-perf; }
fi
if [ "$ENGINE" = iscsi-perf ]; then
  command -v iscsi-perf >/dev/null || { say "neither fio-libiscsi nor iscsi-perf"; exit 1; }
  say "iscsi-perf: read points of 1 session only, no latency percentiles"
fi

RUN_DIR=${BENCH_OUT:-$REPO/target/bench}/run-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$RUN_DIR/raw"
cp "$BIN_SRC" "$RUN_DIR/numatgtd" # a rebuild during the run does not change the daemon
BIN=$RUN_DIR/numatgtd
BASE=
if [ -n "$BASE_BIN" ]; then cp "$BASE_BIN" "$RUN_DIR/numatgtd-base"; BASE=$RUN_DIR/numatgtd-base; fi
need_kb=$(( (LUN_MB * (${#FILE_TARGETS[@]} + 1) + 64) * 1024 )) # the LUNs, one LUN_MB spare
[ "$(df --output=avail -k /dev/shm | tail -n 1)" -gt "$need_kb" ] ||
  { say "/dev/shm has no room for ${#FILE_TARGETS[@]} LUNs of $LUN_MB MiB (+ $LUN_MB MiB spare)"; exit 1; }
if [ "$RBD" = 1 ]; then # the memstore OSD keeps every image in RAM, so do the caches
  need_mb=$(( LUN_MB * (${#TARGETS[@]} * 2 + 2) + 1024 ))
  avail_mb=$(awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo)
  [ "$avail_mb" -gt "$need_mb" ] || { say "RBD=1 with LUN_MB=$LUN_MB wants ~$need_mb MiB of free memory, $avail_mb available"; exit 1; }
fi
LUN_DIR=$(mktemp -d /dev/shm/numatgt-bench.XXXXXX)
CEPH_DIR="" OSD_PID=""

# ---- processes, stopped by PID
declare -A PID PORT CTL
cleanup() {
  set +e
  local t
  for t in "${TARGETS[@]}"; do
    [ -n "${PID[$t]:-}" ] || continue
    if [[ "$t" == numatgtd* ]]; then stop_pid "${PID[$t]}"; else stop_tgtd_pid "${CTL[$t]}" "${PID[$t]}"; fi
    PID[$t]=
  done
  if [ -n "$CEPH_DIR" ]; then # after the targets, which still hold the images
    timeout -k 5 120 "$REPO/tools/ceph/down.sh" "$CEPH_DIR" || say "tools/ceph/down.sh $CEPH_DIR failed"
    CEPH_DIR=
  fi
  rm -rf "$LUN_DIR"
  rm -f "$BIN" ${BASE:+"$BASE"}
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_target() { # NAME: start it on its port and control port, make target 1 with LUN 1
  local t=$1 port ctl lun_opts
  port=$(free_port "${NEXT_PORT:-$PORT_BASE}")
  ctl=$(free_ctl "${NEXT_CTL:-$CTL_BASE}")
  NEXT_PORT=$((port + 1)) NEXT_CTL=$((ctl + 1))
  if [ "$t" = numatgtd ] || [ "$t" = numatgtd-nocache ] || [ "$t" = numatgtd-null ]; then
    mkdir -p "$LUN_DIR/state-$t"
    "$BIN" -f -C "$ctl" --iscsi "portal=127.0.0.1:$port" --state-dir "$LUN_DIR/state-$t" > "$RUN_DIR/$t.log" 2>&1 &
  elif [ "$t" = numatgtd-base ]; then # the other binary, started the same way
    mkdir -p "$LUN_DIR/state-$t"
    "$BASE" -f -C "$ctl" --iscsi "portal=127.0.0.1:$port" --state-dir "$LUN_DIR/state-$t" > "$RUN_DIR/$t.log" 2>&1 &
  elif [ "$t" = numatgtd-poll ]; then # the same, plus busy polling (its own state directory)
    mkdir -p "$LUN_DIR/state-$t"
    "$BIN" -f -C "$ctl" --iscsi "portal=127.0.0.1:$port" --state-dir "$LUN_DIR/state-$t" \
      --busy-poll "$BUSY_POLL" > "$RUN_DIR/$t.log" 2>&1 &
  else
    tgtd -f -C "$ctl" --iscsi "portal=127.0.0.1:$port" > "$RUN_DIR/$t.log" 2>&1 &
  fi
  PID[$t]=$! PORT[$t]=$port CTL[$t]=$ctl
  wait_port "$port" "${PID[$t]}" || { tail -n 20 "$RUN_DIR/$t.log" >&2; exit 1; }
  case $t in
    numatgtd | numatgtd-base | numatgtd-poll | tgtd) lun_opts=(-b "$LUN_DIR/$t.img") ;;
    tgtd-null | numatgtd-null) lun_opts=(--bstype null -b /dev/null) ;; # 1 TiB of nothing; I/O stays in LUN_MB
    numatgtd-nocache) lun_opts=(--bstype rbd -b "rbd/bench-$t" --bsopts "conf=$CEPH_DIR/ceph.conf;id=admin;cache=off${NOCACHE_BSOPTS:+;$NOCACHE_BSOPTS}") ;;
    tgtd-rbd) lun_opts=(--bstype rbd -b "rbd/bench-$t" --bsopts "conf=$CEPH_DIR/ceph.conf;id=admin") ;;
  esac
  # RBD=1: numatgtd's LUN is the image too, with its default cache mode (numa)
  [ "$RBD" = 0 ] || [ "$t" != numatgtd ] || lun_opts=(--bstype rbd -b "rbd/bench-$t" --bsopts "conf=$CEPH_DIR/ceph.conf;id=admin")
  tgtadm -C "$ctl" --lld iscsi --op new --mode target --tid 1 -T "$IQN"
  tgtadm -C "$ctl" --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 "${lun_opts[@]}" ||
    { say "$t: tgtadm refused the LUN (${lun_opts[*]}); a numatgtd without --bstype null: NUMATGTD_NULL=0"; exit 1; }
  tgtadm -C "$ctl" --lld iscsi --op bind --mode target --tid 1 -I ALL
  say "$t: pid ${PID[$t]}, 127.0.0.1:$port, control port $ctl"
}

url() { echo "iscsi://127.0.0.1:${PORT[$1]}/$IQN/1"; }
fio_url() { local u; u=$(url "$1"); echo "${u//:/\\:}"; } # fio splits --filename at ':'

# measure TARGET POINT SESSIONS ROUND: one bounded run; appends a line to raw.tsv
measure() {
  local t=$1 point=$2 s=$3 r=$4 rw bs qd t0 t1 o0=0 o1=0 out res sync=()
  read -r rw bs qd < <(point_spec "$point")
  # RBD=1: a write point ends with SYNCHRONIZE CACHE, counted in its time (see the header)
  [ "$RBD" = 0 ] || [[ "$rw" != *write* ]] || sync=(--end_fsync=1)
  out=$RUN_DIR/raw/s$s-$point-$t-r$r
  kill -0 "${PID[$t]}" 2>/dev/null || { say "$t (pid ${PID[$t]}) exited: $RUN_DIR/$t.log"; exit 1; }
  [ -z "$OSD_PID" ] || o0=$(cpu_ticks "$OSD_PID")
  t0=$(cpu_ticks "${PID[$t]}")
  if [ "$ENGINE" = fio ]; then
    timeout -k 5 $((SECS + 30)) "$FIO" --name=p --ioengine=libiscsi "--filename=$(fio_url "$t")" \
      --rw="$rw" --bs="$bs" --iodepth="$qd" --numjobs="$s" --group_reporting \
      --size="${LUN_MB}M" --time_based --runtime="$SECS" --norandommap --randrepeat=0 "${sync[@]}" \
      --output-format=json --output="$out.json" > "$out.err" 2>&1 || say "fio failed: $t $point s$s: $(tail -n 2 "$out.err" | tr '\n' ' ')"
    t1=$(cpu_ticks "${PID[$t]}")
    [ -z "$OSD_PID" ] || o1=$(cpu_ticks "$OSD_PID")
    res=$(python3 "$HERE/report.py" fio "$out.json" "$rw" $((t1 - t0)) "$HZ" ${OSD_PID:+$((o1 - o0))})
    ! grep -q "end_fsync failed" "$out.err" || say "WARNING: $t $point: fio's end_fsync failed ($out.err)"
  else
    local rflag=(); [ "$rw" = randread ] && rflag=(-r)
    timeout -k 5 -s INT "$SECS" iscsi-perf -m "$qd" -b $((bs / 512)) "${rflag[@]}" "$(url "$t")" 2>&1 | tr '\r' '\n' > "$out.log" || true
    t1=$(cpu_ticks "${PID[$t]}")
    [ -z "$OSD_PID" ] || o1=$(cpu_ticks "$OSD_PID")
    res=$(python3 "$HERE/report.py" perf "$out.log" "$bs" "$SECS" $((t1 - t0)) "$HZ" ${OSD_PID:+$((o1 - o0))})
  fi
  echo -e "$s\t$point\t$t\t$r\t${res// /\\t}" >> "$RUN_DIR/raw.tsv"
}

warm() { # TARGET: one sequential read of the whole LUN
  if [ "$ENGINE" = fio ]; then
    timeout -k 5 120 "$FIO" --name=warm --ioengine=libiscsi "--filename=$(fio_url "$1")" \
      --rw=read --bs=512k --iodepth=8 --size="${LUN_MB}M" > "$RUN_DIR/raw/warm-$1.txt" 2>&1 || say "warm-up of $1 failed"
  else
    timeout -k 5 -s INT $((LUN_MB / 256 + 3)) iscsi-perf -m 8 -b 1024 "$(url "$1")" > /dev/null 2>&1 || true
  fi
}

# ---- run
META=$RUN_DIR/meta.txt
LOAD0=$(cat /proc/loadavg)
WARN=
if awk -v l="${LOAD0%% *}" -v n="$NCPU" 'BEGIN { exit !(l > n / 2) }'; then
  WARN="1-minute load ${LOAD0%% *} above CPUs/2 ($NCPU CPUs) at the start: another process shares the CPUs; same-run ratios still hold, absolute numbers are low"
  say "WARNING: $WARN"
fi
head -c "${LUN_MB}M" /dev/urandom > "$LUN_DIR/numatgtd.img"
n_points=0
for s in $SESSIONS; do for p in $POINTS; do n_points=$((n_points + 1)); done; done
EST_S=$(( n_points * ${#TARGETS[@]} * ROUNDS * (SECS + 1 + RBD * 2) )) # RBD: slower logins, flushes
RBD_BASE=
if [ "$RBD" = 1 ]; then
  say "run dir $RUN_DIR; RBD images of $LUN_MB MiB (random data); engine $ENGINE"
  CEPH_DIR=$(mktemp -d /tmp/numatgt-bench-ceph.XXXXXX) # short: admin socket paths
  # memstore: all images plus room for the OSD's own objects; the daemons die on their own
  # (CEPH_MAX_LIFE) if this script is SIGKILLed and never runs down.sh
  NOSD=1 OSD_BYTES=$(( (LUN_MB * (${#TARGETS[@]} + 1) + 512) << 20 )) CEPH_MAX_LIFE=$((EST_S * 2 + 1200)) \
    timeout -k 5 180 "$REPO/tools/ceph/up.sh" "$CEPH_DIR" > "$RUN_DIR/ceph-up.log" 2>&1 ||
    { say "tools/ceph/up.sh failed:"; tail -n 20 "$RUN_DIR/ceph-up.log" >&2; exit 1; }
  OSD_PID=$(cat "$CEPH_DIR/run/osd.0.pid")
  if ! { [[ "$OSD_PID" =~ ^[0-9]+$ ]] && kill -0 "$OSD_PID"; }; then say "no OSD pid in $CEPH_DIR/run"; exit 1; fi
  RBDC=(rbd -c "$CEPH_DIR/ceph.conf")
  say "cluster up ($CEPH_DIR, OSD pid $OSD_PID); importing ${#TARGETS[@]} images"
  for t in "${TARGETS[@]}"; do
    timeout -k 5 300 "${RBDC[@]}" import --no-progress "$LUN_DIR/numatgtd.img" "rbd/bench-$t" >> "$RUN_DIR/ceph-up.log" 2>&1 ||
      { say "rbd import bench-$t failed"; tail -n 5 "$RUN_DIR/ceph-up.log" >&2; exit 1; }
  done
  rm -f "$LUN_DIR/numatgtd.img"
  # the cluster without iSCSI: librbd's own bench, 4 KiB random QD32, on an extra image
  timeout -k 5 60 "${RBDC[@]}" create --size "${LUN_MB}M" rbd/bench-baseline
  rbd_bench() { # write|read -> ops/s
    { timeout -k 5 60 "${RBDC[@]}" bench --io-type "$1" --io-pattern rand --io-size 4K --io-threads 32 \
      --io-total $(( LUN_MB < 128 ? LUN_MB : 128 ))M rbd/bench-baseline 2>&1 || true; } | tee -a "$RUN_DIR/rbd-bench.txt" |
      awk '/^elapsed:/ { for (i = 1; i < NF; i++) if ($i == "ops/sec:") v = $(i + 1) } END { printf "%.0f", v }'
  }
  timeout -k 5 300 "${RBDC[@]}" bench --io-type write --io-pattern seq --io-size 4M --io-threads 4 \
    --io-total "${LUN_MB}M" rbd/bench-baseline > /dev/null 2>&1 || say "filling bench-baseline failed"
  RBD_BASE="$(rbd_bench write) writes/s, $(rbd_bench read) reads/s"
  say "rbd bench (librbd, 4 KiB random, 32 threads): $RBD_BASE"
  timeout -k 5 60 "${RBDC[@]}" rm --no-progress rbd/bench-baseline > /dev/null 2>&1 || true
else
  say "run dir $RUN_DIR; LUNs on $LUN_DIR ($LUN_MB MiB, random data); engine $ENGINE"
  for t in "${FILE_TARGETS[@]}"; do [ "$t" = numatgtd ] || cp "$LUN_DIR/numatgtd.img" "$LUN_DIR/$t.img"; done
fi
for t in "${TARGETS[@]}"; do start_target "$t"; done
LIBRBD=
if [ "$RBD" = 1 ]; then # librbd's cache settings as each target's librbd client sees them
  for t in "${TARGETS[@]}"; do
    v=$(for k in rbd_cache rbd_cache_policy rbd_cache_writethrough_until_flush; do
      timeout -k 2 10 ceph --admin-daemon "$CEPH_DIR/run/client.admin.${PID[$t]}.asok" config get "$k" 2>/dev/null |
        python3 -c 'import json, sys; print(" ".join("%s=%s" % kv for kv in json.load(sys.stdin).items()))' 2>/dev/null || echo "$k=?"
    done | tr '\n' ' ')
    LIBRBD+="$t: ${v% }; "
  done
  LIBRBD=${LIBRBD%; }
  say "librbd: $LIBRBD"
fi
for t in "${TARGETS[@]}"; do warm "$t"; done
if [ "$RBD" = 1 ] && [ "$ENGINE" = fio ]; then
  # the write points' SYNCHRONIZE CACHE must reach numatgtd's cache: an unpatched fio asks
  # for a range past the LUN's end, numatgtd refuses it and fio only logs it
  timeout -k 5 60 "$FIO" --name=sync --ioengine=libiscsi "--filename=$(fio_url numatgtd)" --rw=write --bs=4k \
    --size=4k --end_fsync=1 > "$RUN_DIR/raw/sync-probe.txt" 2>&1 || true
  if grep -q "end_fsync failed\|LBA_OUT_OF_RANGE" "$RUN_DIR/raw/sync-probe.txt"; then
    say "$FIO sends SYNCHRONIZE CACHE past the LUN's end (built before the fix): FORCE=1 tools/build-fio-libiscsi.sh"
    exit 1
  fi
fi
TCP0=-
[ "$RBD" = 1 ] || { TCP0=$(python3 "$HERE/report.py" tcp 1 3); say "one-stream loopback TCP: $TCP0 GB/s"; }
: > "$RUN_DIR/raw.tsv"
say "$n_points points x ${#TARGETS[@]} targets x $ROUNDS rounds x $SECS s ≈ $(( EST_S / 60 + 1 )) min"
supported() { # POINT SESSIONS: can the engine run it? (iscsi-perf: reads, 1 session)
  [ "$ENGINE" = fio ] || { [ "$2" = 1 ] && [[ "$(point_spec "$1")" == *read* ]]; }
}
for s in $SESSIONS; do
  for p in $POINTS; do
    supported "$p" "$s" || { say "skipped: $p, $s session(s) (iscsi-perf: reads of 1 session only)"; continue; }
    for r in $(seq 1 "$ROUNDS"); do
      for t in "${TARGETS[@]}"; do measure "$t" "$p" "$s" "$r"; done
    done
    say "done: $p, $s session(s)"
  done
done
TCP1=-
[ "$RBD" = 1 ] || TCP1=$(python3 "$HERE/report.py" tcp 1 3)
LOAD1=$(cat /proc/loadavg)
eng_env=; [ "$ENGINE" = fio ] || eng_env="ENGINE=$ENGINE "
rbd_env="BUSY_POLL=$BUSY_POLL NUMATGTD_NULL=$NUMATGTD_NULL "; [ "$RBD" = 0 ] || rbd_env="RBD=1 ${NOCACHE_BSOPTS:+NOCACHE_BSOPTS=\"$NOCACHE_BSOPTS\" }"
rerun="${NUMATGTD_BIN:+NUMATGTD_BIN=$NUMATGTD_BIN }${BASE_BIN:+BASE_BIN=$BASE_BIN }${eng_env}${rbd_env}ROUNDS=$ROUNDS SECS=$SECS SESSIONS=\"$SESSIONS\" POINTS=\"$POINTS\" LUN_MB=$LUN_MB tools/bench/run.sh"
{
  echo "date=$(date -u +%FT%TZ)"
  echo "cpus=$NCPU"
  echo "kernel=$(uname -r)"
  echo "numatgtd=$BIN_SRC ($(cd "$REPO" && git describe --always --dirty 2>/dev/null || echo '?'))"
  [ -z "$BASE_BIN" ] || echo "numatgtd_base=$BASE_BIN"
  echo "tgtd=tgtd $(tgtd -V 2>/dev/null | head -n 1)"
  if [ "$RBD" = 1 ]; then
    echo "rbd=1"
    echo "ceph=$(ceph --version | awk '{ print $1, $2, $3 }'), librbd $(dpkg-query -W -f '${Version}' librbd1 2>/dev/null)"
    echo "rbd_bench=$RBD_BASE"
    echo "librbd=$LIBRBD"
  fi
  if [ "$ENGINE" = fio ]; then echo "engine=$("$FIO" --version) (libiscsi engine, numjobs = sessions)"
  else echo "engine=iscsi-perf (fallback: reads of 1 session, no percentiles)"; fi
  echo "secs=$SECS"
  echo "rounds=$ROUNDS"
  echo "lun_mb=$LUN_MB"
  echo "targets=${TARGETS[*]}"
  echo "busy_poll=$BUSY_POLL"
  echo "numatgtd_null=$NUMATGTD_NULL"
  echo "tcp_before=$TCP0"
  echo "tcp_after=$TCP1"
  echo "load_before=$LOAD0"
  echo "load_after=$LOAD1"
  echo "warning=$WARN"
  echo "rerun=$rerun"
} > "$META"
python3 "$HERE/report.py" report "$RUN_DIR/raw.tsv" "$RUN_DIR" "$META"
if command -v gnuplot >/dev/null; then
  fio_panel=0; [ "$ENGINE" != fio ] || fio_panel=1 # iscsi-perf: no initiator CPU, no 3rd panel
  if [ "$RBD" = 1 ]; then
    gp=(-e "dir='$RUN_DIR'; title='numatgtd vs tgtd (tgt-rbd) on RBD: 1 memstore OSD on loopback, $(date -u +%F), $NCPU CPUs, ${SECS} s x $ROUNDS rounds'" "$HERE/chart-rbd.gp")
  else
    gp=(-e "dir='$RUN_DIR'; poll=$BUSY_POLL; nnull=$NUMATGTD_NULL; fio=$fio_panel; title='numatgtd vs tgtd, $(date -u +%F), $NCPU CPUs, ${SECS} s x $ROUNDS rounds, loopback TCP $TCP0 GB/s'" "$HERE/chart.gp")
  fi
  if gnuplot "${gp[@]}" 2> "$RUN_DIR/gnuplot.err"; then
    say "chart: $RUN_DIR/chart.png"
  else
    say "gnuplot failed:"; cat "$RUN_DIR/gnuplot.err" >&2
  fi
else
  say "no chart: gnuplot missing (tools/install-bench-deps.sh installs gnuplot-nox)"
fi
say "results: $RUN_DIR/results.md, $RUN_DIR/results.csv"
