#!/bin/sh
# Guest side of the kernel-initiator test (runs as root inside the QEMU guest, see vm-run.sh).
# Starts the target on 127.0.0.1:3260 with a 256 MiB file LUN, then with open-iscsi and the
# kernel's iscsi_tcp: discovery, login, mkfs.ext4, mount, write 32 MiB of random data,
# sha256, umount, drop caches, remount, verify, logout; then CHAP on a second target: a wrong
# initiator secret is refused, mutual CHAP logs in and reads, a wrong target secret makes the
# initiator refuse; then a CD/DVD LUN of an ISO image (guest-cd.sh: sr driver, sg3_utils,
# mount -t iso9660, a refused WRITE, eject and close); then a tape drive of a tgtimg tape
# (guest-tape.sh: st driver, mt, tar of two tape files read back, offline and load); then
# Debian's L700 virtual tape library example loaded with tgt-admin (guest-changer.sh: mtx
# status, load, tar through the drive, unload); then a local scsi_debug disk passed through
# with --bstype sg and bsg (guest-passthrough.sh: sg_inq and sg_readcap show the device
# itself, data written through the target is on the device, sg_reset reaches it); stop the
# target by PID.
# numatgtd (default) is started exactly as tgtd is (no configuration file) and configured
# with the same tgtadm commands; the remount's reads must then be NUMA cache hits (SIGUSR1
# cache report), and with the LUN's reads limited by tgtadm (`qos_read_iops=300`) fio at
# QD32 through the kernel sees no error and no more than the limit, the kernel logs no
# timeout. numatgtd-yaml: the same targets from a YAML file instead.
# Env: TARGET=numatgtd (default) | numatgtd-yaml | tgtd
#      NUMATGTD   path of the numatgtd binary as the guest sees it
# Prints VM_ISCSI_TCP_OK on success.
set -u
TARGET=${TARGET:-numatgtd}
IQN=iqn.2026-11.org.numatgt:vmtest
CHAP_IQN=iqn.2026-11.org.numatgt:vmtest-chap
PORTAL=127.0.0.1:3260
LUN_FILE=/tmp/vm-lun1.img
CHAP_LUN_FILE=/tmp/vm-lun2.img
CD_IQN=iqn.2026-11.org.numatgt:vmtest-cd
CD_ISO=/tmp/vm-cd.iso
TAPE_IQN=iqn.2026-11.org.numatgt:vmtest-tape
TAPE_FILE=/tmp/vm-tape.img
# CHAP accounts: the initiator's (incoming) and the target's (outgoing, mutual CHAP)
IN_USER=vmuser
IN_SECRET=initiatorsecret1
OUT_USER=vmtarget
OUT_SECRET=targetsecret22
LOG=/tmp/target.log
MNT=/tmp/mnt-lun
TPID=
CTL=$((2000 + $$ % 20000))

. /vmtest/guest-lib.sh
fail() {
  echo "VM_ISCSI_TCP_FAIL: $*"
  dump_log "$LOG" "target-$TARGET.log"
  umount "$MNT" 2>/dev/null
  iscsiadm -m node -T "$IQN" -p "$PORTAL" --logout >/dev/null 2>&1
  [ -n "$TPID" ] && kill -9 "$TPID" 2>/dev/null
  exit 1
}

step "target=$TARGET, $(nproc) CPUs, kernel $(uname -r)"
numactl --hardware 2>/dev/null | head -n 2
truncate -s 256M "$LUN_FILE" || fail "create LUN file"
truncate -s 16M "$CHAP_LUN_FILE" || fail "create CHAP LUN file"
# the CD/DVD step's disc (guest-cd.sh): three files of random bytes in an ISO 9660 image
mkdir -p /tmp/vm-cd-src/sub || fail "cd source directory"
head -c 1000000 /dev/urandom > /tmp/vm-cd-src/a.bin
head -c 70001 /dev/urandom > /tmp/vm-cd-src/sub/b.bin
echo numatgt > /tmp/vm-cd-src/c.txt
genisoimage -quiet -R -J -V NUMATGT_CD -o "$CD_ISO" /tmp/vm-cd-src || fail "genisoimage"
# the tape step's tape (guest-tape.sh), as tgt's README.vtl makes them
rm -f "$TAPE_FILE"
tgtimg --op new --device-type tape --barcode=VMT00001 --size=64 --type=data --file="$TAPE_FILE" \
  > /dev/null || fail "tgtimg"

