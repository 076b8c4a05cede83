# Guest step of the kernel-initiator test (sourced by guest-iscsi-tcp.sh): a tape drive.
# A blank tape made here with Debian's tgtimg (64 MiB, barcode VMT00001) is exported as a
# tape drive: tgtadm `--device-type tape` (target tid 4), or `device_type: tape` in the
# YAML variant. Over the kernel's iscsi_tcp the st driver attaches it (SCSI type 1,
# /dev/nstN); `mt` (mt-st) reads its status; tar writes two directories of random files to
# the non-rewinding device as two tape files; `mt rewind`, `mt fsf 1` and tar read the
# second file back, `mt bsf`/`mt rewind` the first: both byte-exact. `mt tell` (READ
# POSITION) follows the blocks (numatgtd; tgtd 1.0.85 answers READ POSITION with zeros),
# `mt eod` goes to the end of data (file 2; after tgtd's, st knows no file number),
# `mt offline` unloads (the drive then reports no tape) and `mt load` loads it again
# (numatgtd; tgtd 1.0.85 keeps the tape loaded). With numatgtd started as tgtd, a live
# upgrade (`numatgtadm --upgrade`) between the two tar writes: `mt tell` the same after
# it, and both files still read back byte-exact. Logout.
# Uses from guest-iscsi-tcp.sh: TARGET, PORTAL, C, fail, step; TAPE_IQN and TAPE_FILE are
# set there (the YAML variant configures them before the target starts).

TAPE_SRC=/tmp/vm-tape-src
TAPE_OUT=/tmp/vm-tape-out

