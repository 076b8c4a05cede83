#!/bin/bash
# Before/after benchmark of two numatgtd binaries (A = before, B = after), each started as
# tgtd users start it (`-f -C N --iscsi portal=...`, no configuration), one 512 MiB tmpfs LUN
# made with Debian's tgtadm, default settings; 4 KiB random reads (iscsi-perf) at QD32 and
# QD1, A and B alternated (A B A B ...), ROUNDS rounds. Prints a Markdown table: median IOPS
# of each, the ratio B/A, each one's CPU time per I/O (utime+stime from /proc/PID/stat over
# the run / I/Os), and /proc/loadavg before and after. A benchmark, not a test: not in CI.
#
#   tools/bench-ab.sh A_BIN B_BIN      (root: tgtadm sockets in /var/run/tgtd, tmpfs)
# Env: ROUNDS (3), SECS (8 per run), LUN_MB (512), QDS ("32 1"), B_ARGS (extra options of B,
#      e.g. "--metrics 127.0.0.1:9555"), SCRAPE (a URL fetched every second during B's runs,
#      to include the cost of being scraped).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench-lib.sh
. "$REPO/tools/bench-lib.sh"
[ $# = 2 ] || { echo "usage: $0 A_NUMATGTD B_NUMATGTD" >&2; exit 2; }
A=$1 B=$2
for b in "$A" "$B"; do [ -x "$b" ] || { echo "bench-ab: $b is not executable" >&2; exit 1; }; done
for t in tgtadm iscsi-perf timeout ss; do
  command -v "$t" >/dev/null || { echo "bench-ab: $t missing: run tools/install-test-deps.sh" >&2; exit 1; }
done
ROUNDS=${ROUNDS:-3} SECS=${SECS:-8} LUN_MB=${LUN_MB:-512} QDS=${QDS:-"32 1"}
HZ=$(getconf CLK_TCK)
IQN=iqn.2026-11.org.numatgt:bench-ab
DIR=$(mktemp -d /dev/shm/numatgt-bench-ab.XXXXXX)
PID=
cleanup() { set +e; [ -n "$PID" ] && stop_pid "$PID"; rm -rf "$DIR"; }
trap cleanup EXIT
head -c "${LUN_MB}M" /dev/urandom > "$DIR/lun.img"
PORT=$(free_port 23490)
CTL=
for c in $(seq 61 120); do [ -e "/var/run/tgtd/socket.$c" ] || { CTL=$c; break; }; done
[ -n "$CTL" ] || { echo "bench-ab: no free control port" >&2; exit 1; }
URL="iscsi://127.0.0.1:$PORT/$IQN/1"

start() { # BIN [EXTRA ARGS...]: start it tgtd-style, make the target and LUN, warm the LUN
  local bin=$1; shift
  mkdir -p "$DIR/state"
  "$bin" -f -C "$CTL" --iscsi "portal=127.0.0.1:$PORT" --state-dir "$DIR/state" "$@" \
    >> "$DIR/daemon.log" 2>&1 &
  PID=$!
  wait_port "$PORT" "$PID" || { tail -20 "$DIR/daemon.log"; exit 1; }
  tgtadm -C "$CTL" --lld iscsi --op new --mode target --tid 1 -T "$IQN"
  tgtadm -C "$CTL" --lld iscsi --op bind --mode target --tid 1 -I ALL
  tgtadm -C "$CTL" --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$DIR/lun.img"
  timeout -k 5 -s INT "$(( LUN_MB / 256 + 3 ))" iscsi-perf -m 8 -b 256 "$URL" >/dev/null 2>&1 || true
}
RUN_IOPS=0 RUN_CPU=0
run() { # QD -> RUN_IOPS, RUN_CPU (µs of target CPU per I/O)
  local t0 t1 out
  t0=$(awk '{ print $14 + $15 }' "/proc/$PID/stat")
  out=$(timeout -k 5 -s INT "$SECS" iscsi-perf -m "$1" -b 8 -r "$URL" 2>&1 | tr '\r' '\n' || true)
  t1=$(awk '{ print $14 + $15 }' "/proc/$PID/stat")
  RUN_IOPS=$(echo "$out" | sed -n 's/.*iops average \([0-9]*\).*/\1/p' | tail -n 1)
  RUN_IOPS=${RUN_IOPS:-0}
  RUN_CPU=$(awk -v d=$((t1 - t0)) -v hz="$HZ" -v i="$RUN_IOPS" -v s="$SECS" \
    'BEGIN { if (i > 0) printf "%.2f", d / hz * 1e6 / (i * s); else print "n/a" }')
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "n/a"; else print a[int((NR + 1) / 2)] }'; }

LOAD0=$(cat /proc/loadavg)
declare -A IOPS CPU
for r in $(seq 1 "$ROUNDS"); do
  for who in A B; do
    if [ "$who" = A ]; then start "$A"; else
      # shellcheck disable=SC2086
      start "$B" ${B_ARGS:-}
    fi
    SCRAPER=
    if [ "$who" = B ] && [ -n "${SCRAPE:-}" ]; then
      ( for _ in $(seq 1 $(( SECS * ${#QDS} + 60 ))); do curl -s -o /dev/null "$SCRAPE" || true; sleep 1; done ) &
      SCRAPER=$!
    fi
    for qd in $QDS; do
      run "$qd"
      IOPS[$who$qd]="${IOPS[$who$qd]:-} $RUN_IOPS"
      CPU[$who$qd]="${CPU[$who$qd]:-} $RUN_CPU"
      echo "bench-ab: round $r $who QD$qd: $RUN_IOPS IOPS, $RUN_CPU us CPU/IO" >&2
    done
    [ -n "$SCRAPER" ] && { kill "$SCRAPER" 2>/dev/null; wait "$SCRAPER" 2>/dev/null || true; }
    stop_pid "$PID"; PID=
    rm -rf "$DIR/state"
  done
done
echo "A = $A"
echo "B = $B"
echo "loadavg before: $LOAD0; after: $(cat /proc/loadavg); $(nproc) CPUs; $ROUNDS rounds of $SECS s, alternated"
echo
echo "| 4 KiB random read | A IOPS | B IOPS | B/A | A CPU µs/IO | B CPU µs/IO |"
echo "|---|---|---|---|---|---|"
for qd in $QDS; do
  a=$(echo "${IOPS[A$qd]}" | median) b=$(echo "${IOPS[B$qd]}" | median)
  ca=$(echo "${CPU[A$qd]}" | median) cb=$(echo "${CPU[B$qd]}" | median)
  ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { if (a > 0) printf "%.3f", b / a; else print "n/a" }')
  echo "| QD$qd | $a | $b | $ratio | $ca | $cb |"
done
