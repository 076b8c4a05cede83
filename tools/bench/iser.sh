#!/bin/bash
# The iSER benchmark (issue 24): numatgtd, Debian's tgtd and LIO (the kernel's target) side
# by side in ONE boot of the QEMU guest (tools/vm/vm-run.sh: 2 vCPUs, 2 NUMA nodes, TCG),
# over soft-RoCE (rdma_rxe on a dummy netdev) and over TCP, loaded by the kernel initiator
# (open-iscsi + ib_iser) with fio (libaio, direct=1) on its disks. Also `ISER=1 run.sh`.
#
#   numatgtd       the release build (or NUMATGTD_BIN), started like tgtd: `-f -C N --iscsi
#                  portal=127.0.0.1:PORT --iser portal=IP:PORT`; LUN made with Debian's
#                  tgtadm --lld iser, default settings; one target serves both transports
#   numatgtd-base  only with BASE_BIN=PATH: a second numatgtd binary started the same way
#                  (before/after a change, alternated with numatgtd in the same boot)
#   tgtd           Debian's tgtd 1.0.85, the same way (its iSER listens on 3260; an initiator
#                  name ACL for iSER; a second --lld iscsi target on the same file for TCP)
#   lio            the kernel target configured with python3-rtslib-fb (fileio backstore,
#                  iSER + TCP portals, demo mode, no auth); LIO=0 leaves it out
# What runs in the guest and what it measures: tools/vm/guest-iser-bench.sh. Here: build,
# boot, then tools/bench/iser-report.py (the table) and tools/bench/chart-iser.gp (the chart).
# TCG numbers are for ratios between targets of the same boot only.
#
# Output: RUN_DIR = target/bench/iser-YYYYmmdd-HHMMSS: results.md (also on stdout),
# results.csv, chart.png, raw.tsv, raw/ (fio JSON, strace summaries), the targets' logs,
# guest.log (the guest's console), meta.txt.
#
# Env: QUICK=1 (smoke: 1 round of 2 s points, a 64 MiB LUN, ~7 min), ROUNDS (3), SECS (5), POINTS
#   ("rr4k-qd1 rr4k-qd32 rw4k-qd32 sr512k-qd8 sw128k-qd8"), TRANSPORTS ("iser tcp"), LUN_MB
#   (128; QUICK: 64), NUMATGTD_BIN (default: cargo build --release -p target-server), BASE_BIN (unset),
#   TGTD (1, with BASE_BIN 0: see VM_MEM below; 0: no tgtd column), LIO (1), STRACE (0; 1: system
#   calls per I/O, strace -f over STRACE_SECS (4) s of
#   STRACE_POINT (rr4k-qd32)), PROFILE (0; 1: where the user-space targets' CPU goes over iSER:
#   per-thread user and system CPU time over a PROFILE_SECS (6) s window
#   per PROFILE_POINTS ("sr512k-qd8 sw128k-qd8"), raw/profile-*), NET_MTU (1500: the guest's
#   dummy netdev under soft-RoCE; RoCE's path MTU follows it, 1024 bytes at 1500 and 4096 at
#   9000, as jumbo frames give real RoCE), BENCH_OUT (target/bench), VM_MEM (3072), VM_TIMEOUT (from
#   the estimate), PERF (0; 1: numatgtd's flat profile by thread and symbol, perf record -e task-clock
#   over PERF_SECS (10) s of each PROFILE_POINT over iSER, raw/perf-*; numatgtd's metrics at the
#   end go to raw/metrics-* in every run). Root (9p export of /, iscsid and the targets in the guest).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
VM=$REPO/tools/vm
say() { echo "bench-iser: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "needs root (the guest exports / over 9p, runs iscsid and the targets)"; exit 1; }
for t in qemu-system-x86_64 tgtd tgtadm iscsiadm fio timeout setsid python3; do
  command -v "$t" > /dev/null || { say "$t missing: run tools/install-test-deps.sh and tools/install-bench-deps.sh"; exit 1; }
done
fio --enghelp 2> /dev/null | grep -qw libaio || { say "$(command -v fio) has no libaio engine"; exit 1; }
ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-*.so > /dev/null 2>&1 ||
  { say "no rxe verbs provider (ibverbs-providers): run tools/install-test-deps.sh"; exit 1; }
LIO=${LIO:-1}
if [ "$LIO" = 1 ] && [ ! -d /usr/lib/python3/dist-packages/rtslib_fb ]; then
  say "python3-rtslib-fb missing (tools/install-bench-deps.sh): no LIO column"; LIO=0
fi
if [ "${QUICK:-0}" = 1 ]; then ROUNDS=${ROUNDS:-1} SECS=${SECS:-2} LUN_MB=${LUN_MB:-64}; fi
ROUNDS=${ROUNDS:-3} SECS=${SECS:-5}
POINTS=${POINTS:-"rr4k-qd1 rr4k-qd32 rw4k-qd32 sr512k-qd8 sw128k-qd8"}
TRANSPORTS=${TRANSPORTS:-"iser tcp"}
LUN_MB=${LUN_MB:-128}
STRACE=${STRACE:-0} STRACE_SECS=${STRACE_SECS:-4} STRACE_POINT=${STRACE_POINT:-rr4k-qd32}
NET_MTU=${NET_MTU:-1500}
[[ "$NET_MTU" =~ ^[1-9][0-9]*$ ]] || { say "NET_MTU: a positive integer, not $NET_MTU"; exit 1; }
PROFILE=${PROFILE:-0} PROFILE_SECS=${PROFILE_SECS:-6} PROFILE_POINTS=${PROFILE_POINTS:-"sr512k-qd8 sw128k-qd8"}
for v in ROUNDS SECS LUN_MB STRACE_SECS PROFILE_SECS; do [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { say "$v: a positive integer, not ${!v}"; exit 1; }; done
# shellcheck source=points.sh
. "$HERE/points.sh"
for p in $POINTS $STRACE_POINT $PROFILE_POINTS; do point_spec "$p" > /dev/null || { say "unknown point $p"; exit 1; }; done
BASE_BIN=${BASE_BIN:-}
[ -z "$BASE_BIN" ] || [ -x "$BASE_BIN" ] || { say "BASE_BIN=$BASE_BIN is not an executable"; exit 1; }
TGTD=${TGTD:-$([ -z "$BASE_BIN" ] && echo 1 || echo 0)} # see VM_MEM below

if [ -d "${HOME:-/root}/.cargo/bin" ]; then PATH="${HOME:-/root}/.cargo/bin:$PATH"; fi
BIN_SRC=${NUMATGTD_BIN:-}
if [ -z "$BIN_SRC" ]; then
  say "cargo build --release -p target-server"
  (cd "$REPO" && timeout 3600 cargo build --release -q -p target-server) || { say "release build failed"; exit 1; }
  BIN_SRC=$REPO/target/release/numatgtd
fi
[ -x "$BIN_SRC" ] || { say "$BIN_SRC missing"; exit 1; }

RUN_DIR=${BENCH_OUT:-$REPO/target/bench}/iser-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$RUN_DIR/raw"
RUN_DIR=$(cd "$RUN_DIR" && pwd)
# the binaries the guest runs, copied (a rebuild during the run changes nothing); the guest
# sees RUN_DIR as /vmtest/out
# sees the host's / (read-only, cached) and RUN_DIR as /vmtest/out; under /tmp (which the guest
# replaces with its own) only the latter
GUEST_DIR=$RUN_DIR
case "$RUN_DIR" in /tmp/*) GUEST_DIR=/vmtest/out ;; esac
cp "$BIN_SRC" "$RUN_DIR/numatgtd"
export NUMATGTD=$GUEST_DIR/numatgtd NUMATGTD_BASE=
if [ -n "$BASE_BIN" ]; then cp "$BASE_BIN" "$RUN_DIR/numatgtd-base"; NUMATGTD_BASE=$GUEST_DIR/numatgtd-base; fi
PERF=${PERF:-0} PERF_SECS=${PERF_SECS:-10}
[[ "$PERF_SECS" =~ ^[1-9][0-9]*$ ]] || { say "PERF_SECS: a positive integer, not $PERF_SECS"; exit 1; }
export TGTD LIO ROUNDS SECS POINTS TRANSPORTS LUN_MB STRACE STRACE_SECS STRACE_POINT PROFILE PROFILE_SECS PROFILE_POINTS NET_MTU PERF PERF_SECS
n_t=$((1 + TGTD + LIO)); [ -z "$BASE_BIN" ] || n_t=$((n_t + 1))
n_p=0; for p in $POINTS; do n_p=$((n_p + 1)); done
n_x=0; for x in $TRANSPORTS; do n_x=$((n_x + 1)); done
# boot + set-up ~90 s, warm-up ~10 s per target, ~3 s of fio start-up per run under TCG,
# strace windows ~10 s each
EST_S=$((90 + 10 * n_t + n_p * n_x * n_t * ROUNDS * (SECS + 3) + STRACE * (n_t - LIO) * n_x * (STRACE_SECS + 10) + PROFILE * (n_t - LIO) * 2 * (PROFILE_SECS + 60) + PERF * 2 * (PERF_SECS + 40)))
# 3 GiB. Debian's tgtd 1.0.85 sometimes fails an iSER connection over soft-RoCE
# (rdma_create_qp: Invalid argument, right after its 1 GiB hugepage pool falls back to
# valloc) and then dies of SIGSEGV in librdmacm: in 1 of 5 boots with 2-3 GiB, in each of 3
# boots with 3.5, 4 and 6 GiB (2026-11-27); the guest script restarts it up to 3 times.
# tgtd pins that 1 GiB pool for RDMA, on the node it runs on; numatgtd sizes its cache from
# the memory it finds and registers all of it for RDMA (pinned). A second numatgtd
# (BASE_BIN) beside them does not fit (the OOM killer took both numatgtd), so with BASE_BIN
# tgtd is left out by default (TGTD=0): a before/after of numatgtd, LIO as the reference
export VM_MEM=${VM_MEM:-3072}
export VM_TIMEOUT=${VM_TIMEOUT:-$((EST_S * 2 + 300))} VM_OUT=$RUN_DIR
export VM_ENV="NUMATGTD NUMATGTD_BASE TGTD LIO ROUNDS SECS POINTS TRANSPORTS LUN_MB STRACE STRACE_SECS STRACE_POINT PROFILE PROFILE_SECS PROFILE_POINTS NET_MTU PERF PERF_SECS"
export VM_FILES=$HERE/points.sh # the points by name, /vmtest/points.sh in the guest

VMPID=
TAILPID=
cleanup() {
  set +e
  if [ -n "$VMPID" ] && kill -0 "$VMPID" 2> /dev/null; then
    say "stopping the guest (process group $VMPID)"
    kill -TERM -- "-$VMPID" 2> /dev/null
    for _ in $(seq 1 50); do kill -0 "$VMPID" 2> /dev/null || break; sleep 0.2; done
    kill -KILL -- "-$VMPID" 2> /dev/null
    wait "$VMPID" 2> /dev/null
  fi
  [ -z "$TAILPID" ] || { kill "$TAILPID" 2> /dev/null; wait "$TAILPID" 2> /dev/null; }
  rm -f "$RUN_DIR/numatgtd" "$RUN_DIR/numatgtd-base"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

LOAD0=$(cat /proc/loadavg)
WARN=
NCPU=$(nproc)
if awk -v l="${LOAD0%% *}" -v n="$NCPU" 'BEGIN { exit !(l > n / 2) }'; then
  WARN="host 1-minute load ${LOAD0%% *} above CPUs/2 ($NCPU CPUs) at the start: another process shares the CPUs the guest's vCPUs run on; same-boot ratios still hold, absolute numbers are low"
  say "WARNING: $WARN"
fi
say "run dir $RUN_DIR; $n_p points x $n_x transports x $n_t targets x $ROUNDS rounds x $SECS s; about $((EST_S / 60 + 1)) min (guest killed after ${VM_TIMEOUT} s)"
# the guest in its own process group (stopped as a group on exit or Ctrl-C); its console to
# guest.log, followed on stderr
: > "$RUN_DIR/guest.log"
setsid "$VM/vm-run.sh" "$VM/guest-iser-bench.sh" > "$RUN_DIR/guest.log" 2>&1 < /dev/null &
VMPID=$!
tail -n +1 -f --pid="$VMPID" "$RUN_DIR/guest.log" >&2 &
TAILPID=$!
set +e
wait "$VMPID"
rc=$?
set -e
VMPID=
sleep 0.5
kill "$TAILPID" 2> /dev/null; wait "$TAILPID" 2> /dev/null || true; TAILPID=
LOAD1=$(cat /proc/loadavg)
if [ "$rc" != 0 ] || ! grep -q ISER_BENCH_OK "$RUN_DIR/guest.log"; then
  say "the guest run failed (status $rc): $(grep -m1 ISER_BENCH_FAIL "$RUN_DIR/guest.log" || echo 'no ISER_BENCH_OK')"
  [ -s "$RUN_DIR/raw.tsv" ] || exit 1
  say "reporting what was measured"
  WARN="${WARN:+$WARN; }the guest run did not finish (status $rc, see guest.log): the table is partial"
fi

rerun="${NUMATGTD_BIN:+NUMATGTD_BIN=$NUMATGTD_BIN }${BASE_BIN:+BASE_BIN=$BASE_BIN }TGTD=$TGTD LIO=$LIO ROUNDS=$ROUNDS SECS=$SECS POINTS=\"$POINTS\" TRANSPORTS=\"$TRANSPORTS\" LUN_MB=$LUN_MB STRACE=$STRACE PROFILE=$PROFILE NET_MTU=$NET_MTU tools/bench/iser.sh"
{
  echo "date=$(date -u +%FT%TZ)"
  echo "host_cpus=$NCPU"
  echo "host_kernel=$(uname -r)"
  echo "numatgtd=$BIN_SRC ($(cd "$REPO" && git describe --always --dirty 2> /dev/null || echo '?'))"
  [ -z "$BASE_BIN" ] || echo "numatgtd_base=$BASE_BIN"
  echo "secs=$SECS"
  echo "rounds=$ROUNDS"
  echo "lun_mb=$LUN_MB"
  echo "strace_secs=$STRACE_SECS"
  echo "profile_secs=$PROFILE_SECS"
  echo "net_mtu=$NET_MTU"
  echo "vm=qemu $(qemu-system-x86_64 --version | head -n 1 | awk '{ print $4 }') TCG, ${VM_MEM} MiB, 2 vCPUs, 2 NUMA nodes"
  echo "load_before=$LOAD0"
  echo "load_after=$LOAD1"
  echo "warning=$WARN"
  echo "rerun=$rerun"
  cat "$RUN_DIR/guest-meta.txt" 2> /dev/null
} > "$RUN_DIR/meta.txt"
python3 "$HERE/iser-report.py" "$RUN_DIR"
if command -v gnuplot > /dev/null; then
  in_run() { grep -q "^guest_targets=.*\b$1\b" "$RUN_DIR/meta.txt" && echo 1 || echo 0; }
  if gnuplot -e "dir='$RUN_DIR'; has_base=$(in_run numatgtd-base); has_tgtd=$(in_run tgtd); has_lio=$(in_run lio); ref='$(cat "$RUN_DIR/chart.ref" 2> /dev/null || echo tgtd)'; title='numatgtd vs tgtd vs LIO over iSER (soft-RoCE) and TCP, QEMU TCG guest (ratios only), $(date -u +%F), ${SECS} s x $ROUNDS rounds'" \
    "$HERE/chart-iser.gp" 2> "$RUN_DIR/gnuplot.err"; then
    say "chart: $RUN_DIR/chart.png"
  else
    say "gnuplot failed:"; cat "$RUN_DIR/gnuplot.err" >&2
  fi
else
  say "no chart: gnuplot missing (tools/install-bench-deps.sh installs gnuplot-nox)"
fi
say "results: $RUN_DIR/results.md, $RUN_DIR/results.csv"
[ -z "$WARN" ] || [[ "$WARN" != *"did not finish"* ]] || exit 1
