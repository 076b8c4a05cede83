#!/bin/sh
# Guest side of the crash-consistency test (issue 15; runs as root inside the QEMU guest, see
# vm-run.sh). The kernel initiator and ext4 of the guest kernel against numatgtd, which is
# SIGKILLed in the middle of fsync'ed writes:
#   - numatgtd is started as tgtd is (no configuration file, default settings: NUMA block
#     cache, WCE=1 write-back) with a file LUN on the guest's RAM, configured with tgtadm;
#   - open-iscsi logs in, the disk must show "write back", mkfs.ext4, mount;
#   - each round a writer creates files of random size in round<N>/: random bytes are
#     checksummed in /tmp, written with dd conv=fsync, the directory fsync'ed, and only then
#     is "name checksum" appended to a list in the guest's RAM (the target never holds it):
#     the list is exactly the set of files whose fsync returned; beside it, buffered writes
#     to round<N>/bulk that are never fsync'ed (dirty expiry 1 s), so the daemon's cache
#     holds dirty blocks and ext4 has allocations in flight when the kill comes;
#   - a random delay after the round's first acknowledged file numatgtd is SIGKILLed; the
#     session (now failing) is logged out, so nothing the guest still had in flight can
#     reach the next daemon, and the stale mount is detached. (Not a reconnect of the old
#     session: WCE=1 lets a crash lose acknowledged writes that no flush covered, and a
#     kernel that kept its mount across the restart would go on as if they had landed; the
#     guarantee under test is the one a power cut gives: flushed data survives, the
#     journal makes the rest consistent);
#   - numatgtd is started again on the same backing file and configured the same way, a new
#     login, mount (ext4 replays its journal: expected after a crash), every listed file of
#     every round so far must be there with its checksum, umount, and `e2fsck -fn` must find
#     nothing (exit 0): journal replay is allowed, corruption is not;
#   - the next round writes on the same filesystem.
# Env: NUMATGTD        path of the numatgtd binary as the guest sees it
#      CRASH_ROUNDS    kills (4)
#      CRASH_DELAYS    kill delays in ms after the round's first acknowledged file, one per
#                      round (default: random, 100-3000 ms)
# Prints VM_CRASH_OK rounds=N files=M lost=0 on success, VM_CRASH_FAIL: <why> otherwise.
set -u
IQN=iqn.2026-11.org.numatgt:vmcrash
PORTAL=127.0.0.1:3260
LUN_FILE=/tmp/vm-crash-lun.img
LUN_MB=192
LOG=/tmp/numatgtd.log
MNT=/tmp/mnt-crash
STAGE=/tmp/crash-stage
ACKED=/tmp/crash-acked.list
ROUNDS=${CRASH_ROUNDS:-4}
TPID=
WPID=
BPID=
DEV=
TC=$((2000 + $$ % 20000))
C="-C $TC"

. /vmtest/guest-lib.sh
fail() {
  echo "VM_CRASH_FAIL: $*"
  dump_log "$LOG" "numatgtd-crash.log"
  for p in $WPID $BPID; do kill -9 "$p" 2>/dev/null; done
  umount -l "$MNT" 2>/dev/null
  timeout 30 iscsiadm -m node -T "$IQN" -p "$PORTAL" --logout >/dev/null 2>&1
  [ -n "$TPID" ] && kill -9 "$TPID" 2>/dev/null
  exit 1
}
# a random number in [LO, HI]
rand() { echo $(( $1 + $(od -An -N4 -tu4 /dev/urandom) % ($2 - $1 + 1) )); }

# numatgtd as tgtd is started, and the tgtadm commands of a tgtd setup
start_target() {
  "$NUMATGTD" -f $C --iscsi portal=$PORTAL --state-dir /tmp/numatgt-state >> "$LOG" 2>&1 &
  TPID=$!
  wait_listen "$TPID" "$PORTAL"
  tgtadm $C --lld iscsi --op new --mode target --tid 1 -T "$IQN" || fail "tgtadm target"
  tgtadm $C --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$LUN_FILE" || fail "tgtadm lun"
  tgtadm $C --lld iscsi --op bind --mode target --tid 1 -I ALL || fail "tgtadm bind"
  step "numatgtd pid $TPID serves $LUN_FILE"
}

