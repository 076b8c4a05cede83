#!/bin/sh
# Guest side of the live-upgrade test (issue 29; runs as root inside the QEMU guest, see
# vm-run.sh). The kernel initiator and ext4 of the guest kernel against numatgtd started as
# tgtd is (default settings, LUN from tgtadm), upgraded while fio writes and verifies:
#   - numatgtd (build A) serves a file LUN on the guest's RAM; open-iscsi logs in,
#     mkfs.ext4, mount;
#   - fio on a file of the filesystem: random 4 KiB writes at QD8 (libaio, O_DIRECT) with
#     crc32c verification read back as it goes (verify_backlog) and at the end, every
#     mismatch fatal;
#   - meanwhile `numatgtadm --upgrade --binary B`, then A, then B again (two different
#     builds), 6 s apart: each answers `upgraded: numatgtd pid N`, the same PID, whose
#     /proc/N/exe is now the other build;
#   - fio must end with status 0 and no error; its largest completion latency is the
#     longest I/O stall; the kernel's iSCSI session id must be the one it had before, and
#     the session never logged in again: each upgrade moved its TCP connection ("1
#     connections moved, 0 asked to log out"), numatgtd logged one login to the target
#     and one "session moved" per upgrade, and the kernel logged no connection error and
#     no unit attention (the logical unit went on with its state);
#   - with shmem_enabled set to `advise` in the guest (numatgtd's `cache.memory: auto`
#     then uses memory files), at least one upgrade kept cached blocks in the memory it
#     passed on (`memory_kept_blocks=` lists each upgrade's count);
#     umount and `e2fsck -fn` clean.
# Env: NUMATGTD NUMATGTD_B  the two builds (paths as the guest sees them); numatgtadm is
#      found beside NUMATGTD
#      UPGRADES (3)  FIO_SECS (40)  SHMEM_ADVISE (1; 0 leaves shmem_enabled as the
#      kernel has it, so the cache's memory is private and read back at each upgrade)
# Prints VM_UPGRADE_OK upgrades=N ... on success, VM_UPGRADE_FAIL: <why> otherwise.
set -u
IQN=iqn.2026-11.org.numatgt:vmupgrade
PORTAL=127.0.0.1:3260
LUN_FILE=/tmp/vm-upgrade-lun.img
LOG=/tmp/numatgtd.log
MNT=/tmp/mnt-upgrade
OUT=/tmp/fio-upgrade.json
UPGRADES=${UPGRADES:-3}
FIO_SECS=${FIO_SECS:-40}
TPID=
FPID=
DEV=
TC=$((2000 + $$ % 20000))
C="-C $TC"
ADM=$(dirname "${NUMATGTD:-/x}")/numatgtadm

. /vmtest/guest-lib.sh
fail() {
  echo "VM_UPGRADE_FAIL: $*"
  dump_log "$LOG" "numatgtd-upgrade.log"
  [ -n "$FPID" ] && kill -9 "$FPID" 2>/dev/null
  umount -l "$MNT" 2>/dev/null
  timeout 30 iscsiadm -m node -T "$IQN" -p "$PORTAL" --logout >/dev/null 2>&1
  [ -n "$TPID" ] && kill -9 "$TPID" 2>/dev/null
  exit 1
}
alive() { [ -d "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }

for b in "${NUMATGTD:-}" "${NUMATGTD_B:-}" "$ADM"; do
  [ -n "$b" ] && [ -x "$b" ] || fail "binary not visible in the guest: '$b'"
done
cmp -s "$NUMATGTD" "$NUMATGTD_B" && fail "NUMATGTD and NUMATGTD_B are the same build"
for t in mkfs.ext4 e2fsck iscsiadm iscsid tgtadm fio python3; do
  command -v $t >/dev/null || fail "$t missing in the guest (the host's userspace)"
done
step "$(nproc) CPUs, kernel $(uname -r), $UPGRADES upgrades under fio for ${FIO_SECS}s"
mkdir -p /tmp/numatgt-state "$MNT"
truncate -s 256M "$LUN_FILE" || fail "create LUN file"
# shared memory with huge pages on request: numatgtd's default `cache.memory: auto` then
# puts the cache in memory files, and each upgrade hands them on (blocks kept, not read)
SHMEM=/sys/kernel/mm/transparent_hugepage/shmem_enabled
SHARED=0
if [ "${SHMEM_ADVISE:-1}" = 1 ] && [ -w "$SHMEM" ] && echo advise > "$SHMEM" 2>/dev/null; then
  SHARED=1
fi
step "shmem_enabled: $(cat "$SHMEM" 2>/dev/null || echo absent)"
KEPT=
"$NUMATGTD" -f $C --iscsi portal=$PORTAL --state-dir /tmp/numatgt-state >> "$LOG" 2>&1 &
TPID=$!
wait_listen "$TPID" "$PORTAL"
tgtadm $C --lld iscsi --op new --mode target --tid 1 -T "$IQN" || fail "tgtadm target"
tgtadm $C --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$LUN_FILE" || fail "tgtadm lun"
tgtadm $C --lld iscsi --op bind --mode target --tid 1 -I ALL || fail "tgtadm bind"
iscsid || fail "iscsid"
sleep 1
timeout 60 iscsiadm -m discovery -t sendtargets -p "$PORTAL" >/dev/null || fail "discovery"
timeout 60 iscsiadm -m node -T "$IQN" -p "$PORTAL" --login >/dev/null || fail "login"
session_disk
SID=$(iscsiadm -m session | sed -n 's/^tcp: \[\([0-9]*\)\].*/\1/p' | head -n 1)
step "numatgtd pid $TPID, session $SID, disk /dev/$DEV"
timeout 120 mkfs.ext4 -q -F "/dev/$DEV" || fail "mkfs.ext4"
mount "/dev/$DEV" "$MNT" || fail "mount"
dmesg -c > /dev/null

fio --name=upgrade --directory="$MNT" --size=96M --rw=randwrite --bs=4k --iodepth=8 \
  --ioengine=libaio --direct=1 --verify=crc32c --verify_backlog=512 --verify_fatal=1 \
  --do_verify=1 --time_based --runtime="$FIO_SECS" --output-format=json --output="$OUT" \
  > /tmp/fio-upgrade.err 2>&1 &
FPID=$!
sleep 6
i=0
while [ $i -lt "$UPGRADES" ]; do
  i=$((i + 1))
  if [ $((i % 2)) = 1 ]; then bin=$NUMATGTD_B; else bin=$NUMATGTD; fi
  kill -0 "$FPID" 2>/dev/null || fail "fio ended before upgrade $i: $(tail -n 3 /tmp/fio-upgrade.err)"
  out=$(timeout 120 "$ADM" $C --upgrade --binary "$bin" 2>&1) || fail "upgrade $i: $out"
  step "upgrade $i ($bin): $out"
  case "$out" in
    *"1 connections moved, 0 asked to log out"*) ;;
    *) fail "upgrade $i did not move the session's connection: $out" ;;
  esac
  k=$(echo "$out" | sed -n 's/.*cached blocks kept (\([0-9]*\) in the memory passed on).*/\1/p')
  KEPT="$KEPT${KEPT:+,}${k:-?}"
  # the same process (the PID stays), now running the other build
  pid=$(echo "$out" | sed -n 's/^upgraded: numatgtd pid \([0-9]*\) .*/\1/p')
  [ "$pid" = "$TPID" ] && alive "$TPID" || fail "upgrade $i: pid '$pid', want $TPID"
  exe=$(readlink "/proc/$TPID/exe")
  [ "$exe" = "$(readlink -f "$bin")" ] || fail "upgrade $i: the process runs '$exe', want $bin"
  sleep 6
