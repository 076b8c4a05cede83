#!/bin/sh
# Guest side of the dm-multipath test (issue 16; runs as root inside the QEMU guest, see
# vm-run.sh). Two numatgtd gateways export the same target and LUN from ONE backing file,
# each as its own ALUA target port group; the guest kernel's initiator logs in to both and
# dm-multipath (multipathd, prio alua, group_by_prio) builds one map over the two paths.
# Each gateway is started as tgtd is (no configuration file) and set up with Debian's
# tgtadm alone: target, ALUA group, peer and non-owner state, LUN (issue 26).
#   - gateway 1 (group 1, 127.0.0.1:3260) owns the LUN (active/optimized), gateway 2
#     (group 2, 127.0.0.2:3260) reports it active/non-optimized; with active/non-optimized
#     peers a file LUN is cached nowhere, so both gateways serve it coherently;
#   - `multipath -ll` must show two path groups, prio 50 (group 1's path) and 10;
#   - rbd: before the file system, guest-pr-shared.sh (issue 26): persistent reservations
#     made through each gateway's path with sg_persist are seen and enforced through the
#     other (register, reserve, a conflicting WRITE, preempt, clear);
#   - mkfs.ext4 on /dev/mapper/<wwid>, mount, a writer creates files of random size with
#     dd conv=fsync + a directory fsync and only then records "name checksum time" in the
#     guest's RAM (the acknowledged files);
#   - the owner (gateway 1) is SIGKILLed mid-writes: its session fails (replacement_timeout
#     MPATH_REPLACEMENT s), multipathd fails the path and switches to the other path group;
#     the writer must go on acknowledging files through gateway 2; the stall is the time
#     from the kill to the first file acknowledged after it;
#   - gateway 1 is started again: iscsid logs in again, the path checker reinstates the
#     path and (failback immediate) group 1's path group is active again;
#   - the writer stops, every acknowledged file is checked, umount, `e2fsck -fn` clean;
#   - rbd: with the gateways stopped and Ceph still up, guest-rbd-thin.sh (issue 25): a
#     thin RBD LUN of a third numatgtd, made with tgtadm; sg_get_lba_status in the guest
#     must map what `rbd diff` lists, before and after a blkdiscard of its first object.
# Env: NUMATGTD              path of the numatgtd binary as the guest sees it
#      MPATH_REPLACEMENT     open-iscsi replacement_timeout in s of the node records (5);
#                            multipathd sets the sessions' recovery_tmo to its
#                            fast_io_fail_tmo (5) once it manages the paths
#      MPATH_BEFORE          s of writes before the kill (4)
#      MPATH_AFTER           s of writes through gateway 2 after the stall (4)
#      MPATH_FAILBACK        1 (default): restart gateway 1 and require the failback
#      MPATH_MODE            ano (default): non_owner_state active-non-optimized, as above;
#                            standby: non_owner_state standby and write_cache: false (the
#                            owner caches reads only); after the kill the I/O must queue
#                            (no file acknowledged for MPATH_ADMIN s) until "the
#                            administrator" runs tgtadm --params alua_owner=2 on gateway 2;
#                            gateway 1 restarts with alua_owner=2 and must come back as a
#                            standby path (prio 1), without a failback
#                            ship (MPATH_BACKEND=rbd only): non_owner_state
#                            active-non-optimized, both paths in one path group (multibus,
#                            round robin): guest-ship.sh checks that gateway 2 ships its
#                            half of the I/O to the owner, then the run ends (no kill)
#      MPATH_BACKEND         file (default): one backing file, as above; rbd: the LUN is an
#                            RBD image on a mini Ceph cluster started in the guest
#                            (/vmtest/up.sh, tools/ceph/up.sh; OSD_BYTES its memstore
#                            size), write_cache true, the owner caches write-back, and
#                            explicit ALUA (MPATH_MODE is stpg then): no non_owner_state
#                            given (auto), so gateway 2 is standby (prio 1, ghost path) and
#                            the kernel probes of its disk move nothing. After the kill,
#                            dm-multipath switches to gateway 2's path group and
#                            scsi_dh_alua activates it with SET TARGET PORT GROUPS; gateway
#                            2 fences the dead owner (breaks its lock), takes the LUN over
#                            and answers the STPG; the kernel log must show "port group 02
#                            state A" after the kill, gateway 2's log, metrics and RTPG
#                            that it owns the LUN, and the prio-50 path group must be its
#                            path. Gateway 1 restarts as a standby non-owner (the record
#                            and the lock stay with gateway 2): its path comes back prio
#                            1 (ghost), its RTPG group 1 standby, group 2 active/optimized,
#                            and no failback of its own. But multipathd keeps the failed
#                            path in the live group, so dm-multipath reinstates it there
#                            and scsi_dh_alua activates it with STPG: the LUN goes to
#                            gateway 1 and either comes back (a round trip, counted) or
#                            stays (a failback, reported); it must settle within 30 s on
#                            one owner, the other standby, with the matching map
# Prints VM_MPATH_OK mode=ship backend=rbd ship=sent:N,served:N,verified,pr=register,reserve,conflict,clear for the ship mode;
# otherwise VM_MPATH_OK mode=M backend=B [pr_shared=...] [lba_status=rbd_diff(...)] stall=S files_before=N
# files_after=M verified=V fsck=clean on success, VM_MPATH_FAIL: <why> otherwise.
# word splitting of $(pg_summary) into "set --" is intended
# shellcheck disable=SC2046
set -u
IQN=iqn.2026-11.org.numatgt:vmmpath
P1=127.0.0.1:3260
P2=127.0.0.2:3260
LUN_FILE=/tmp/vm-mpath-lun.img
LUN_MB=128
MNT=/tmp/mnt-mpath
STAGE=/tmp/mpath-stage
ACKED=/tmp/mpath-acked.list
REPL=${MPATH_REPLACEMENT:-5}
BEFORE=${MPATH_BEFORE:-4}
AFTER=${MPATH_AFTER:-4}
FAILBACK=${MPATH_FAILBACK:-1}
MODE=${MPATH_MODE:-ano}
ADMIN=${MPATH_ADMIN:-3}
BACKEND=${MPATH_BACKEND:-file}
CEPH_DIR=
IMAGE=mpath
OWNER=1
[ "$BACKEND" = rbd ] && MODE=${MPATH_MODE:-stpg}
case "$MODE" in
  stpg) NON_OWNER='' WCACHE=true PRIO2=1 STATE2=S ;;
  ano|ship) NON_OWNER=active-non-optimized WCACHE=true PRIO2=10 STATE2=N ;;
  standby) NON_OWNER=standby WCACHE=false PRIO2=1 STATE2=S ;;
  *) echo "VM_MPATH_FAIL: MPATH_MODE must be ano or standby (stpg with MPATH_BACKEND=rbd)"; exit 1 ;;
