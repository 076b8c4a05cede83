#!/bin/bash
# Many RBD LUNs on one gateway (issue 25): numatgtd started like tgtd, N LUNs added with
# Debian's tgtadm (`--bstype rbd`, one image each, every other one `cache=off`), on a
# cluster from tools/ceph/up.sh. Reports the time to add them, the daemon's threads and
# resident memory before and after (/proc/PID/status), and its cluster connections
# (`numatgt_rbd_cluster_connections`, where the binary has it). Stops the daemon by PID and
# removes the images it made.
#
#   tools/bench/rbd-luns.sh CEPH_DIR        # cluster from tools/ceph/up.sh
# Env: BIN (target/release/numatgtd), LUNS (64), CTL (173), LABEL (the binary's name)
set -euo pipefail
CEPH=${1:?usage: rbd-luns.sh CEPH_DIR}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$REPO/target/release/numatgtd}
LUNS=${LUNS:-64} CTL=${CTL:-173} LABEL=${LABEL:-$(basename "$BIN")}
IQN=iqn.2026-11.org.numatgt:rbdluns
WORK=$(mktemp -d /tmp/rbd-luns.XXXXXX)
PID=
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  for i in $(seq "$LUNS"); do rbd -c "$CEPH/ceph.conf" rm "rbd/luns$i" >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
for i in $(seq "$LUNS"); do rbd -c "$CEPH/ceph.conf" create --size 4M "rbd/luns$i"; done
PORT=$(free_port) MPORT=$(free_port)
"$BIN" -f -C "$CTL" --iscsi "portal=127.0.0.1:$PORT" --state-dir "$WORK" \
  --metrics "127.0.0.1:$MPORT" > "$WORK/d.log" 2>&1 &
PID=$!
for _ in $(seq 100); do ss -ltn | grep -q ":$PORT " && break; sleep 0.1; done
tgtadm -C "$CTL" --lld iscsi --op new --mode target --tid 1 -T "$IQN"
tgtadm -C "$CTL" --lld iscsi --op bind --mode target --tid 1 -I ALL
field() { awk -v k="$1" '$1 == k {print $2}' "/proc/$PID/status"; }
T0=$(field Threads:) R0=$(field VmRSS:)
S=$(date +%s.%N)
for i in $(seq "$LUNS"); do
  c=numa; [ $((i % 2)) -eq 0 ] && c=off
  tgtadm -C "$CTL" --lld iscsi --op new --mode logicalunit --tid 1 --lun "$i" --bstype rbd \
    --backing-store "rbd/luns$i" --bsopts "conf=$CEPH/ceph.conf;id=admin;cache=$c"
done
E=$(date +%s.%N)
T1=$(field Threads:) R1=$(field VmRSS:)
CONNS=$(curl -s "http://127.0.0.1:$MPORT/metrics" | awk '$1 == "numatgt_rbd_cluster_connections" {print $2}')
printf '%s: %d LUNs added in %.2f s (%.1f ms each); threads %d -> %d; RSS %d -> %d KiB (%.0f KiB per LUN); cluster connections %s\n' \
  "$LABEL" "$LUNS" "$(echo "$E - $S" | bc)" "$(echo "($E - $S) * 1000 / $LUNS" | bc -l)" \
  "$T0" "$T1" "$R0" "$R1" "$(echo "($R1 - $R0) / $LUNS" | bc -l)" "${CONNS:-not reported}"
