#!/bin/sh
# Guest side of the kernel-initiator test (runs as root inside the QEMU guest, see vm-run.sh).
# Starts the target on 127.0.0.1:3260 with a 256 MiB file LUN, then with open-iscsi and the
# kernel's iscsi_tcp: discovery, login, mkfs.ext4, mount, write 32 MiB of random data,
# sha256, umount, drop caches, remount, verify, logout, stop the target by PID.
# Env: TARGET=numatgtd (default) | tgtd
#      NUMATGTD   path of the numatgtd binary as the guest sees it
# Prints VM_ISCSI_TCP_OK on success.
set -u
TARGET=${TARGET:-numatgtd}
IQN=iqn.2026-11.org.numatgt:vmtest
PORTAL=127.0.0.1:3260
LUN_FILE=/tmp/vm-lun1.img
LOG=/tmp/target.log
MNT=/tmp/mnt-lun
TPID=
CTL=$((2000 + $$ % 20000))

step() { echo "== $(cut -d' ' -f1 /proc/uptime)s: $*"; }
dump_logs() {
  echo "---- target log ($TARGET, last 80 lines) ----"
  tail -n 80 "$LOG" 2>/dev/null
  echo "---- dmesg (last 30) ----"
  dmesg | tail -n 30
  if [ -d /vmtest/out ]; then cp "$LOG" "/vmtest/out/target-$TARGET.log" 2>/dev/null; fi
}
fail() {
  echo "VM_ISCSI_TCP_FAIL: $*"
  dump_logs
  umount "$MNT" 2>/dev/null
  iscsiadm -m node -T "$IQN" -p "$PORTAL" --logout >/dev/null 2>&1
  [ -n "$TPID" ] && kill -9 "$TPID" 2>/dev/null
  exit 1
}

step "target=$TARGET, $(nproc) CPUs, kernel $(uname -r)"
numactl --hardware 2>/dev/null | head -n 2
truncate -s 256M "$LUN_FILE" || fail "create LUN file"

case "$TARGET" in
  numatgtd)
    [ -n "${NUMATGTD:-}" ] && [ -x "$NUMATGTD" ] || fail "numatgtd binary not visible in the guest: '${NUMATGTD:-}'"
    cat > /tmp/numatgtd.yaml <<YAML
portals:
  - address: $PORTAL
targets:
  - iqn: $IQN
    luns:
      - lun: 1
        path: $LUN_FILE
        block_size: 512
YAML
    mkdir -p /tmp/numatgt-state
    "$NUMATGTD" -f --config /tmp/numatgtd.yaml --state-dir /tmp/numatgt-state -C "$CTL" > "$LOG" 2>&1 &
    TPID=$!
    ;;
  tgtd)
    tgtd -f -C "$((CTL % 30000))" --iscsi portal=$PORTAL > "$LOG" 2>&1 &
    TPID=$!
    ;;
  *) fail "unknown TARGET=$TARGET" ;;
esac
step "target pid $TPID"

i=0
until ss -ltn | grep -q "127.0.0.1:3260 "; do
  i=$((i + 1))
  [ $i -le 100 ] || fail "target does not listen on $PORTAL after 20 s"
  kill -0 "$TPID" 2>/dev/null || fail "target exited during start"
  sleep 0.2
done

if [ "$TARGET" = tgtd ]; then
  C="-C $((CTL % 30000))"
  tgtadm $C --lld iscsi --op new --mode target --tid 1 -T "$IQN" || fail "tgtadm target"
  tgtadm $C --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$LUN_FILE" || fail "tgtadm lun"
  tgtadm $C --lld iscsi --op bind --mode target --tid 1 -I ALL || fail "tgtadm bind"
fi

step "iscsid + discovery"
iscsid || fail "iscsid"
sleep 1
timeout 60 iscsiadm -m discovery -t sendtargets -p "$PORTAL" || fail "discovery"
step "login"
timeout 60 iscsiadm -m node -T "$IQN" -p "$PORTAL" --login || fail "login"
iscsiadm -m session -P 3 | grep -E 'Target:|Current Portal|Connection State|Session State|Attached scsi disk'

DEV=
i=0
while [ $i -lt 100 ]; do
  DEV=$(ls /sys/class/iscsi_session/session*/device/target*/*/block 2>/dev/null | head -n 1)
  [ -n "$DEV" ] && [ -b "/dev/$DEV" ] && break
  i=$((i + 1)); sleep 0.2
done
[ -n "$DEV" ] && [ -b "/dev/$DEV" ] || fail "no block device appeared for the session"
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
df -h "$MNT"
umount "$MNT" || fail "final umount"
step "logout"
timeout 60 iscsiadm -m node -T "$IQN" -p "$PORTAL" --logout || fail "logout"

step "stop target (pid $TPID)"
if [ "$TARGET" = tgtd ]; then
  tgtadm $C --op update --mode sys --name State -v offline
  tgtadm $C --lld iscsi --op delete --mode target --tid 1 --force
  tgtadm $C --op delete --mode system
fi
kill -TERM "$TPID" 2>/dev/null
i=0
while kill -0 "$TPID" 2>/dev/null; do
  i=$((i + 1))
  [ $i -le 50 ] || fail "target still running 10 s after SIGTERM"
  sleep 0.2
done
wait "$TPID"
trc=$?
TPID=
if [ "$TARGET" = numatgtd ] && [ "$trc" != 0 ]; then
  fail "numatgtd exited with status $trc after SIGTERM"
fi
step "target exited with status $trc"
echo "VM_ISCSI_TCP_OK target=$TARGET"