esac
case "$BACKEND/$MODE" in
  file/ano|file/standby|rbd/stpg|rbd/ship) ;;
  *) echo "VM_MPATH_FAIL: MPATH_BACKEND must be file (MPATH_MODE ano or standby), or rbd (MPATH_MODE stpg or ship)"; exit 1 ;;
esac
# the path grouping: one group per ALUA state, or (ship) both paths in one, round robin
PGP=group_by_prio PSEL="service-time 0" GROUP_WORDS=4
[ "$MODE" = ship ] && PGP=multibus PSEL="round-robin 0" GROUP_WORDS=2
G1PID=
G2PID=
WPID=
UPID=
MPID=
MAP=
C1=$((2000 + $$ % 20000))
C2=$((C1 + 1))
THIN_PID=
THIN_IQN=
THIN_RESULT=

. /vmtest/guest-lib.sh
[ "$BACKEND" = rbd ] && . /vmtest/guest-rbd-thin.sh
[ "$BACKEND" = rbd ] && . /vmtest/guest-pr-shared.sh
[ "$BACKEND" = rbd ] && . /vmtest/guest-ship.sh
fail() {
  echo "VM_MPATH_FAIL: $*"
  multipath -ll 2>&1 | head -n 30
  dump_log /tmp/gw1.log "numatgtd-mpath-gw1.log"
  echo "---- gateway 2 (last 30 lines) ----"
  tail -n 30 /tmp/gw2.log 2>/dev/null
  echo "---- tgtadm (last 10 lines) ----"
  tail -n 10 /tmp/gw-tgtadm.log 2>/dev/null
  echo "---- multipathd (last 40 lines) ----"
  tail -n 40 /tmp/multipathd.log 2>/dev/null
  [ -d /vmtest/out ] && cp /tmp/gw2.log /tmp/multipathd.log /vmtest/out/ 2>/dev/null
  [ -n "$WPID" ] && kill -9 "$WPID" 2>/dev/null
  umount -l "$MNT" 2>/dev/null
  [ -n "$MPID" ] && kill -9 "$MPID" 2>/dev/null
  [ -n "$MAP" ] && dmsetup remove --force "$MAP" 2>/dev/null
  timeout 30 iscsiadm -m node -T "$IQN" --logout >/dev/null 2>&1
  [ -n "$THIN_IQN" ] && timeout 30 iscsiadm -m node -T "$THIN_IQN" --logout >/dev/null 2>&1
  for p in $G1PID $G2PID $THIN_PID $UPID; do kill -9 "$p" 2>/dev/null; done
  if [ -s /tmp/thin.log ]; then
    echo "---- numatgtd of the thin LUN (last 20 lines) ----"
    tail -n 20 /tmp/thin.log
  fi
  if [ -n "$CEPH_DIR" ]; then
    echo "---- ceph osd.0 log (last 20 lines) ----"
    tail -n 20 "$CEPH_DIR"/log/osd.0.log 2>/dev/null
    bash /vmtest/down.sh "$CEPH_DIR"
  fi
  exit 1
}
# a random number in [LO, HI]
rand() { echo $(( $1 + $(od -An -N4 -tu4 /dev/urandom) % ($2 - $1 + 1) )); }
# seconds since boot, with hundredths
now() { cut -d' ' -f1 /proc/uptime; }

# the metrics address of gateway GROUP (rbd: on, to read the ALUA metrics)
metrics_addr() { # GROUP
  if [ "$BACKEND" = rbd ]; then echo "127.0.0.$1:9470"; else echo off; fi
}