TC=$((CTL % 30000))
case "$TARGET" in
  numatgtd)
    [ -n "${NUMATGTD:-}" ] && [ -x "$NUMATGTD" ] || fail "numatgtd binary not visible in the guest: '${NUMATGTD:-}'"
    mkdir -p /tmp/numatgt-state
    "$NUMATGTD" -f -C "$TC" --iscsi portal=$PORTAL --state-dir /tmp/numatgt-state > "$LOG" 2>&1 &
    TPID=$!
    ;;
  numatgtd-yaml)
    [ -n "${NUMATGTD:-}" ] && [ -x "$NUMATGTD" ] || fail "numatgtd binary not visible in the guest: '${NUMATGTD:-}'"
    cat > /tmp/numatgtd.yaml <<YAML
portals:
  - address: $PORTAL
accounts:
  - user: $IN_USER
    password: $IN_SECRET
  - user: $OUT_USER
    password: $OUT_SECRET
targets:
  - iqn: $IQN
    luns:
      - lun: 1
        path: $LUN_FILE
        block_size: 512
  - iqn: $CHAP_IQN
    incoming_users: [$IN_USER]
    outgoing_user: $OUT_USER
    luns:
      - lun: 1
        path: $CHAP_LUN_FILE
  - iqn: $CD_IQN
    luns:
      - lun: 1
        path: $CD_ISO
        device_type: cd
  - iqn: $TAPE_IQN
    luns:
      - lun: 1
        path: $TAPE_FILE
        device_type: tape
YAML
    mkdir -p /tmp/numatgt-state
    "$NUMATGTD" -f --config /tmp/numatgtd.yaml --state-dir /tmp/numatgt-state -C "$CTL" > "$LOG" 2>&1 &
    TPID=$!
    ;;
  tgtd)
    tgtd -f -C "$TC" --iscsi portal=$PORTAL > "$LOG" 2>&1 &
    TPID=$!
    ;;
  *) fail "unknown TARGET=$TARGET" ;;
esac
step "target pid $TPID"

wait_listen "$TPID" "$PORTAL"

C="-C $TC"
if [ "$TARGET" != numatgtd-yaml ]; then
  tgtadm $C --lld iscsi --op new --mode target --tid 1 -T "$IQN" || fail "tgtadm target"
  tgtadm $C --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$LUN_FILE" || fail "tgtadm lun"
  tgtadm $C --lld iscsi --op bind --mode target --tid 1 -I ALL || fail "tgtadm bind"
  tgtadm $C --lld iscsi --op new --mode target --tid 2 -T "$CHAP_IQN" || fail "tgtadm chap target"
  tgtadm $C --lld iscsi --op new --mode logicalunit --tid 2 --lun 1 -b "$CHAP_LUN_FILE" || fail "tgtadm chap lun"
  tgtadm $C --lld iscsi --op bind --mode target --tid 2 -I ALL || fail "tgtadm chap bind"
  tgtadm $C --lld iscsi --op new --mode account --user $IN_USER --password $IN_SECRET || fail "tgtadm account"
  tgtadm $C --lld iscsi --op new --mode account --user $OUT_USER --password $OUT_SECRET || fail "tgtadm account"
  tgtadm $C --lld iscsi --op bind --mode account --tid 2 --user $IN_USER || fail "tgtadm bind account"
  tgtadm $C --lld iscsi --op bind --mode account --tid 2 --user $OUT_USER --outgoing || fail "tgtadm bind outgoing"
fi

step "iscsid + discovery"
iscsid || fail "iscsid"
sleep 1
timeout 60 iscsiadm -m discovery -t sendtargets -p "$PORTAL" || fail "discovery"
step "login"
timeout 60 iscsiadm -m node -T "$IQN" -p "$PORTAL" --login || fail "login"
iscsiadm -m session -P 3 | grep -E 'Target:|Current Portal|Connection State|Session State|Attached scsi disk'