done
wait "$FPID"
frc=$?
FPID=
[ "$frc" = 0 ] || fail "fio exited $frc: $(tail -n 5 /tmp/fio-upgrade.err)"
res=$(python3 - "$OUT" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
w, r = j["write"], j["read"]
mx = max(w["clat_ns"]["max"], r["clat_ns"]["max"]) / 1e6
print(f"errors={j['error']} writes={w['total_ios']} verified_reads={r['total_ios']} "
      f"max_latency_ms={mx:.0f} write_iops={w['iops']:.0f}")
PY
) || fail "cannot read fio's output: $(head -c 300 "$OUT")"
step "fio: $res"
case "$res" in errors=0\ *) ;; *) fail "fio reported errors: $res" ;; esac
SID2=$(iscsiadm -m session | sed -n 's/^tcp: \[\([0-9]*\)\].*/\1/p' | head -n 1)
[ "$SID2" = "$SID" ] || fail "the kernel's session changed: $SID -> $SID2"
connerr=$(dmesg | grep -c 'detected conn error' || true)
ioerr=$(dmesg | grep -c -i 'I/O error\|blk_update_request\|Buffer I/O' || true)
dmesg | grep -i 'iscsi\|connection\|sd ' | tail -n 12 | sed 's/^/  dmesg: /'
[ "$ioerr" = 0 ] || fail "$ioerr I/O errors in the kernel log"
umount "$MNT" || fail "umount"
e2fsck -fn "/dev/$DEV" > /tmp/e2fsck.out 2>&1 || fail "e2fsck -fn: $(tail -n 5 /tmp/e2fsck.out)"
timeout 60 iscsiadm -m node -T "$IQN" -p "$PORTAL" --logout >/dev/null || fail "final logout"
stop_pid "$TPID" 20
TPID=
[ "$TRC" = 0 ] || fail "numatgtd exited with status $TRC after SIGTERM"
[ "$(grep -c 'upgraded: numatgtd pid' "$LOG")" = "$UPGRADES" ] ||
  fail "$(grep -c 'upgraded: numatgtd pid' "$LOG") handovers logged, want $UPGRADES"
[ "$connerr" = 0 ] || fail "$connerr 'detected conn error' lines in the kernel log"
logins=$(grep 'login complete' "$LOG" | grep -c "$IQN" || true)
moves=$(grep -c 'session moved from the previous numatgtd' "$LOG" || true)
[ "$logins" = 1 ] || fail "$logins logins to $IQN in numatgtd's log, want 1 (no relogin)"
[ "$moves" = "$UPGRADES" ] || fail "$moves sessions moved in numatgtd's log, want $UPGRADES"
# with the cache in memory files, the whole blocks (those read back after the first
# upgrade, at least) go on in the same memory at the later upgrades
if [ "$SHARED" = 1 ]; then
  case ",$KEPT" in
    *,[1-9]*) ;;
    *) fail "no upgrade kept cached blocks in the memory passed on (kept: $KEPT)" ;;
  esac
fi
# the logical unit went on with its state: the kernel saw no unit attention
poweron=$(dmesg | grep -c 'Power-on or device reset' || true)
[ "$poweron" = 0 ] || fail "$poweron power-on unit attentions in the kernel log"
# the daemon's log goes to the host when vm-run.sh was given VM_OUT (timings of each step)
if [ -d /vmtest/out ]; then cp "$LOG" /vmtest/out/numatgtd-upgrade.log 2>/dev/null || true; fi
echo "VM_UPGRADE_OK upgrades=$UPGRADES session=$SID logins=$logins moved=$moves $res kernel_conn_errors=$connerr power_on_unit_attentions=$poweron memory_kept_blocks=$KEPT"
