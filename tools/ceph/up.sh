#!/bin/bash
# numatgt's throw-away Ceph cluster for tests: one monitor and NOSD memstore OSDs on
# 127.0.0.1, all state under DIR, and a pool `rbd` ready for images.
#
#   tools/ceph/up.sh DIR        # prints DIR/ceph.conf's mon address; stop with down.sh DIR
#
# The monitor listens on a free port (several clusters can run at once); every daemon's PID
# is in DIR/run/*.pid, so down.sh stops exactly these processes. Each daemon also runs
# under `timeout` (CEPH_MAX_LIFE seconds, default 3600) so a test that dies without tearing
# down leaves nothing running for long. Needs ceph-mon ceph-osd ceph-common uuid-runtime
# (tools/install-test-deps.sh installs them). Env: NOSD (1), OSD_BYTES (memstore size, 1 GiB).
set -euo pipefail
DIR=${1:?usage: up.sh DIR}
NOSD=${NOSD:-1}
OSD_BYTES=${OSD_BYTES:-1073741824}
LIFE=${CEPH_MAX_LIFE:-3600}
for tool in ceph-mon ceph-osd ceph ceph-authtool monmaptool rbd uuidgen; do
  command -v "$tool" >/dev/null || { echo "up.sh: $tool not found: run tools/install-test-deps.sh" >&2; exit 2; }
done
[ -e "$DIR/ceph.conf" ] && { echo "up.sh: $DIR already holds a cluster (down.sh $DIR first)" >&2; exit 2; }
mkdir -p "$DIR"/{run,log,mon.a}
DIR=$(cd "$DIR" && pwd)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
FSID=$(uuidgen)
cat > "$DIR/ceph.conf" <<CONF
[global]
fsid = $FSID
mon host = v2:127.0.0.1:$PORT
mon initial members = a
public network = 127.0.0.0/8
ms bind ipv4 = true
ms bind ipv6 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
keyring = $DIR/keyring
run dir = $DIR/run
admin socket = $DIR/run/\$name.asok
pid file = $DIR/run/\$name.pid
log file = $DIR/log/\$name.log
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon warn on pool no redundancy = false
auth allow insecure global id reclaim = false
mon data avail warn = 2
osd crush chooseleaf type = 0
[client]
admin socket = $DIR/run/\$name.\$pid.asok
log file = $DIR/log/\$name.\$pid.log
[mon]
mon data = $DIR/\$name
mon cluster log file = $DIR/log/cluster.log
[osd]
keyring = $DIR/\$name/keyring
osd data = $DIR/\$name
osd objectstore = memstore
memstore device bytes = $OSD_BYTES
osd memory target = 939524096
CONF
C=(ceph -c "$DIR/ceph.conf")
start=$(date +%s%N)
elapsed() { echo "$(( ($(date +%s%N) - start) / 1000000 )) ms"; }
ceph-authtool --create-keyring "$DIR/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
ceph-authtool "$DIR/keyring" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' >/dev/null
monmaptool --create --addv a "[v2:127.0.0.1:$PORT]" --fsid "$FSID" "$DIR/monmap" >/dev/null
ceph-mon -c "$DIR/ceph.conf" --mkfs -i a --monmap "$DIR/monmap" --keyring "$DIR/keyring"
timeout "$LIFE" ceph-mon -c "$DIR/ceph.conf" -i a -f >"$DIR/log/mon.a.out" 2>&1 &
ok=0
for _ in $(seq 1 60); do
  if timeout 10 "${C[@]}" --connect-timeout 5 mon stat >/dev/null 2>&1; then ok=1; break; fi
  sleep 0.5
done
[ $ok = 1 ] || { echo "up.sh: monitor did not answer on port $PORT (see $DIR/log)" >&2; exit 1; }
echo "up.sh: mon on 127.0.0.1:$PORT after $(elapsed)"
for _ in $(seq 1 "$NOSD"); do
  U=$(uuidgen)
  id=$("${C[@]}" osd new "$U")
  mkdir -p "$DIR/osd.$id"
  ceph-authtool --create-keyring "$DIR/osd.$id/keyring" --gen-key -n "osd.$id" >/dev/null
  "${C[@]}" auth add "osd.$id" osd 'allow *' mon 'allow profile osd' -i "$DIR/osd.$id/keyring" >/dev/null 2>&1
  ceph-osd -c "$DIR/ceph.conf" -i "$id" --mkfs --osd-uuid "$U" >"$DIR/log/osd.$id.mkfs" 2>&1
  timeout "$LIFE" ceph-osd -c "$DIR/ceph.conf" -i "$id" -f >"$DIR/log/osd.$id.out" 2>&1 &
done
up=0
for _ in $(seq 1 120); do
  up=$("${C[@]}" osd stat -f json | python3 -c 'import json,sys; print(json.load(sys.stdin)["num_up_osds"])')
  [ "$up" = "$NOSD" ] && break
  sleep 0.5
done
[ "$up" = "$NOSD" ] || { echo "up.sh: $up of $NOSD OSDs up (see $DIR/log)" >&2; exit 1; }
echo "up.sh: $NOSD OSD(s) up after $(elapsed)"
"${C[@]}" osd pool create rbd 8 8 >/dev/null 2>&1
rbd -c "$DIR/ceph.conf" pool init rbd
echo "up.sh: pool rbd ready after $(elapsed); conf $DIR/ceph.conf"