# gateway GROUP's ALUA metrics: "state owner takeover fenced_other release fenced"
alua_metrics() { # GROUP
  curl -s --max-time 5 "http://127.0.0.$1:9470/metrics" | awk '
    /^numatgt_lun_alua_state\{/ && $NF == 1 {
      s = $0; sub(/.*state="/, "", s); sub(/".*/, "", s)
      st = s == "active_optimized" ? 0 : s == "active_non_optimized" ? 1 : s == "standby" ? 2 : s == "unavailable" ? 3 : 15 }
    /^numatgt_lun_alua_owner_group\{/ { ow = $NF }
    /^numatgt_lun_alua_transitions_total\{/ {
      k = $0; sub(/.*kind="/, "", k); sub(/".*/, "", k); m[k] = $NF }
    END { print st, ow, m["takeover"] + 0, m["fenced_other"] + 0, m["release"] + 0, m["fenced"] + 0 }'
}

# the block device (sdX) of the session on portal P (ADDR:PORT)
portal_dev() { # P
  iscsiadm -m session -P3 2>/dev/null | awk -v p="$1" '
    /Current Portal:/ { c = $3 }
    /Attached scsi disk/ && index(c, p) == 1 { print $4; exit }'
}

# REPORT TARGET PORT GROUPS through DEV, as sg_rtpg prints the ids and states: "GROUP:STATE
# ..." (e.g. "0x1:0x01 0x2:0x00")
rtpg_of() { # DEV
  sg_rtpg -d "/dev/$1" 2>/dev/null | awk '
    /target port group id/ { for (i = 1; i <= NF; i++) if ($i ~ /^0x/) { g = $i; sub(/,$/, "", g); break } }
    /asymmetric access state/ { for (i = 1; i <= NF; i++) if ($i ~ /^0x/) { printf "%s:%s ", g, $i; break } }'
}

# the portal of the usable path in the path group of priority PRIO (multipathd may keep a
# failed path, whose priority it cannot read, in the same group: skipped)
pg_portal() { # PRIO
  d=$(multipath -ll "$MAP" | awk -v p="prio=$1" '$0 ~ p" " { g = 1; next } /prio=/ { g = 0 }
    g && / active / { for (i = 1; i < NF; i++) if ($i ~ /^[0-9]+:[0-9]+:[0-9]+:[0-9]+$/) { print $(i + 1); exit } }')
  [ -n "$d" ] && dev_portal "$d"
}

# the Ceph cluster in the guest and the image
ceph_up() {
  CEPH_DIR=/tmp/mpath-ceph
  t0=$(now)
  CEPH_MAX_LIFE=600 timeout 150 bash /vmtest/up.sh "$CEPH_DIR" > /tmp/ceph-up.log 2>&1 \
    || { cat /tmp/ceph-up.log; tail -n 20 "$CEPH_DIR"/log/*.log 2>/dev/null; fail "tools/ceph/up.sh"; }
  timeout 60 rbd -c "$CEPH_DIR/ceph.conf" create --size "${LUN_MB}M" "rbd/$IMAGE" \
    || fail "rbd create rbd/$IMAGE"
  step "Ceph up (1 mon, 1 memstore OSD of $(grep 'memstore device bytes' "$CEPH_DIR/ceph.conf" | cut -d= -f2 | tr -d ' ') bytes) and image rbd/$IMAGE (${LUN_MB} MiB) in $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s"
}

# start gateway GROUP; sets G1PID or G2PID
# tgtadm on gateway control port CTL (its output kept in /tmp/gw-tgtadm.log)
gw_admin() { # CTL ARGS...
  ctl=$1; shift
  echo "tgtadm -C $ctl --lld iscsi $*" >> /tmp/gw-tgtadm.log
  timeout 60 tgtadm -C "$ctl" --lld iscsi "$@" >> /tmp/gw-tgtadm.log 2>&1
}

# gateway GROUP (the other one is PEER) on PORTAL: numatgtd started as tgtd is (no
# configuration file), then set up with Debian's tgtadm alone (issue 26): the target, its
# ALUA group, peer and non-owner state, LUN 1, its owner and write cache, and last the
# access rule, so that no initiator logs in before the LUN is in its final state
start_gateway() { # GROUP PEER PORTAL CONTROL_PORT
  mkdir -p "/tmp/gw$1-state"
  "$NUMATGTD" -f -C "$4" --iscsi "portal=$3" --cache-size 64M --state-dir "/tmp/gw$1-state" \
    --metrics "$(metrics_addr "$1")" >> "/tmp/gw$1.log" 2>&1 &
  pid=$!
  eval "G$1PID=$pid"
  wait_listen "$pid" "$3"
  gw_admin "$4" --op new --mode target --tid 1 -T "$IQN" || fail "gateway $1: tgtadm new target"
  gw_admin "$4" --op update --mode target --tid 1 --name alua_group --value "$1" \
    || fail "gateway $1: tgtadm alua_group"
  gw_admin "$4" --op update --mode target --tid 1 --name alua_peers --value "$2" \
    || fail "gateway $1: tgtadm alua_peers"
  if [ -n "$NON_OWNER" ]; then
    gw_admin "$4" --op update --mode target --tid 1 --name alua_non_owner_state --value "$NON_OWNER" \
      || fail "gateway $1: tgtadm alua_non_owner_state"
  fi
  if [ "$BACKEND" = rbd ]; then
    gw_admin "$4" --op new --mode logicalunit --tid 1 --lun 1 --bstype rbd --backing-store "rbd/$IMAGE" \
      --bsopts "conf=$CEPH_DIR/ceph.conf;id=admin;rados_osd_op_timeout=10" || fail "gateway $1: tgtadm new LUN"
  else
    gw_admin "$4" --op new --mode logicalunit --tid 1 --lun 1 --backing-store "$LUN_FILE" \
      || fail "gateway $1: tgtadm new LUN"
  fi
  # the owner is the lowest group unless said otherwise
  if [ "$OWNER" != 1 ]; then
    gw_admin "$4" --op update --mode logicalunit --tid 1 --lun 1 --params "alua_owner=$OWNER" \
      || fail "gateway $1: tgtadm alua_owner=$OWNER"
  fi
  # write cache off as tgt-admin writes it: the Caching mode page with WCE clear
  if [ "$WCACHE" = false ]; then
    gw_admin "$4" --op update --mode logicalunit --tid 1 --lun 1 \
      --params "mode_page=8:0:18:0x10:0:0xff:0xff:0:0:0xff:0xff:0xff:0xff:0x80:0x14:0:0:0:0:0:0" \
      || fail "gateway $1: tgtadm mode_page (write cache off)"
  fi
  gw_admin "$4" --op bind --mode target --tid 1 -I ALL || fail "gateway $1: tgtadm bind"
  step "gateway $1 (pid $pid) listens on $3, control port $4; target, ALUA group $1 (peer $2) and LUN made with tgtadm"
}

# stops the gateways still running (SIGTERM); each must exit with status 0
stop_gateways() {
  for v in G1PID G2PID; do
    eval "p=\$$v"
    [ -n "$p" ] || continue
    stop_pid "$p" 20
    eval "$v="
    [ "$TRC" = 0 ] || fail "gateway pid $p exited with status $TRC after SIGTERM"
  done
}

# the multipath map's table line of each path group: "prio status" (status active/enabled)
# from `multipath -ll`; prints e.g. "50 active 10 enabled"
pg_summary() {
  multipath -ll "$MAP" 2>/dev/null | sed -n 's/.*policy=.* prio=\([0-9]*\) status=\([a-z]*\).*/\1 \2/p' \
    | tr '\n' ' '
}

# the portal (ADDR:PORT,TPGT) of the session whose disk is DEV
dev_portal() { # DEV
  iscsiadm -m session -P3 2>/dev/null | awk -v d="$1" '
    /Current Portal:/ { p = $3 }
    /Attached scsi disk/ && $4 == d { print p; exit }'
}

# the writer: files of 1 KiB - 256 KiB until stopped (at most 4000 or 120 s)
writer() {
  dir=$MNT/w
  mkdir -p "$dir" && sync "$dir" "$MNT" || { echo "writer: mkdir $dir failed"; return 1; }
  n=0
  end=$(( $(cut -d. -f1 /proc/uptime) + 120 ))
  while [ $n -lt 4000 ] && [ "$(cut -d. -f1 /proc/uptime)" -lt $end ]; do
    n=$((n + 1))
    size=$(rand 1024 262144)
    head -c "$size" /dev/urandom > "$STAGE/data" || return 1
    sum=$(sha256sum < "$STAGE/data" | cut -d' ' -f1)
    dd if="$STAGE/data" of="$dir/f$n" bs=64k conv=fsync status=none 2>/dev/null \
      || { echo "writer: dd f$n failed"; return 1; }
    sync "$dir" 2>/dev/null || { echo "writer: fsync of the directory failed"; return 1; }
    # only now is the file durable: record it in the guest's RAM
    echo "w/f$n $sum $(now)" >> "$ACKED"
  done
  echo "writer: stopped after $n files"
}

# acknowledged files so far
acked() { wc -l < "$ACKED"; }

# wait (at most SECONDS) until the acknowledged count exceeds N; fails otherwise
wait_acked_over() { # N SECONDS WHY
  i=0
  until [ "$(acked)" -gt "$1" ]; do
    i=$((i + 1))
    [ $i -le $(($2 * 10)) ] || fail "$3: no file acknowledged in $2 s"
    kill -0 "$WPID" 2>/dev/null || fail "$3: the writer ended"
    sleep 0.1
  done
}

[ -n "${NUMATGTD:-}" ] && [ -x "$NUMATGTD" ] || fail "numatgtd binary not visible in the guest: '${NUMATGTD:-}'"
tools="mkfs.ext4 e2fsck iscsiadm iscsid multipath multipathd dmsetup udevadm sha256sum tgtadm"
[ "$BACKEND" = rbd ] && tools="$tools ceph-mon ceph-osd rbd sg_rtpg curl sg_get_lba_status blkdiscard blockdev sg_persist sg_raw"
for t in $tools; do
  command -v $t >/dev/null || fail "$t missing in the guest (the host's userspace; tools/install-test-deps.sh)"
done
[ -x /lib/systemd/systemd-udevd ] || fail "/lib/systemd/systemd-udevd missing"
step "$(nproc) CPUs, kernel $(uname -r)"
modprobe -a dm_mod dm_multipath dm_service_time dm_round_robin scsi_dh_alua \
  || fail "modprobe dm_multipath dm_service_time dm_round_robin scsi_dh_alua"
mkdir -p "$STAGE" "$MNT" /etc/multipath
: > "$ACKED"
# udevd: the udev database gives multipath the paths' WWIDs (ID_SERIAL) and libdevmapper its
# /dev/mapper nodes; the guest's /etc and /run are in RAM, the host is not touched
/lib/systemd/systemd-udevd > /tmp/udevd.log 2>&1 &
UPID=$!
sleep 0.5
kill -0 "$UPID" 2>/dev/null || fail "systemd-udevd exited: $(tail -n 3 /tmp/udevd.log)"

# the tested configuration (README "Several gateways (ALUA) and dm-multipath")
cat > /etc/multipath.conf <<EOF
defaults {
    user_friendly_names no
    find_multipaths     no
    polling_interval    2
}
blacklist {
    device {
        vendor  ".*"
        product ".*"
    }
}
blacklist_exceptions {
    device {
        vendor  "NUMATGT"
        product "VIRTUAL-DISK"
    }
}
devices {
    device {
        vendor                "NUMATGT"
        product               "VIRTUAL-DISK"
        path_grouping_policy  $PGP
        prio                  alua
        hardware_handler      "1 alua"
        path_selector         "$PSEL"
        path_checker          tur
        failback              immediate
        # queue while no path is left, for 15 checker intervals (30 s), then fail I/O
        no_path_retry         15
        rr_min_io_rq          1
        # on iSCSI: the session's replacement_timeout (recovery_tmo), how long a
        # failed session holds its commands before dm-multipath gets them back
        fast_io_fail_tmo      5
    }
}
EOF

if [ "$BACKEND" = rbd ]; then
  ceph_up
else
  truncate -s "${LUN_MB}M" "$LUN_FILE" || fail "create LUN file"
fi
start_gateway 1 2 "$P1" "$C1"
start_gateway 2 1 "$P2" "$C2"
iscsid || fail "iscsid"
sleep 1
for p in "$P1" "$P2"; do
  timeout 60 iscsiadm -m discovery -t sendtargets -p "$p" >/dev/null || fail "discovery on $p"
  # a failed session gives its commands back to dm-multipath after REPL s (default 120 s)
  iscsiadm -m node -T "$IQN" -p "$p" -o update -n node.session.timeo.replacement_timeout -v "$REPL" \
    || fail "set replacement_timeout on $p"
done
# rbd: the kernel reads every new disk (partition table, udev's blkid); gateway 2's standby
# port answers those reads NOT READY and the LUN stays with gateway 1
for p in "$P1" "$P2"; do
  timeout 60 iscsiadm -m node -T "$IQN" -p "$p" --login >/dev/null || fail "login to $p"
  timeout 30 udevadm settle || true
done
if [ "$BACKEND" = rbd ]; then
  i=0
  until [ "$(alua_metrics 1 | cut -d' ' -f1-2)" = "0 1" ]; do
    i=$((i + 1)); [ $i -le 150 ] || fail "gateway 1 does not own the LUN 30 s after the logins: $(alua_metrics 1)"; sleep 0.2
  done
  step "gateway 1 owns the LUN after the logins (gateway 1: $(sed 's/\x1b\[[0-9;]*m//g' /tmp/gw1.log | grep -c 'RBD LUN taken over') takeover(s), gateway 2: $(sed 's/\x1b\[[0-9;]*m//g' /tmp/gw2.log | grep -c 'RBD LUN taken over'))"
fi
i=0
until [ "$(ls /sys/class/iscsi_session/session*/device/target*/*/block 2>/dev/null | wc -l)" -ge 2 ]; do
  i=$((i + 1)); [ $i -le 100 ] || fail "two iSCSI disks did not appear in 20 s"; sleep 0.2
done
for s in /sys/class/iscsi_session/session*; do
  d=$(ls "$s"/device/target*/*/block)
  h=$(cat "$s"/device/target*/*/dh_state 2>/dev/null)
  step "$(basename "$s"): $(cat "$s"/targetname) tpgt $(cat "$s"/tpgt) -> /dev/$d, device handler '$h', $(cat /sys/block/"$d"/device/vendor) $(cat /sys/block/"$d"/device/model)"
done

multipathd -d -s > /tmp/multipathd.log 2>&1 &
MPID=$!
i=0
while :; do
  MAP=$(multipath -l -v1 2>/dev/null | head -n 1)
  [ -n "$MAP" ] && [ "$(pg_summary | wc -w)" = "$GROUP_WORDS" ] && break
  i=$((i + 1))
  [ $i -le 100 ] || fail "multipathd made no map with $((GROUP_WORDS / 2)) path group(s) in 20 s"
  kill -0 "$MPID" 2>/dev/null || fail "multipathd exited"
  sleep 0.2
done
timeout 10 udevadm settle || true
multipath -ll "$MAP"
[ -b "/dev/mapper/$MAP" ] || fail "/dev/mapper/$MAP missing"
for s in /sys/class/iscsi_session/session*; do
  step "$(basename "$s"): recovery_tmo $(cat "$s"/recovery_tmo) s"
done
if [ "$MODE" = ship ]; then
  # both paths in one group, round robin: the shipping check, then tear down and report
  i=0
  until [ "$(multipath -ll "$MAP" | grep -c 'active ready running')" = 2 ]; do
    i=$((i + 1)); [ $i -le 100 ] || fail "ship: the map's two paths are not both active in 20 s"; sleep 0.2
  done
  multipath -ll "$MAP"
  ship_check "$(portal_dev "$P1")" "$(portal_dev "$P2")"
  kill "$MPID" 2>/dev/null; wait "$MPID" 2>/dev/null; MPID=
  dmsetup remove "$MAP" || fail "dmsetup remove $MAP"
  MAP=
  timeout 60 iscsiadm -m node -T "$IQN" --logout >/dev/null || fail "logout"
  stop_gateways
  kill "$UPID" 2>/dev/null; wait "$UPID" 2>/dev/null; UPID=
  bash /vmtest/down.sh "$CEPH_DIR" || fail "tools/ceph/down.sh"
  CEPH_DIR=
  echo "VM_MPATH_OK mode=$MODE backend=$BACKEND $SHIP_RESULT"
  exit 0
fi
# scsi_dh_alua read both gateways' REPORT TARGET PORT GROUPS: A(ctive/optimized) on group 1,
# N(on-optimized) or S(tandby) on group 2
dmesg | grep -q 'alua: port group 01 state A' || fail "no 'alua: port group 01 state A' in the kernel log"
dmesg | grep -q "alua: port group 02 state $STATE2" || fail "no 'alua: port group 02 state $STATE2' in the kernel log"
i=0
while [ "$BACKEND" = rbd ] && [ "$(pg_summary)" != "50 active $PRIO2 enabled " ]; do
  # multipathd reads the priorities every polling_interval
  i=$((i + 1)); [ $i -le 100 ] || break; sleep 0.2
done
set -- $(pg_summary)
step "map $MAP: path groups prio=$1 status=$2, prio=$3 status=$4"
[ "$1 $2 $3" = "50 active $PRIO2" ] || fail "want path group prio 50 active then prio $PRIO2, got '$*'"
# the prio-50 group's path must be gateway 1's session
pg1_dev=$(multipath -ll "$MAP" | awk '/prio=50/ { g = 1; next } /prio=/ { g = 0 }
  g { for (i = 1; i < NF; i++) if ($i ~ /^[0-9]+:[0-9]+:[0-9]+:[0-9]+$/) { print $(i + 1); exit } }')
pg1_addr=$(dev_portal "$pg1_dev")
step "active/optimized path group: /dev/$pg1_dev on portal ${pg1_addr:-unknown}"
case "$pg1_addr" in "$P1"*) ;; *) fail "the prio-50 path /dev/$pg1_dev is not gateway 1's ($P1)" ;; esac
if [ "$MODE" = stpg ]; then
  # gateway 2's path: standby, multipath's tur checker calls it ghost
  multipath -ll "$MAP" | grep -A2 "prio=$PRIO2 " | grep -q 'ghost' \
    || fail "gateway 2's path is not a ghost path in the prio-$PRIO2 group"
  step "gateway 2's path: standby (prio $PRIO2, ghost)"
fi
if [ "$BACKEND" = rbd ]; then
  # the other session's disk: gateway 2's path
  pg2_dev=
  for s in /sys/class/iscsi_session/session*; do
    d=$(ls "$s"/device/target*/*/block)
    [ "$d" != "$pg1_dev" ] && pg2_dev=$d
  done
  [ -n "$pg2_dev" ] || fail "no path device of gateway 2"
  pr_shared_check "$pg1_dev" "$pg2_dev"
fi

timeout 120 mkfs.ext4 -q -F "/dev/mapper/$MAP" || fail "mkfs.ext4"
mount "/dev/mapper/$MAP" "$MNT" || fail "mount"
writer > /tmp/writer.log 2>&1 &
WPID=$!
wait_acked_over 0 30 "before the kill"
sleep "$BEFORE"
kill -0 "$WPID" 2>/dev/null || fail "the writer ended before the kill: $(cat /tmp/writer.log)"
dmesg_before=$(dmesg | wc -l)
kill -9 "$G1PID"
t_kill=$(now)
wait "$G1PID" 2>/dev/null
G1PID=
n_before=$(acked)
step "gateway 1 (the owner) SIGKILLed at ${t_kill}s; $n_before files acknowledged before"
if [ "$MODE" = standby ]; then
  # gateway 2 is standby: nothing may complete until ownership moves
  sleep "$ADMIN"
  [ "$(acked)" = "$n_before" ] || fail "standby: files acknowledged with the owner dead and no owner moved"
  step "standby: no file acknowledged in the $ADMIN s after the kill; map: $(pg_summary)"
  multipath -ll "$MAP"
  tgtadm -C "$C2" --lld iscsi --mode logicalunit --op update --tid 1 --lun 1 --params alua_owner=2 \
    || fail "tgtadm alua_owner=2 on gateway 2"
  OWNER=2
  step "ownership moved to group 2 on gateway 2 (tgtadm --params alua_owner=2)"
fi
wait_acked_over "$n_before" 90 "after the kill"
t_first=$(awk -v t="$t_kill" '$3 > t { print $3; exit }' "$ACKED")
stall=$(awk -v a="$t_kill" -v b="$t_first" 'BEGIN { printf "%.2f", b - a }')
step "first file acknowledged after the kill at ${t_first}s: stall ${stall} s"
set -- $(pg_summary)
step "map after the failover: $*"
multipath -ll "$MAP"
takeover="none"
if [ "$BACKEND" = rbd ]; then
  # gateway 2 answered 02/04/0A, fenced the dead owner and took the LUN over
  line=$(sed 's/\x1b\[[0-9;]*m//g' /tmp/gw2.log | grep 'RBD LUN taken over' | tail -n 1)
  [ -n "$line" ] || fail "no 'RBD LUN taken over' in gateway 2's log"
  step "gateway 2: $(echo "$line" | sed 's/^.*\(RBD LUN taken over\)/\1/')"
  sed 's/\x1b\[[0-9;]*m//g' /tmp/gw2.log | grep 'breaking its lock' | tail -n 1
  echo "$line" | grep -q 'fenced_other=true' || fail "gateway 2 took the LUN over without fencing: $line"
  takeover="$(echo "$line" | sed -n 's/.* ms=\([0-9]*\).*/\1/p')ms"
  # the kernel activated gateway 2's group with STPG (scsi_dh_alua logs the new state)
  i=0
  until dmesg | tail -n +"$((dmesg_before + 1))" | grep -q 'alua: port group 02 state A'; do
    i=$((i + 1))
    [ $i -le 100 ] || { dmesg | tail -n +"$((dmesg_before + 1))" | grep -iE 'alua|multipath|iscsi|sd ' | tail -n 30
      fail "no 'alua: port group 02 state A' in the kernel log after the kill"; }
    sleep 0.2
  done
  step "kernel log after the kill:"
  dmesg | tail -n +"$((dmesg_before + 1))" | grep -iE 'alua|device-mapper: multipath' | tail -n 12
  set -- $(alua_metrics 2)
  step "gateway 2's metrics: alua_state=$1 owner_group=$2 takeover=$3 fenced_other=$4 release=$5 fenced=$6"
  [ "${1:-} ${2:-}" = "0 2" ] && [ "${3:-0}" -ge 1 ] && [ "${4:-0}" -ge 1 ] \
    || fail "gateway 2's metrics: want state 0 owner 2 takeover >= 1 fenced_other >= 1, got '$*'"
  d2=$(portal_dev "$P2")
  r2=$(rtpg_of "$d2")
  step "RTPG through gateway 2 (/dev/$d2): $r2"
  case "$r2" in *"0x2:0x00"*) ;; *) fail "gateway 2's RTPG does not show group 2 active/optimized: '$r2'" ;; esac
  # the kernel re-reads the states (ASYMMETRIC ACCESS STATE CHANGED) and multipathd the
  # priorities: the prio-50 path group becomes gateway 2's path
  i=0
  until case "$(pg_portal 50)" in "$P2"*) true ;; *) false ;; esac; do
    i=$((i + 1))
    [ $i -le 150 ] || { multipath -ll "$MAP"; fail "gateway 2's path not in a prio-50 group 30 s after the takeover"; }
    sleep 0.2
  done
  step "prio-50 path group on gateway 2's path $(awk -v a="$t_kill" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s after the kill: $(pg_summary)"
  multipath -ll "$MAP"
fi
sleep "$AFTER"
n_mid=$(acked)
step "$((n_mid - n_before)) files acknowledged through gateway 2 in the ${AFTER} s after the stall"
[ $((n_mid - n_before)) -ge 2 ] || fail "fewer than 2 files acknowledged through gateway 2"

failback="not tried"
if [ "$FAILBACK" = 1 ]; then
  start_gateway 1 2 "$P1" "$C1"
  t_restart=$(now)
  i=0
  while [ "$MODE" = standby ]; do
    # the old owner comes back told that group 2 owns the LUN: a standby path, no failback
    set -- $(pg_summary)
    [ "${1:-} ${2:-} ${3:-}" = "50 active 1" ] && multipath -ll "$MAP" | grep -A2 'prio=1 ' | grep -q 'ghost\|active ready' && break
    i=$((i + 1))
    [ $i -le 150 ] || fail "gateway 1's path not back as standby within 30 s of its restart: $*"
    sleep 0.2
  done
  while [ "$BACKEND" = rbd ]; do
    # gateway 1 comes back a standby non-owner (the record and the lock are gateway 2's).
    # But multipathd 0.9.4 keeps the failed path, with its last priority (50), in the live
    # path group (reload "... 1 1 service-time 0 2 1 8:0 1 8:16 1"), so dm-multipath
    # reinstates it in the active group and scsi_dh_alua activates it with STPG: the LUN
    # moves to gateway 1 and, depending on how multipathd then regroups, comes back to
    # gateway 2 (a round trip) or stays (a failback). Both are cooperative handovers;
    # wait (bounded by the clock: the writer slows every command) until it settles: one
    # owner, the other standby, the prio-50 group the owner's path, prio 1 a ghost path
    m1=$(alua_metrics 1 | cut -d' ' -f1-2)
    m2=$(alua_metrics 2 | cut -d' ' -f1-2)
    case "$m1/$m2" in
      "2 2/0 2") OWNER_NOW=2 po=$P2 pst=$P1 ;;
      "0 1/2 1") OWNER_NOW=1 po=$P1 pst=$P2 ;;
      *) OWNER_NOW= ;;
    esac
    sm=$(pg_summary)
    if [ -n "$OWNER_NOW" ]; then
      case " $sm" in
        *" 50 active "*)
          if multipath -ll "$MAP" | grep -A2 "prio=$PRIO2 " | grep -q 'ghost running' \
            && case "$(pg_portal 50)" in "$po"*) true ;; *) false ;; esac \
            && case "$(pg_portal "$PRIO2")" in "$pst"*) true ;; *) false ;; esac; then
            break
          fi ;;
      esac
    fi
    awk -v a="$t_restart" -v b="$(now)" 'BEGIN { exit !(b - a > 30) }' \
      && { multipath -ll "$MAP"; fail "not settled 30 s after gateway 1's restart: gateway 1 $m1, gateway 2 $m2, map $sm"; }
    sleep 0.2
  done
  while [ "$MODE" = ano ] && [ "$BACKEND" = file ]; do
    set -- $(pg_summary)
    [ "${1:-} ${2:-}" = "50 active" ] && multipath -ll "$MAP" | grep -A2 'prio=50' | grep -q 'active ready running' && break
    i=$((i + 1))
    [ $i -le 150 ] || fail "no failback to gateway 1 within 30 s of its restart: $*"
    sleep 0.2
  done
  fb=$(awk -v a="$t_restart" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
  failback="${fb}s"
  if [ "$BACKEND" = rbd ]; then
    sed 's/\x1b\[[0-9;]*m//g' /tmp/gw1.log /tmp/gw2.log | grep -E 'RBD LUN (taken|handed) over' | sort | tail -n 4
    set -- $(alua_metrics 1)
    if [ "$OWNER_NOW" = 2 ]; then
      failback="none (gateway 1 back as standby in ${fb}s; $3 transient round trip(s) to gateway 1)"
      step "gateway 1's path back, prio $PRIO2 (ghost), ${fb} s after its restart; gateway 2 keeps the LUN ($3 round trip(s) to gateway 1)"
      want1=0x02 want2=0x00 moved=0
    else
      failback="to gateway 1 by the kernel's STPG through its reinstated path, settled ${fb}s after its restart"
      step "the LUN failed back to gateway 1 (STPG through its reinstated path), settled ${fb} s after its restart; gateway 2's path prio $PRIO2 (ghost)"
      want1=0x00 want2=0x02 moved=1
    fi
    step "gateway 1's metrics: alua_state=$1 owner_group=$2 takeover=$3 fenced_other=$4 release=$5 fenced=$6"
    [ "$4 $6 $(($3 - $5))" = "0 0 $moved" ] \
      || fail "gateway 1's metrics: want nothing fenced and takeovers - releases = $moved, got '$*'"
    d1=$(portal_dev "$P1")
    r1=$(rtpg_of "$d1")
    step "RTPG through gateway 1 (/dev/$d1): $r1"
    case "$r1" in *"0x1:$want1"*) ;; *) fail "gateway 1's RTPG: want group 1 $want1, got '$r1'" ;; esac
    case "$r1" in *"0x2:$want2"*) ;; *) fail "gateway 1's RTPG: want group 2 $want2, got '$r1'" ;; esac
  elif [ "$MODE" = ano ]; then
    step "failback: group 1's path active again ${fb} s after gateway 1 restarted"
  else
    failback="none (standby path back in ${fb}s)"
    step "gateway 1's path back as a standby path ${fb} s after its restart (group 2 owns the LUN)"
  fi
  multipath -ll "$MAP"
  n_fb=$(acked)
  wait_acked_over "$n_fb" 30 "after the failback"
  if [ "$BACKEND" = rbd ]; then
    # still no move: I/O stays with the owner
    sleep 2
    [ "$(pg_portal 50 | cut -d, -f1)" = "${po%,*}" ] || fail "the prio-50 path moved away from gateway $OWNER_NOW: $(pg_summary)"
    set -- $(alua_metrics 2)
    [ "$4 $6" = "1 0" ] || fail "gateway 2's metrics after the restart: want fenced_other 1 fenced 0, got '$*'"
    case "$OWNER_NOW/$1 $2" in "2/0 2"|"1/2 1") ;; *) fail "gateway 2's metrics after the restart: '$*' (owner $OWNER_NOW)" ;; esac
    step "after gateway 1's restart the LUN stays with gateway $OWNER_NOW (gateway 2's metrics: state $1 owner $2 takeover $3 release $5)"
  fi