session_disk
step "disk /dev/$DEV: $(cat /sys/block/$DEV/size) sectors"
lsblk -o NAME,SIZE,TYPE,TRAN,VENDOR,MODEL "/dev/$DEV"
[ "$(cat /sys/block/$DEV/size)" = 524288 ] || fail "disk has $(cat /sys/block/$DEV/size) sectors, want 524288"

step "mkfs.ext4"
timeout 120 mkfs.ext4 -q -F "/dev/$DEV" || fail "mkfs.ext4"
mkdir -p "$MNT"
mount "/dev/$DEV" "$MNT" || fail "mount"
step "write 32 MiB"
dd if=/dev/urandom of="$MNT/blob" bs=1M count=32 status=none || fail "write blob"
sha256sum "$MNT/blob" > /tmp/blob.sha256 || fail "sha256"
sync
umount "$MNT" || fail "umount"
echo 3 > /proc/sys/vm/drop_caches
step "remount + verify"
mount -o ro "/dev/$DEV" "$MNT" || fail "remount"
sha256sum -c /tmp/blob.sha256 || fail "sha256 mismatch after remount"
if [ "$TARGET" = numatgtd ]; then
  # the LUN was made by tgtadm: after the page cache was dropped the remount's reads must
  # have been served from numatgtd's NUMA block cache
  n=$(grep -c 'cache report: node=' "$LOG")
  kill -USR1 "$TPID" || fail "kill -USR1"
  i=0
  until [ "$(grep -c 'cache report: node=' "$LOG")" -gt "$n" ]; do
    i=$((i + 1)); [ $i -le 50 ] || fail "no cache report after SIGUSR1"; sleep 0.2
  done
  sleep 0.3
  hits=$(grep 'cache report: node=' "$LOG" | tail -n +$((n + 1)) | sed -n 's/.* hits=\([0-9]*\).*/\1/p' | awk '{ s += $1 } END { print s + 0 }')
  grep 'LUN created' "$LOG" | head -n 1
  step "tgtadm-made LUN: $hits NUMA cache hits"
  [ "$hits" -gt 0 ] || fail "the tgtadm-made LUN was not served from the NUMA cache (hits=$hits)"

  # QoS (issue 30): the LUN's reads limited with tgtadm while the kernel reads at QD32;
  # fio must see no error and no more than the limit, the kernel no timeout or conn error
  tgtadm $C --lld iscsi --op update --mode logicalunit --tid 1 --lun 1 --params qos_read_iops=300 \
    || fail "tgtadm qos_read_iops=300"
  dmesg -c > /dev/null
  res=$(timeout -k 5 60 fio --name=qos "--filename=/dev/$DEV" --readonly --rw=randread --bs=4k \
    --iodepth=32 --ioengine=libaio --direct=1 --time_based --runtime=8 --output-format=json \
    2> /tmp/fio-qos.err | python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0]
r = j["read"]
print(f"errors={j['"'"'error'"'"']} iops={r['"'"'iops'"'"']:.0f} max_latency_ms={r['"'"'clat_ns'"'"']['"'"'max'"'"'] / 1e6:.0f}")
') || fail "fio under QoS: $(tail -n 3 /tmp/fio-qos.err)"
  step "QoS: qos_read_iops=300, 4 KiB random reads at QD32 for 8 s: $res"
  case "$res" in errors=0\ *) ;; *) fail "fio under QoS reported errors: $res" ;; esac
  iops=$(echo "$res" | sed -n 's/.* iops=\([0-9]*\).*/\1/p')
  [ "${iops:-0}" -ge 150 ] && [ "${iops:-0}" -le 330 ] || fail "QoS: $iops IOPS at a 300 IOPS limit"
  bad=$(dmesg | grep -c -i 'detected conn error\|timing out command\|I/O error\|abort' || true)
  [ "$bad" = 0 ] || fail "QoS: the kernel logged $bad errors or timeouts: $(dmesg | tail -n 5)"
  tgtadm $C --lld iscsi --op show --mode target | grep -q "QoS: qos_read_iops=300" || fail "tgtadm show: no QoS line"
  tgtadm $C --lld iscsi --op update --mode logicalunit --tid 1 --lun 1 --params qos_read_iops=0 \
    || fail "tgtadm qos_read_iops=0"