tape_dev() { # the st device of the tape target's session
  local s t
  for s in /sys/class/iscsi_session/session*; do
    grep -qx "$TAPE_IQN" "$s/targetname" 2>/dev/null || continue
    for t in "$s"/device/target*/*/scsi_tape/st*; do
      [ -e "$t" ] || continue
      case "$(basename "$t")" in st[0-9] | st[0-9][0-9]) basename "$t" ;; esac
    done
  done | head -n 1
}

step "tape: a tgtimg tape exported as a tape drive ($TAPE_IQN)"
if [ "$TARGET" != numatgtd-yaml ]; then
  tgtadm $C --lld iscsi --op new --mode target --tid 4 -T "$TAPE_IQN" || fail "tgtadm tape target"
  tgtadm $C --lld iscsi --op new --mode logicalunit --tid 4 --lun 1 -b "$TAPE_FILE" --device-type tape ||
    fail "tgtadm --device-type tape"
  tgtadm $C --lld iscsi --op bind --mode target --tid 4 -I ALL || fail "tgtadm tape bind"
fi
tgtadm $C --lld iscsi --op show --mode target | grep -A3 'LUN: 1' | grep -m1 'Type: tape' ||
  fail "tgtadm show: no tape LUN"
modprobe st 2> /dev/null
timeout 60 iscsiadm -m discovery -t sendtargets -p "$PORTAL" > /dev/null || fail "tape: discovery"
timeout 60 iscsiadm -m node -T "$TAPE_IQN" -p "$PORTAL" --login || fail "tape: login"
ST=
i=0
while [ $i -lt 100 ]; do
  ST=$(tape_dev)
  [ -n "$ST" ] && [ -c "/dev/n$ST" ] && break
  i=$((i + 1)); sleep 0.2
done
[ -n "$ST" ] && [ -c "/dev/n$ST" ] || fail "tape: no st device for the session"
NST=/dev/n$ST
type=$(cat "/sys/class/scsi_tape/$ST/device/type")
step "tape: $NST, SCSI type $type"
[ "$type" = 1 ] || fail "tape: SCSI type $type, want 1"
# the first command after login may meet the unit attention of the new nexus
mt -f "$NST" status > /dev/null 2>&1
status=$(mt -f "$NST" status 2>&1) || fail "tape: mt status: $status"
echo "$status"
echo "$status" | grep -q 'BOT' || fail "tape: mt status does not say BOT"
mkdir -p "$TAPE_SRC/one/sub" "$TAPE_SRC/two" "$TAPE_OUT/one" "$TAPE_OUT/two"
head -c 1500000 /dev/urandom > "$TAPE_SRC/one/a.bin"
head -c 70001 /dev/urandom > "$TAPE_SRC/one/sub/b.bin"
head -c 3000000 /dev/urandom > "$TAPE_SRC/two/c.bin"
echo numatgt > "$TAPE_SRC/two/d.txt"
(cd "$TAPE_SRC" && find . -type f | sort | xargs sha256sum) > /tmp/tape-src.sha || fail "tape: source sums"
mt -f "$NST" rewind || fail "tape: mt rewind"
# two tape files: st writes a filemark when the non-rewinding device is closed after a write
tar -cf "$NST" -C "$TAPE_SRC/one" . || fail "tape: tar write of the first file"
if [ "$TARGET" = numatgtd ]; then
  # a live upgrade between the two tape files (issue 29): the session moves to the new
  # executable, and the drive goes on with the same tape at the same position
  ADM=$(dirname "$NUMATGTD")/numatgtadm
  [ -x "$ADM" ] || fail "tape: no numatgtadm beside numatgtd ($ADM)"
  before=$(mt -f "$NST" tell 2>&1)
  resets=$(dmesg | grep -c 'Power-on or device reset' || true)
  out=$(timeout 120 "$ADM" $C --upgrade 2>&1) || fail "tape: numatgtadm --upgrade: $out"
  echo "$out" | grep -q 'upgraded: numatgtd pid' || fail "tape: numatgtadm --upgrade: $out"
  after=$(mt -f "$NST" tell 2>&1)
  [ "$after" = "$before" ] || fail "tape: the position moved across the upgrade: $before, then $after"
  resets2=$(dmesg | grep -c 'Power-on or device reset' || true)
  [ "$resets2" = "$resets" ] || fail "tape: the kernel saw a power-on unit attention across the upgrade"
  step "tape: live upgrade between the two tape files, still $after ($(echo "$out" | grep -o '[0-9]* connections moved'))"
fi
tar -cf "$NST" -C "$TAPE_SRC/two" . || fail "tape: tar write of the second file"
if [ "$TARGET" != tgtd ]; then
  at=$(mt -f "$NST" tell 2>&1)
  step "tape: after two files, $at"
  echo "$at" | grep -Eq 'At block [1-9][0-9]*' || fail "tape: mt tell: $at"
fi
mt -f "$NST" rewind || fail "tape: mt rewind"
mt -f "$NST" fsf 1 || fail "tape: mt fsf 1"
file_no=$(mt -f "$NST" status | sed -n 's/.*File number=\([0-9-]*\).*/\1/p')
[ "$file_no" = 1 ] || fail "tape: after fsf 1, file number $file_no"
tar -xf "$NST" -C "$TAPE_OUT/two" || fail "tape: tar read of the second file"
mt -f "$NST" rewind || fail "tape: mt rewind"
tar -xf "$NST" -C "$TAPE_OUT/one" || fail "tape: tar read of the first file"
(cd "$TAPE_OUT" && sha256sum -c --quiet /tmp/tape-src.sha) || fail "tape: a file read back differs"
step "tape: $(wc -l < /tmp/tape-src.sha) files in two tape files read back byte-exact (fsf, rewind)"
mt -f "$NST" eod || fail "tape: mt eod"
eod_file=$(mt -f "$NST" status | sed -n 's/.*File number=\([0-9-]*\).*/\1/p')
step "tape: mt eod: file number $eod_file"
# tgtd 1.0.85: st finds no file number at the end of data (8388607)
[ "$eod_file" = 2 ] || [ "$TARGET" = tgtd ] || fail "tape: end of data after file $eod_file, want 2"
if [ "$TARGET" = tgtd ]; then
  # tgtd 1.0.85 answers LOAD UNLOAD with GOOD and keeps the tape loaded
  step "tape: mt offline/load not tried (tgtd does not unload)"
else
  mt -f "$NST" offline || fail "tape: mt offline"
  off=$(mt -f "$NST" status 2>&1)
  echo "$off" | grep -q 'DR_OPEN' || fail "tape: after mt offline the drive still has a tape: $off"
  mt -f "$NST" load || fail "tape: mt load"
  on=$(mt -f "$NST" status 2>&1)
  echo "$on" | grep -q 'BOT' || fail "tape: after mt load no tape at BOT: $on"
  tar -tf "$NST" > /dev/null || fail "tape: tar list after load"
  step "tape: mt offline (no tape), mt load (at BOT), tar reads again"
fi
timeout 60 iscsiadm -m node -T "$TAPE_IQN" -p "$PORTAL" --logout || fail "tape: logout"
