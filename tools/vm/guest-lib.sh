# Helpers shared by the guest scripts (sourced, not run: vm-run.sh ships this file as
# /vmtest/guest-lib.sh beside the script). Callers define fail MESSAGE, which prints their
# failure marker, cleans up and exits.

step() { echo "== $(cut -d' ' -f1 /proc/uptime)s: $*"; }

# dump_log LOG NAME: the last 80 lines of the daemon's LOG and the kernel's last 40, after a
# failure; LOG is kept on the host as NAME when vm-run.sh was given VM_OUT
dump_log() {
  echo "---- $2 (last 80 lines) ----"
  tail -n 80 "$1" 2>/dev/null
  echo "---- dmesg (last 40) ----"
  dmesg | tail -n 40
  if [ -d /vmtest/out ]; then cp "$1" "/vmtest/out/$2" 2>/dev/null; fi
}

# wait_listen PID ADDR:PORT: until a TCP socket listens on ADDR:PORT (20 s at most); fails
# when process PID exits first or time runs out
wait_listen() {
  i=0
  until ss -ltn | grep -q "$2 "; do
    i=$((i + 1))
    [ $i -le 100 ] || fail "nothing listens on $2 after 20 s"
    kill -0 "$1" 2>/dev/null || fail "pid $1 exited before listening on $2"
    sleep 0.2
  done
}

# session_disk: sets DEV to the block device of the iSCSI session (waits 20 s at most for
# it to appear); fails when none does
session_disk() {
  DEV=
  i=0
  while [ $i -lt 100 ]; do
    DEV=$(ls /sys/class/iscsi_session/session*/device/target*/*/block 2>/dev/null | head -n 1)
    [ -n "$DEV" ] && [ -b "/dev/$DEV" ] && return 0
    i=$((i + 1)); sleep 0.2
  done
  fail "no block device appeared for the iSCSI session"
}

# stop_pid PID SECONDS: SIGTERM, then wait at most SECONDS for the exit; sets TRC to the exit
# status; fails when PID is still running then
stop_pid() {
  kill -TERM "$1" 2>/dev/null
  i=0
  while kill -0 "$1" 2>/dev/null; do
    i=$((i + 1))
    [ $i -le $(($2 * 5)) ] || fail "pid $1 still running $2 s after SIGTERM"
    sleep 0.2
  done
  wait "$1"
  TRC=$?
}

# Every file whose fsync returned, as listed in $ACKED ("NAME SHA256 [more]" per line),
# compared with its copy under $MNT (a lost or changed one is listed); then $MNT unmounted
# and `e2fsck -fn DEVICE` required clean. Sets FILES (checked). CONTEXT starts the messages.
check_acked_and_fsck() { # DEVICE CONTEXT
  set -- "$1" "$2" $(
    files=0 lost=0
    while read -r name sum _; do
      files=$((files + 1))
      got=$(sha256sum < "$MNT/$name" 2>/dev/null | cut -d' ' -f1)
      if [ "$got" != "$sum" ]; then
        lost=$((lost + 1))
        echo "LOST: $name (want $sum, got ${got:-nothing})" >&2
      fi
    done < "$ACKED"
    echo "$files $lost"
  )
  FILES=$3
  step "$2$3 acknowledged files checked, $4 lost or changed"
  [ "$4" = 0 ] || fail "$2$4 of $3 acknowledged files lost or changed"
  umount "$MNT" || fail "${2}umount"
  out=$(e2fsck -fn "$1" 2>&1)
  rc=$?
  echo "$out" | tail -n 3
  [ "$rc" = 0 ] || { echo "$out"; fail "${2}e2fsck -fn exit $rc"; }
  step "${2}e2fsck -fn clean"
}
