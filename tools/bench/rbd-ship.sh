#!/bin/bash
# I/O shipping (issue 26): one RBD LUN exported by two numatgtd gateways started like tgtd
# and set up with Debian's tgtadm alone (ALUA group 1 and 2, peers of each other,
# `alua_non_owner_state active-non-optimized`, `--bstype rbd`). Gateway A owns the LUN;
# B ships every media command to A over the gateway link. fio (libiscsi engine) 4 KiB
# random reads or writes at each queue depth, ROUNDS rounds of SECS s alternating the
# direct path (an initiator on A) and the shipped one (on B). Per point: IOPS, mean
# completion latency, CPU µs per I/O of A, of B and of both (utime+stime from
# /proc/PID/stat), /proc/loadavg; then the shipped/direct ratios of the medians. Debian's
# tgtd cannot ship I/O between gateways, so there is no tgtd column: the direct path is the
# reference. Stops both daemons by PID.
#
#   tools/bench/rbd-ship.sh CEPH_DIR [IMAGE=rbd/ship]   # cluster from tools/ceph/up.sh
# Env: BIN (target/release/numatgtd), FIO (target/tools/fio), SECS (5), ROUNDS (3),
#      QDS ("1 32"), RW (randread|randwrite, randread), SIZE_MB (128), CACHE (numa|off,
#      numa), PORT_BASE (23730), CTL_BASE (175)
set -euo pipefail
CEPH=${1:?usage: rbd-ship.sh CEPH_DIR [IMAGE]}
IMAGE=${2:-rbd/ship}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$REPO/target/release/numatgtd}
FIO=${FIO:-$REPO/target/tools/fio}
SECS=${SECS:-5} ROUNDS=${ROUNDS:-3} QDS=${QDS:-"1 32"} RW=${RW:-randread}
SIZE_MB=${SIZE_MB:-128} CACHE=${CACHE:-numa}
PORT_BASE=${PORT_BASE:-23730} CTL_BASE=${CTL_BASE:-175}
IQN=iqn.2026-11.org.numatgt:shipbench
HZ=$(getconf CLK_TCK)
[ -x "$FIO" ] || { echo "rbd-ship.sh: no fio with libiscsi at $FIO (tools/build-fio-libiscsi.sh)" >&2; exit 2; }
WORK=$(mktemp -d /tmp/rbd-ship-bench.XXXXXX)
declare -A PID PORT
cleanup() {
  for g in "${!PID[@]}"; do kill "${PID[$g]}" 2>/dev/null || true; done
  for g in "${!PID[@]}"; do wait "${PID[$g]}" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
rbd -c "$CEPH/ceph.conf" create --size "$((SIZE_MB * 2))M" "$IMAGE" 2>/dev/null || true
gateway() { # NAME GROUP PEER CTL PORT
  local g=$1 group=$2 peer=$3 ctl=$4 port=$5
  mkdir -p "$WORK/state-$g"
  "$BIN" -f -C "$ctl" --iscsi "portal=127.0.0.1:$port" --state-dir "$WORK/state-$g" \
    --metrics off > "$WORK/$g.log" 2>&1 &
  PID[$g]=$! PORT[$g]=$port
  for _ in $(seq 100); do ss -ltn | grep -q ":$port " && break; sleep 0.1; done
  tgtadm -C "$ctl" --lld iscsi --op new --mode target --tid 1 -T "$IQN"
  for kv in "alua_group $group" "alua_peers $peer" "alua_non_owner_state active-non-optimized"; do
    set -- $kv
    tgtadm -C "$ctl" --lld iscsi --op update --mode target --tid 1 --name "$1" --value "$2"
  done
  tgtadm -C "$ctl" --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 --bstype rbd \
    --backing-store "$IMAGE" --bsopts "conf=$CEPH/ceph.conf;id=admin;cache=$CACHE"
  tgtadm -C "$ctl" --lld iscsi --op bind --mode target --tid 1 -I ALL
}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
fio_url() { local u="iscsi://127.0.0.1:${PORT[$1]}/$IQN/1"; echo "${u//:/\\:}"; } # fio splits at ':'
fio_run() { # GATEWAY RW QD OUT
  "$FIO" --name=p --ioengine=libiscsi "--filename=$(fio_url "$1")" --rw="$2" --bs=4k \
    --iodepth="$3" --size="${SIZE_MB}M" --time_based --runtime="$SECS" --norandommap \
    --randrepeat=0 --output-format=json --output="$4" > "$4.err" 2>&1
}
gateway A 1 2 "$CTL_BASE" "$PORT_BASE"
gateway B 2 1 $((CTL_BASE + 1)) $((PORT_BASE + 1))
# the measured range holds data (written once, through the owner)
"$FIO" --name=fill --ioengine=libiscsi "--filename=$(fio_url A)" --rw=write --bs=1M --iodepth=8 \
  --size="${SIZE_MB}M" --output="$WORK/fill.txt" > /dev/null 2>&1
printf 'round\tqd\tpath\tIOPS\tlat_us\tcpu_us_per_io_A\tcpu_us_per_io_B\tcpu_us_per_io\tloadavg\n'
for r in $(seq "$ROUNDS"); do
  for qd in $QDS; do
    for g in A B; do
      out=$WORK/r$r-$qd-$g.json
      a0=$(ticks "${PID[A]}") b0=$(ticks "${PID[B]}")
      fio_run "$g" "$RW" "$qd" "$out"
      a1=$(ticks "${PID[A]}") b1=$(ticks "${PID[B]}")
      path=direct; [ "$g" = B ] && path=shipped
      python3 - "$out" "$a0" "$a1" "$b0" "$b1" "$HZ" "$r" "$qd" "$path" \
        "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY' | tee -a "$WORK/points.tsv"
import json, sys
out, a0, a1, b0, b1, hz, r, qd, path, load = sys.argv[1:]
job = json.load(open(out))["jobs"][0]
j = job["write"] if job["write"]["total_ios"] > job["read"]["total_ios"] else job["read"]
ios = max(j["total_ios"], 1)
us = lambda t0, t1: (int(t1) - int(t0)) * 1e6 / int(hz) / ios
ca, cb = us(a0, a1), us(b0, b1)
print(f"{r}\t{qd}\t{path}\t{j['iops']:.0f}\t{j['clat_ns']['mean'] / 1e3:.1f}\t{ca:.1f}\t{cb:.1f}\t{ca + cb:.1f}\t{load}")
PY
    done
  done
done
python3 - "$WORK/points.tsv" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
med = {}
for qd in sorted({r[1] for r in rows}, key=int):
    for path in ("direct", "shipped"):
        pts = [r for r in rows if r[1] == qd and r[2] == path]
        med[qd, path] = [statistics.median(float(p[i]) for p in pts) for i in (3, 4, 7)]
print("\nmedians\tqd\tpath\tIOPS\tlat_us\tcpu_us_per_io (both gateways)")
for (qd, path), (iops, lat, cpu) in med.items():
    print(f"\t{qd}\t{path}\t{iops:.0f}\t{lat:.1f}\t{cpu:.1f}")
print("\nshipped / direct\tqd\tIOPS\tlat\tcpu_per_io")
for qd in sorted({k[0] for k in med}, key=int):
    d, s = med[qd, "direct"], med[qd, "shipped"]
    print(f"\t{qd}\t{s[0] / d[0]:.2f}\t{s[1] / d[1]:.2f}\t{s[2] / max(d[2], 1e-9):.2f}")
PY
grep -h "ERROR\|panicked" "$WORK"/A.log "$WORK"/B.log | head -3 || true