fi
df -h "$MNT"
umount "$MNT" || fail "final umount"
step "logout"
timeout 60 iscsiadm -m node -T "$IQN" -p "$PORTAL" --logout || fail "logout"

chap_node() { # NAME VALUE...: set node.session.auth.NAME of the CHAP target's node record
  while [ $# -ge 2 ]; do
    iscsiadm -m node -T "$CHAP_IQN" -p "$PORTAL" -o update -n "node.session.auth.$1" -v "$2" \
      || fail "iscsiadm update $1"
    shift 2
  done
}
step "CHAP: no credentials are refused"
timeout 60 iscsiadm -m node -T "$CHAP_IQN" -p "$PORTAL" --login && fail "login without CHAP succeeded"
step "CHAP: a wrong initiator secret is refused"
chap_node authmethod CHAP username $IN_USER password wrongsecret999
timeout 60 iscsiadm -m node -T "$CHAP_IQN" -p "$PORTAL" --login && fail "login with a wrong secret succeeded"
step "mutual CHAP login"
chap_node password $IN_SECRET username_in $OUT_USER password_in $OUT_SECRET
timeout 60 iscsiadm -m node -T "$CHAP_IQN" -p "$PORTAL" --login || fail "mutual CHAP login"
iscsiadm -m session | grep -q "$CHAP_IQN" || fail "no session after mutual CHAP login"
CDEV=
i=0
while [ $i -lt 100 ]; do
  for s in /sys/class/iscsi_session/session*; do
    grep -q "$CHAP_IQN" "$s/targetname" 2>/dev/null || continue
    CDEV=$(ls "$s"/device/target*/*/block 2>/dev/null | head -n 1)
  done
  [ -n "$CDEV" ] && [ -b "/dev/$CDEV" ] && break
  i=$((i + 1)); sleep 0.2
done
[ -n "$CDEV" ] || fail "no block device for the CHAP session"
dd if="/dev/$CDEV" of=/dev/null bs=1M count=16 iflag=direct status=none || fail "read through the CHAP session"
step "CHAP disk /dev/$CDEV read; logout"
timeout 60 iscsiadm -m node -T "$CHAP_IQN" -p "$PORTAL" --logout || fail "CHAP logout"
step "mutual CHAP: a wrong target secret makes the initiator refuse"
chap_node password_in wrongtarget999
timeout 60 iscsiadm -m node -T "$CHAP_IQN" -p "$PORTAL" --login && fail "login despite a wrong target secret"
iscsiadm -m session 2>/dev/null | grep -q "$CHAP_IQN" && fail "a session exists after the failed mutual login"

. /vmtest/guest-cd.sh
. /vmtest/guest-tape.sh
. /vmtest/guest-changer.sh
. /vmtest/guest-passthrough.sh

step "stop target (pid $TPID)"
if [ "$TARGET" = tgtd ]; then
  tgtadm $C --op update --mode sys --name State -v offline
  tgtadm $C --lld iscsi --op delete --mode target --tid 1 --force
  tgtadm $C --lld iscsi --op delete --mode target --tid 2 --force
  tgtadm $C --lld iscsi --op delete --mode target --tid 3 --force
  tgtadm $C --lld iscsi --op delete --mode target --tid 4 --force
  tgtadm $C --lld iscsi --op delete --mode target --tid "$VTL_TID" --force
  tgtadm $C --op delete --mode system
fi
stop_pid "$TPID" 10
TPID=
if [ "$TARGET" != tgtd ] && [ "$TRC" != 0 ]; then
  fail "numatgtd exited with status $TRC after SIGTERM"
fi
step "target exited with status $TRC"
echo "VM_ISCSI_TCP_OK target=$TARGET"
