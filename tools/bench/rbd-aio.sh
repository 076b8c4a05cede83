#!/bin/bash
# RBD I/O, librbd aio completed into the event threads vs blocking calls on the I/O
# workers (issues 16 and 25), same run: two numatgtd started like tgtd, one default, one
# with `--io-engine threads`, each with LUN 1 = an image added by Debian's tgtadm
# (`--bstype rbd`, bsopts `conf=…;id=admin;cache=MODE`; IMAGE2 gives the threads daemon an
# image of its own, which writes need: two clients writing one image pass its exclusive
# lock to and fro). fio (libiscsi engine) 4 KiB random RW (randread or randwrite) at QD32
# over the first SIZE_MB of the image (written once first), ROUNDS rounds of SECS s
# alternating the two daemons; per point IOPS and numatgtd CPU µs per I/O (utime+stime of
# /proc/PID/stat) and /proc/loadavg. Stops both daemons by PID.
#
#   tools/bench/rbd-aio.sh CEPH_DIR [IMAGE=rbd/img [IMAGE2=IMAGE]]   # tools/ceph/up.sh
# Env: BIN (target/debug/numatgtd), FIO (target/tools/fio), SECS (10), ROUNDS (3),
#      SIZE_MB (256), CACHE (off|numa, off), BSOFLAGS (tgtadm's --bsoflags, e.g. sync: every
#      write durable, a cached LUN's written through; none), RW (randread), PORT_BASE (23710),
#      CTL_BASE (171)
set -euo pipefail
CEPH=${1:?usage: rbd-aio.sh CEPH_DIR [IMAGE]}
IMAGE=${2:-rbd/img}
IMAGE2=${3:-$IMAGE}
RW=${RW:-randread}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$REPO/target/debug/numatgtd}
FIO=${FIO:-$REPO/target/tools/fio}
SECS=${SECS:-10} ROUNDS=${ROUNDS:-3} SIZE_MB=${SIZE_MB:-256} CACHE=${CACHE:-off}
BSOFLAGS=${BSOFLAGS:-}
PORT_BASE=${PORT_BASE:-23710} CTL_BASE=${CTL_BASE:-171}
IQN=iqn.2026-11.org.numatgt:rbdbench
HZ=$(getconf CLK_TCK)
WORK=$(mktemp -d /tmp/rbd-aio-bench.XXXXXX)
declare -A PID PORT
cleanup() { for t in "${!PID[@]}"; do kill "${PID[$t]}" 2>/dev/null || true; done
  for t in "${!PID[@]}"; do wait "${PID[$t]}" 2>/dev/null || true; done; }
trap cleanup EXIT
start() { # NAME CTL PORT IMAGE ARGS...
  local t=$1 ctl=$2 port=$3 image=$4; shift 4
  mkdir -p "$WORK/state-$t"
  "$BIN" -f -C "$ctl" --iscsi "portal=127.0.0.1:$port" --state-dir "$WORK/state-$t" --metrics off "$@" \
    > "$WORK/$t.log" 2>&1 &
  PID[$t]=$! PORT[$t]=$port
  for _ in $(seq 100); do ss -ltn | grep -q ":$port " && break; sleep 0.1; done
  tgtadm -C "$ctl" --lld iscsi --op new --mode target --tid 1 -T "$IQN"
  tgtadm -C "$ctl" --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 --bstype rbd \
    --backing-store "$image" --bsopts "conf=$CEPH/ceph.conf;id=admin;cache=$CACHE" \
    ${BSOFLAGS:+--bsoflags "$BSOFLAGS"}
  tgtadm -C "$ctl" --lld iscsi --op bind --mode target --tid 1 -I ALL
}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
fio_url() { local u="iscsi://127.0.0.1:${PORT[$1]}/$IQN/1"; echo "${u//:/\\:}"; } # fio splits at ':'
fio_run() { # NAME RW OUT
  local url; url=$(fio_url "$1")
  "$FIO" --name=p --ioengine=libiscsi "--filename=$url" --rw="$2" --bs=4k --iodepth=32 \
    --size="${SIZE_MB}M" --time_based --runtime="$SECS" --norandommap --randrepeat=0 \
    --output-format=json --output="$3" > "$3.err" 2>&1
}
start aio $CTL_BASE "$PORT_BASE" "$IMAGE"
start threads $((CTL_BASE + 1)) $((PORT_BASE + 1)) "$IMAGE2" --io-engine threads
# the measured range holds data (not holes the OSD answers without reading)
for t in aio threads; do
  [ "$t" = threads ] && [ "$IMAGE2" = "$IMAGE" ] && break
  url=$(fio_url $t)
  "$FIO" --name=fill --ioengine=libiscsi "--filename=$url" --rw=write --bs=1M --iodepth=8 \
    --size="${SIZE_MB}M" --output="$WORK/fill-$t.txt" > /dev/null 2>&1
done
printf 'round\tpath\tIOPS\tcpu_us_per_io\tloadavg\n'
for r in $(seq "$ROUNDS"); do
  for t in aio threads; do
    out=$WORK/r$r-$t.json
    t0=$(ticks "${PID[$t]}")
    fio_run "$t" "$RW" "$out"
    t1=$(ticks "${PID[$t]}")
    python3 - "$out" "$t0" "$t1" "$HZ" "$r" "$t" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, sys
out, t0, t1, hz, r, t, load = sys.argv[1:]
job = json.load(open(out))["jobs"][0]
j = job["write"] if job["write"]["total_ios"] > job["read"]["total_ios"] else job["read"]
ios = j["total_ios"]
cpu_us = (int(t1) - int(t0)) * 1e6 / int(hz)
print(f"{r}\t{t}\t{j['iops']:.0f}\t{cpu_us / max(ios, 1):.1f}\t{load}")
PY
  done
done
grep -h "rbd\|librbd" "$WORK"/aio.log | grep -i "error\|warn" | head -3 || true
rm -rf "$WORK"