# log in and set DEV to the session's disk
login() {
  timeout 60 iscsiadm -m node -T "$IQN" -p "$PORTAL" --login || fail "login"
  session_disk
  cache=$(cat /sys/block/"$DEV"/device/scsi_disk/*/cache_type 2>/dev/null)
  step "disk /dev/$DEV, cache_type '$cache'"
  [ "$cache" = "write back" ] || fail "the LUN's write cache is '$cache', want 'write back' (WCE=1)"
}

# the writer: files of 1 KiB - 320 KiB (odd sizes too) until stopped, at most 5000 or 90 s
writer() { # ROUND
  dir=$MNT/round$1
  mkdir -p "$dir" && sync "$dir" "$MNT" || { echo "writer: mkdir $dir failed"; return 1; }
  n=0
  end=$(( $(cut -d. -f1 /proc/uptime) + 90 ))
  while [ $n -lt 5000 ] && [ "$(cut -d. -f1 /proc/uptime)" -lt $end ]; do
    n=$((n + 1))
    size=$(rand 1024 327680)
    head -c "$size" /dev/urandom > "$STAGE/data" || return 1
    sum=$(sha256sum < "$STAGE/data" | cut -d' ' -f1)
    dd if="$STAGE/data" of="$dir/f$n" bs=64k conv=fsync status=none 2>/dev/null || break
    sync "$dir" 2>/dev/null || break
    # only now is the file durable: record it in the guest's RAM
    echo "round$1/f$n $sum" >> "$ACKED"
  done
  echo "writer round $1: stopped after $n files"
}

# beside it, buffered writes that are never fsync'ed (the flusher sends them within a
# second): dirty blocks in numatgtd's cache and ext4 allocations in flight at the kill
bulk() { # ROUND
  n=0
  while [ $n -lt 64 ]; do
    n=$((n + 1))
    dd if=/dev/urandom of="$MNT/round$1/bulk" bs=256k count=1 seek=$((n - 1)) conv=notrunc \
      status=none 2>/dev/null || break
    sleep 0.1
  done
}

[ -n "${NUMATGTD:-}" ] && [ -x "$NUMATGTD" ] || fail "numatgtd binary not visible in the guest: '${NUMATGTD:-}'"
for t in mkfs.ext4 e2fsck iscsiadm iscsid tgtadm sha256sum; do
  command -v $t >/dev/null || fail "$t missing in the guest (the host's userspace)"
done
step "$(nproc) CPUs, kernel $(uname -r), $ROUNDS rounds"
mkdir -p /tmp/numatgt-state "$STAGE" "$MNT"
# write dirty pages back within a second, so unsynced data reaches the target during a round
echo 100 > /proc/sys/vm/dirty_expire_centisecs
echo 50 > /proc/sys/vm/dirty_writeback_centisecs
: > "$ACKED"
truncate -s "${LUN_MB}M" "$LUN_FILE" || fail "create LUN file"
start_target
iscsid || fail "iscsid"
sleep 1
timeout 60 iscsiadm -m discovery -t sendtargets -p "$PORTAL" >/dev/null || fail "discovery"
login
timeout 120 mkfs.ext4 -q -F "/dev/$DEV" || fail "mkfs.ext4"
mount "/dev/$DEV" "$MNT" || fail "mount"

r=0
total_files=0
while [ $r -lt "$ROUNDS" ]; do
  r=$((r + 1))
  # shellcheck disable=SC2086
  delay=$(echo ${CRASH_DELAYS:-} | awk -v r=$r '{ print $r }')
  [ -n "$delay" ] || delay=$(rand 100 3000)
  before=$(wc -l < "$ACKED")
  writer $r &
  WPID=$!
  bulk $r &
  BPID=$!
  # the delay runs from the round's first acknowledged file
  i=0
  until [ "$(wc -l < "$ACKED")" -gt "$before" ]; do
    i=$((i + 1))
    [ $i -le 300 ] || fail "round $r: no file acknowledged after 30 s"
    kill -0 "$WPID" 2>/dev/null || fail "round $r: the writer ended without acknowledging a file"
    sleep 0.1
  done
  step "round $r: writer pid $WPID, first file acknowledged, SIGKILL numatgtd in ${delay} ms"
  sleep "$(awk -v d="$delay" 'BEGIN { printf "%.3f", d / 1000 }')"
  kill -0 "$WPID" 2>/dev/null || fail "round $r: the writer ended before the kill"
  kill -9 "$TPID"
  wait "$TPID" 2>/dev/null
  TPID=
  at_kill=$(wc -l < "$ACKED")
  step "round $r: numatgtd killed; $((at_kill - before)) files of this round acknowledged"
  # the daemon is gone: end the session so that nothing still queued in the guest reaches
  # the next one (it fails with an I/O error here instead, like a write lost in a crash)
  timeout 60 iscsiadm -m node -T "$IQN" -p "$PORTAL" --logout >/dev/null 2>&1 \
    || fail "round $r: logout of the failed session"
  i=0
  while kill -0 "$WPID" 2>/dev/null; do
    i=$((i + 1))
    [ $i -le 150 ] || fail "round $r: the writer is still running 30 s after the logout"
    sleep 0.2
  done
  wait "$WPID"
  WPID=
  kill "$BPID" 2>/dev/null
  wait "$BPID" 2>/dev/null
  umount -l "$MNT" 2>/dev/null || fail "round $r: detach the stale mount"

  start_target
  login
  # mounting replays the journal of the crashed filesystem
  mount "/dev/$DEV" "$MNT" || fail "round $r: mount after the crash"
  # every file acknowledged in any round so far
  check_acked_and_fsck "/dev/$DEV" "round $r: "
  total_files=$FILES
  mount "/dev/$DEV" "$MNT" || fail "round $r: remount"
done

umount "$MNT" || fail "final umount"
timeout 60 iscsiadm -m node -T "$IQN" -p "$PORTAL" --logout >/dev/null || fail "final logout"
stop_pid "$TPID" 20
TPID=
[ "$TRC" = 0 ] || fail "numatgtd exited with status $TRC after SIGTERM"
echo "VM_CRASH_OK rounds=$ROUNDS files=$total_files lost=0"