fi

kill "$WPID" 2>/dev/null
wait "$WPID" 2>/dev/null
WPID=
n_total=$(acked)
n_after=$((n_total - n_before))
check_acked_and_fsck "/dev/mapper/$MAP" ""

# tear down: the map, the sessions, the daemons
kill "$MPID" 2>/dev/null; wait "$MPID" 2>/dev/null; MPID=
dmsetup remove "$MAP" || fail "dmsetup remove $MAP"
MAP=
timeout 60 iscsiadm -m node -T "$IQN" --logout >/dev/null || fail "logout"
stop_gateways
[ "$BACKEND" = rbd ] && rbd_thin_check
kill "$UPID" 2>/dev/null; wait "$UPID" 2>/dev/null; UPID=
if [ -n "$CEPH_DIR" ]; then
  bash /vmtest/down.sh "$CEPH_DIR" || fail "tools/ceph/down.sh"
  CEPH_DIR=
fi
echo "---- kernel ALUA / multipath messages ----"
dmesg | grep -iE 'alua|multipath' | grep -v 'version\|registered' | tail -n 20
echo "VM_MPATH_OK mode=$MODE backend=$BACKEND${PR_RESULT:+ $PR_RESULT}${THIN_RESULT:+ $THIN_RESULT} takeover=$takeover stall=${stall}s files_before=$n_before files_after=$n_after verified=$FILES lost=0 failback=$failback fsck=clean"
