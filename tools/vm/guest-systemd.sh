#!/bin/sh
# Guest side of the systemd test (tools/vm/test-vm-systemd.sh): runs inside a Debian 12
# guest booted with systemd as PID 1, started by numatgt-vmtest.service (baked into the
# image by tools/vm/systemd/build-rootfs.sh) from the host's 9p share /vmtest, its output
# on the serial console. Two boots of the same disk; the phase is kept on the disk
# (/var/lib/numatgt-vmtest/state):
#
# boot 1  Debian's tgt is installed and tgt.service enabled (as its package leaves it):
#         tgtd alone on port 3260. `apt-get install ./numatgt_*.deb` (no network: the
#         dependencies are in the image) leaves numatgtd.service disabled and stopped, and
#         tgtd alone on 3260. Switch as the README says (disable --now tgt, enable --now
#         numatgtd): active, Type=notify READY (StatusText), numatgtd alone on 3260. A
#         drop-in adds --save-config. `systemd-analyze security` <= 2.5; /proc/PID/status:
#         the user numatgt, exactly CAP_NET_BIND_SERVICE and CAP_IPC_LOCK. A target with
#         Debian's tgtadm, another with tgt-admin -e; the kernel initiator (iscsid,
#         open-iscsi) logs in to both over 127.0.0.1: ext4 on one, raw blocks on the
#         other, written and verified. `systemctl reload` with a changed good
#         numatgt.yaml (a target added) succeeds; with a bad one the job fails and nothing
#         changes. The journal holds the daemon's lines with their priorities.
#         `numatgtadm --upgrade`: the new executable runs in the unit's MainPID, no
#         restart, the same capabilities, the sessions read the same data. Then
#         `systemctl reboot`, the iSCSI sessions still logged in.
# boot 2  numatgtd is back with the saved configuration (every target), open-iscsi logged
#         in again at boot (node.startup=automatic) and the data reads back. `apt-get
#         remove numatgt` stops the service. numatgt installed again; then Debian's tgt
#         installed after it: with tgt.service masked first numatgtd keeps 3260; without,
#         tgt.service takes it and the units' conflict stops numatgtd; then `systemctl
#         start numatgtd` takes it back. Each time one daemon on 3260, and the conflict
#         stops one unit before the other starts (neither fails on the other's socket
#         lock, neither is restarted).
#
# Each check prints `CHECK PASS: ...` or `CHECK FAIL: ...`; a failure that leaves nothing
# to test prints `CHECK FAIL (fatal)`. The exit status (/vmtest/rc) is the number of
# failed checks. Boot 1 ends with VM_SYSTEMD_PHASE1_DONE, boot 2 with VM_SYSTEMD_OK (or
# VM_SYSTEMD_FAIL); the guest then powers off.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 SYSTEMD_COLORS=0 SYSTEMD_PAGER=cat
SHARE=/vmtest
STATE_DIR=/var/lib/numatgt-vmtest
STATE=$STATE_DIR/state
WORK=/var/local/numatgt-vm
PORTAL=127.0.0.1:3260
IQN_ADM=iqn.2026-11.org.numatgt:systemd-tgtadm
IQN_ADMIN=iqn.2026-11.org.numatgt:systemd-tgt-admin
IQN_YAML=iqn.2026-11.org.numatgt:systemd-yaml
IQN_BAD=iqn.2026-11.org.numatgt:systemd-refused
LUN1=/var/lib/numatgt/vmtest-lun1.img
LUN2=/var/lib/numatgt/vmtest-lun2.img
LUN3=/var/lib/numatgt/vmtest-lun3.img
CONF=/etc/numatgt/numatgt.yaml
SAVED=/var/lib/numatgt/saved-config.yaml
MNT=/mnt/vmtest

. "$SHARE/guest-lib.sh"

FAILS=0
PHASE=1
[ -f "$STATE" ] && . "$STATE"

pass() { echo "CHECK PASS: $*"; }
bad() { echo "CHECK FAIL: $*"; FAILS=$((FAILS + 1)); }

diagnostics() {
  echo "---- systemctl status numatgtd ----"
  timeout 20 systemctl status numatgtd --no-pager -l 2>&1 | head -n 30
  echo "---- journalctl -u numatgtd (last 60) ----"
  journalctl -u numatgtd -n 60 --no-pager 2>&1
  echo "---- journalctl -b -p warning (last 30) ----"
  journalctl -b -p warning -n 30 --no-pager 2>&1
  echo "---- dmesg (last 20) ----"
  dmesg | tail -n 20
}

# finish RC: the result on the share and the console, then power off
finish() {
  # sessions to a target that stops before them would hold the shutdown for minutes
  timeout 30 iscsiadm -m node --logoutall=all > /dev/null 2>&1
  echo "$1" > "$SHARE/rc"
  journalctl -u numatgtd -u tgt -u open-iscsi -u iscsid --no-pager -o short-monotonic \
    > "$SHARE/journal-boot$PHASE.txt" 2>&1
  sync
  if [ "$1" = 0 ]; then
    echo "VM_SYSTEMD_OK"
  else
    echo "VM_SYSTEMD_FAIL failures=$1"
  fi
  systemctl --no-block poweroff
  exit "$1"
}

fail() {
  echo "CHECK FAIL (fatal): $*"
  FAILS=$((FAILS + 1))
  diagnostics
  finish "$FAILS"
}

# the names of the processes listening on TCP port 3260, sorted, space separated
listeners() {
  ss -ltnpH 'sport = :3260' | grep -o 'users:(("[^"]*"' | sed 's/users:(("//; s/"$//' |
    sort -u | tr '\n' ' ' | sed 's/ $//'
}

# one_daemon NAME WHAT: NAME, and nothing else, listens on 3260 (waits 20 s for it)
one_daemon() {
  i=0
  while [ "$(listeners)" != "$1" ] && [ $i -lt 100 ]; do i=$((i + 1)); sleep 0.2; done
  got=$(listeners)
  ss -ltnpH 'sport = :3260' | sed 's/^/  ss: /'
  if [ "$got" = "$1" ]; then pass "$2: one daemon on 3260: $got"; else bad "$2: on 3260: '$got', want '$1'"; fi
}

# disk_of IQN: the sdX of that target's session (20 s at most)
disk_of() {
  i=0
  while [ $i -lt 100 ]; do
    for s in /sys/class/iscsi_session/session*; do
      [ "$(cat "$s/targetname" 2>/dev/null)" = "$1" ] || continue
      d=$(ls "$s"/device/target*/*/block 2>/dev/null | head -n 1)
      if [ -n "$d" ] && [ -b "/dev/$d" ]; then echo "$d"; return 0; fi
    done
    i=$((i + 1)); sleep 0.2
  done
  return 1
}

# cursor: where the journal ends now
cursor() { journalctl -n 0 --show-cursor -q 2>/dev/null | sed -n 's/^-- cursor: //p'; }

# settle UNIT: wait (30 s at most) until UNIT is neither activating nor deactivating
settle() {
  i=0
  while case "$(systemctl is-active "$1")" in activating|deactivating|reloading) true ;; *) false ;; esac; do
    i=$((i + 1)); [ $i -le 150 ] || break; sleep 0.2
  done
}

# switched WHAT STARTED STOPPED CURSOR: STARTED is active and STOPPED is not, and since
# CURSOR neither unit failed or was restarted (Conflicts= stopped the one before starting
# the other, so neither found the other's socket lock)
switched() {
  trouble=$(journalctl --after-cursor="$4" -u "$2" -u "$3" -o cat --no-pager 2>/dev/null |
    grep -E 'another tgtd is using|Failed with result|Failed to start|Scheduled restart job|Main process exited, code=exited, status=[1-9]')
  journalctl --after-cursor="$4" -u "$2" -u "$3" -o short-monotonic --no-pager 2>/dev/null |
    grep -E 'systemd\[1\]|another tgtd' | sed 's/^/  log: /'
  if [ "$(systemctl is-active "$2")" = active ] && [ "$(systemctl is-active "$3")" != active ] && [ -z "$trouble" ]; then
    pass "$1: $2 active, $3 stopped by the conflict first, no failed start"
  else
    bad "$1: $2 $(systemctl is-active "$2"), $3 $(systemctl is-active "$3"); trouble: $(echo "$trouble" | tr '\n' ';')"
  fi
}

show_targets() { tgtadm --lld iscsi --op show --mode target 2>&1; }

main_pid() { systemctl show -p MainPID --value numatgtd; }

phase1() {
  step "boot 1: kernel $(uname -r), PID 1 $(ps -p 1 -o comm=), $(systemctl --version | head -n 1)"
  [ "$(ps -p 1 -o comm=)" = systemd ] || fail "PID 1 is not systemd"
  echo "  links: $(ip -br link | awk '{print $1}' | tr '\n' ' ')(no network)"
  echo "  system: $(timeout 120 systemctl is-system-running --wait 2>&1)"
  systemctl --failed --no-legend --no-pager | sed 's/^/  failed unit: /'

  # Debian's tgt, as its package left it: enabled, tgtd on 3260
  step "tgt.service: $(systemctl is-enabled tgt.service) $(systemctl is-active tgt.service)"
  one_daemon tgtd "tgt preinstalled and enabled"

  step "apt-get install ./$(basename "$DEB")"
  mkdir -p "$WORK"
  cp "$DEB" "$WORK/" && chmod 0644 "$WORK/$(basename "$DEB")"
  (cd "$WORK" && timeout 300 apt-get install -y "./$(basename "$DEB")") > "$WORK/apt-install.log" 2>&1
  rc=$?
  sed 's/^/  apt: /' "$WORK/apt-install.log" | grep -v -E '^  apt: (Reading|Building|Selecting|Preparing|\(Reading)' | tail -n 25
  [ "$rc" = 0 ] || fail "apt-get install ./numatgt .deb (offline) exit $rc"
  pass "apt-get install ./$(basename "$DEB") offline: exit 0, $(dpkg-query -W -f='${Package} ${Version} ${Status}' numatgt)"
  u=$(id numatgt 2>&1)
  echo "  user: $u; $(stat -c '%U:%G %a %n' /var/lib/numatgt "$CONF" | tr '\n' ' ')"
  [ "$(stat -c '%U:%G %a' "$CONF")" = "root:numatgt 640" ] && id -u numatgt >/dev/null 2>&1 &&
    pass "sysusers user numatgt, $CONF root:numatgt 0640" || bad "user or configuration owner: $u $(stat -c '%U:%G %a' "$CONF")"

  # installed beside an enabled tgt.service: numatgtd left disabled and stopped
  en=$(systemctl is-enabled numatgtd 2>&1); ac=$(systemctl is-active numatgtd 2>&1)
  grep 'numatgt:' "$WORK/apt-install.log" | sed 's/^/  postinst: /'
  if [ "$en" = disabled ] && [ "$ac" = inactive ] && grep -q 'left disabled' "$WORK/apt-install.log"; then
    pass "installed beside an enabled tgt.service: numatgtd.service $en, $ac (postinst said so)"
  else
    bad "beside tgt.service: numatgtd.service is $en/$ac"
  fi
  one_daemon tgtd "numatgt installed second"

  step "switch: systemctl disable --now tgt.service; systemctl enable --now numatgtd"
  timeout 120 systemctl disable --now tgt.service 2>&1 | sed 's/^/  /'
  timeout 120 systemctl enable --now numatgtd 2>&1 | sed 's/^/  /'
  systemctl show -p Type,ActiveState,SubState,StatusText,MainPID,NRestarts numatgtd | sed 's/^/  /'
  prop() { systemctl show -p "$1" --value numatgtd; }
  if [ "$(prop Type)" = notify ] && [ "$(prop ActiveState)" = active ] && [ "$(prop SubState)" = running ]; then
    case "$(prop StatusText)" in
      serving*) pass "systemctl enable --now numatgtd: active/running, Type=notify READY (StatusText=$(prop StatusText))" ;;
      *) bad "numatgtd active but StatusText='$(prop StatusText)'" ;;
    esac
  else
    fail "numatgtd.service not active/running (Type=$(prop Type) $(prop ActiveState)/$(prop SubState))"
  fi
  [ "$(systemctl is-enabled numatgtd)" = enabled ] || bad "numatgtd.service not enabled"
  one_daemon numatgtd "after the switch"

  # saved configuration: --save-config through a drop-in, as the docs say
  step "drop-in: ExecStart with --save-config"
  mkdir -p /etc/systemd/system/numatgtd.service.d
  cat > /etc/systemd/system/numatgtd.service.d/save-config.conf <<'EOF'
[Service]
ExecStart=
ExecStart=/usr/sbin/numatgtd -f --config /etc/numatgt/numatgt.yaml --save-config
EOF
  # the initiator on this host logs in to this host's target at boot: order it after the
  # target (and so stop it first at shutdown, sessions logged out while the target runs)
  mkdir -p /etc/systemd/system/open-iscsi.service.d
  printf '[Unit]\nAfter=numatgtd.service\n' > /etc/systemd/system/open-iscsi.service.d/after-numatgtd.conf
  systemctl daemon-reload
  timeout 120 systemctl restart numatgtd || fail "systemctl restart numatgtd with the drop-in"
  PID=$(main_pid)
  cmd=$(tr '\0' ' ' < "/proc/$PID/cmdline")
  echo "  MainPID $PID: $cmd"
  case "$cmd" in
    *--save-config*) [ -f "$SAVED" ] && pass "drop-in applied: $cmd; $SAVED written at start" ||
      bad "no $SAVED after a start with --save-config" ;;
    *) bad "MainPID runs without --save-config: $cmd" ;;
  esac

  step "systemd-analyze security numatgtd"
  sec=$(timeout 120 systemd-analyze security --no-pager numatgtd.service 2>&1)
  echo "$sec" | tail -n 1 | sed 's/^/  /'
  score=$(echo "$sec" | sed -n 's/.*Overall exposure level for numatgtd.service: \([0-9.]*\).*/\1/p')
  if [ -n "$score" ] && awk -v s="$score" 'BEGIN { exit !(s <= 2.5) }'; then
    pass "systemd-analyze security: exposure $score <= 2.5"
  else
    echo "$sec" | grep -E '^✗' | head -n 40
    bad "systemd-analyze security: exposure '${score:-?}' (want <= 2.5)"
  fi

  step "/proc/$PID/status"
  grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' "/proc/$PID/status" | sed 's/^/  /'
  uid=$(id -u numatgt)
  uids=$(awk '/^Uid:/ { print $2, $3, $4, $5 }' "/proc/$PID/status")
  [ "$uids" = "$uid $uid $uid $uid" ] && pass "MainPID runs as numatgt (uid $uid: $uids)" ||
    bad "MainPID uids '$uids', numatgt is $uid"
  want=0000000000004400 # bits 10 (CAP_NET_BIND_SERVICE) and 14 (CAP_IPC_LOCK)
  capsok=1
  for f in CapPrm CapEff CapAmb CapBnd; do
    v=$(awk -v f="$f:" '$1 == f { print $2 }' "/proc/$PID/status")
    echo "  $f $v = $(capsh --decode="$v" 2>/dev/null | sed 's/^0x[0-9a-f]*=//')"
    [ "$v" = "$want" ] || capsok=0
  done
  [ "$capsok" = 1 ] && pass "CapPrm=CapEff=CapAmb=CapBnd=$want: exactly cap_net_bind_service and cap_ipc_lock" ||
    bad "capabilities are not exactly CAP_NET_BIND_SERVICE + CAP_IPC_LOCK"

  step "Debian's tgtadm and tgt-admin -e"
  for f in "$LUN1:64M" "$LUN2:16M"; do
    truncate -s "${f#*:}" "${f%%:*}" && chown numatgt:numatgt "${f%%:*}" || fail "create ${f%%:*}"
  done
  # tgt-admin -e first: it also deletes every target its configuration does not name (as
  # it does with tgtd), which would take a target made before it with tgtadm
  cat > /etc/tgt/conf.d/numatgt-vmtest.conf <<EOF
<target $IQN_ADMIN>
    backing-store $LUN2
    initiator-address ALL
</target>
EOF
  timeout 60 tgt-admin -e 2>&1 | sed 's/^/  tgt-admin: /'
  tgtadm --lld iscsi --op new --mode target --tid 10 -T "$IQN_ADM" || bad "tgtadm new target"
  tgtadm --lld iscsi --op new --mode logicalunit --tid 10 --lun 1 -b "$LUN1" || bad "tgtadm new logicalunit"
  tgtadm --lld iscsi --op bind --mode target --tid 10 -I ALL || bad "tgtadm bind"
  show=$(show_targets)
  echo "$show" | grep -E '^Target|Backing store path: /|ACL|^        [0-9A-Z]' | sed 's/^/  /'
  if echo "$show" | grep -q "$IQN_ADM" && echo "$show" | grep -q "$IQN_ADMIN" &&
    echo "$show" | grep -q "Backing store path: $LUN1" && echo "$show" | grep -q "Backing store path: $LUN2"; then
    pass "tgtadm made $IQN_ADM, tgt-admin -e made $IQN_ADMIN (file LUNs, ACL ALL)"
  else
    bad "targets from tgtadm/tgt-admin missing in tgtadm --op show"
  fi
  grep -q "$IQN_ADM" "$SAVED" && grep -q "$IQN_ADMIN" "$SAVED" &&
    pass "$SAVED holds both targets" || bad "$SAVED lacks the tgtadm targets"

  step "kernel initiator: discovery, login"
  timeout 60 iscsiadm -m discovery -t sendtargets -p "$PORTAL" 2>&1 | sed 's/^/  /'
  for iqn in "$IQN_ADM" "$IQN_ADMIN"; do
    iscsiadm -m node -T "$iqn" -p "$PORTAL" -o update -n node.startup -v automatic || bad "node.startup $iqn"
  done
  # Debian's way to log in to the automatic nodes (as at boot); the unit, active from now
  # on, logs the sessions out at shutdown
  timeout 120 systemctl start open-iscsi.service || bad "systemctl start open-iscsi.service"
  iscsiadm -m session 2>&1 | sed 's/^/  session: /'
  D1=$(disk_of "$IQN_ADM") || fail "no disk for $IQN_ADM"
  D2=$(disk_of "$IQN_ADMIN") || fail "no disk for $IQN_ADMIN"
  lsblk -o NAME,SIZE,TRAN,VENDOR,MODEL "/dev/$D1" "/dev/$D2" | sed 's/^/  /'
  timeout 120 mkfs.ext4 -q -F "/dev/$D1" || fail "mkfs.ext4 /dev/$D1"
  mkdir -p "$MNT"
  mount "/dev/$D1" "$MNT" || fail "mount /dev/$D1"
  dd if=/dev/urandom of="$MNT/blob" bs=1M count=16 status=none || fail "write $MNT/blob"
  SHA1=$(sha256sum < "$MNT/blob" | cut -d' ' -f1)
  umount "$MNT" && echo 3 > /proc/sys/vm/drop_caches && mount -o ro "/dev/$D1" "$MNT" || fail "remount"
  got=$(sha256sum < "$MNT/blob" | cut -d' ' -f1)
  [ "$got" = "$SHA1" ] && pass "ext4 on /dev/$D1 ($IQN_ADM): 16 MiB written, remounted, sha256 $SHA1 verified" ||
    bad "ext4 blob sha256 $got != $SHA1"
  umount "$MNT"
  head -c 8388608 /dev/urandom > /tmp/raw.bin
  SHA2=$(sha256sum < /tmp/raw.bin | cut -d' ' -f1)
  dd if=/tmp/raw.bin of="/dev/$D2" bs=1M oflag=direct status=none || bad "write /dev/$D2"
  got=$(dd if="/dev/$D2" bs=1M count=8 iflag=direct status=none | sha256sum | cut -d' ' -f1)
  [ "$got" = "$SHA2" ] && pass "raw /dev/$D2 ($IQN_ADMIN): 8 MiB O_DIRECT written and read back, sha256 verified" ||
    bad "raw sha256 $got != $SHA2"

  step "systemctl reload: a good configuration"
  PID=$(main_pid)
  grep -q '^targets: \[\]$' "$CONF" || fail "$CONF has no 'targets: []' line to change"
  cp -p "$CONF" "$WORK/numatgt.yaml.shipped"
  sed "s#^targets: \\[\\]\$#targets:\\n  - iqn: $IQN_YAML\\n    luns:\\n      - lun: 1\\n        path: $LUN3\\n        size: 16M#" \
    "$WORK/numatgt.yaml.shipped" > "$WORK/numatgt.yaml.good"
  cat "$WORK/numatgt.yaml.good" > "$CONF"
  sed -n '/^targets:/,$p' "$CONF" | sed 's/^/  yaml: /'
  out=$(timeout 120 systemctl reload numatgtd 2>&1); rc=$?
  [ -n "$out" ] && echo "$out" | sed 's/^/  /'
  show=$(show_targets)
  if [ "$rc" = 0 ] && echo "$show" | grep -q "$IQN_YAML" && [ "$(main_pid)" = "$PID" ]; then
    pass "systemctl reload (target added to numatgt.yaml): exit 0, $IQN_YAML served, same MainPID $PID"
  else
    bad "good reload: exit $rc, $IQN_YAML $(echo "$show" | grep -c "$IQN_YAML") times in show"
  fi
  [ "$(stat -c %U "$LUN3" 2>/dev/null)" = numatgt ] && echo "  $(ls -l "$LUN3")"
  # the sessions of the untouched targets stayed
  dd if="/dev/$D2" bs=1M count=8 iflag=direct status=none | sha256sum | grep -q "$SHA2" &&
    iscsiadm -m session 2>&1 | grep -q "$IQN_ADM" &&
    pass "sessions of the unchanged targets kept across the reload (reads verified)" ||
    bad "sessions lost or data changed across the reload"

  step "systemctl reload: a bad configuration"
  before=$(show_targets)
  # would remove IQN_YAML and add IQN_BAD, whose LUN has a block size numatgtd refuses
  sed "s#^  - iqn: $IQN_YAML\$#  - iqn: $IQN_BAD#; s#^        size: 16M\$#        size: 16M\\n        block_size: 1000#" \
    "$WORK/numatgt.yaml.good" > "$CONF"
  sed -n '/^targets:/,$p' "$CONF" | sed 's/^/  yaml: /'
  out=$(timeout 120 systemctl reload numatgtd 2>&1); rc=$?
  echo "$out" | sed 's/^/  /'
  after=$(show_targets)
  state=$(systemctl show -p ActiveState,SubState,MainPID,ReloadResult numatgtd | tr '\n' ' ')
  echo "  after: $state"
  if [ "$rc" != 0 ] && [ "$before" = "$after" ] && [ "$(main_pid)" = "$PID" ] &&
    [ "$(systemctl is-active numatgtd)" = active ]; then
    pass "bad reload: the job failed (exit $rc), numatgtd still active (same MainPID), tgtadm --op show unchanged"
  else
    bad "bad reload: exit $rc, show changed: $([ "$before" = "$after" ] && echo no || echo yes), $state"
  fi
  timeout 60 numatgtadm --reload 2>&1 | sed 's/^/  numatgtadm --reload: /'
  # the good file back, and a reload so that the saved configuration is newer than it
  cat "$WORK/numatgt.yaml.good" > "$CONF"
  timeout 120 systemctl reload numatgtd || bad "reload of the restored configuration"
  if [ -n "$(find "$SAVED" -newer "$CONF")" ] && grep -q "$IQN_YAML" "$SAVED" && grep -q "$IQN_ADM" "$SAVED"; then
    pass "saved configuration newer than $CONF after the reload, holds $IQN_YAML and the tgtadm targets"
  else
    bad "saved configuration not rewritten after the reload"
  fi

  step "journal"
  journalctl -u numatgtd -p warning --no-pager -o short-monotonic | tail -n 8 | sed 's/^/  -p warning: /'
  echo "  -o verbose (the daemon's last entries, PRIORITY and MESSAGE):"
  journalctl _SYSTEMD_UNIT=numatgtd.service SYSLOG_IDENTIFIER=numatgtd -o verbose --no-pager |
    awk '/^    PRIORITY=/ { p = $1 } /^    SYSLOG_IDENTIFIER=/ { id = $1 } /^    MESSAGE=/ { print "    " id " " p " " substr($0, 5, 150) }' |
    tail -n 6
  n3=$(journalctl _SYSTEMD_UNIT=numatgtd.service SYSLOG_IDENTIFIER=numatgtd -p err..err -q -o cat | wc -l)
  n4=$(journalctl _SYSTEMD_UNIT=numatgtd.service SYSLOG_IDENTIFIER=numatgtd -p warning..warning -q -o cat | wc -l)
  n6=$(journalctl _SYSTEMD_UNIT=numatgtd.service SYSLOG_IDENTIFIER=numatgtd -p info..info -q -o cat | wc -l)
  n7=$(journalctl _SYSTEMD_UNIT=numatgtd.service SYSLOG_IDENTIFIER=numatgtd -p debug..debug -q -o cat | wc -l)
  echo "  daemon lines by priority: err=$n3 warning=$n4 info=$n6 debug=$n7"
  refusal=$(journalctl _SYSTEMD_UNIT=numatgtd.service SYSLOG_IDENTIFIER=numatgtd -p err -q -o cat | grep -i -E 'block.size|1000|refus|reload' | tail -n 1)
  if [ "$n6" -gt 0 ] && [ -n "$refusal" ]; then
    pass "journal: daemon lines at info ($n6) and err ($n3, the refused reload: $refusal)"
  else
    bad "journal: info=$n6 err=$n3, refusal line '${refusal}'"
  fi

  step "live upgrade under systemd: numatgtadm --upgrade"
  PID=$(main_pid)
  NR=$(systemctl show -p NRestarts --value numatgtd)
  C=$(cursor)
  out=$(timeout 180 numatgtadm --upgrade 2>&1); rc=$?
  echo "  $out"
  systemctl show -p MainPID,ActiveState,SubState,NRestarts,StatusText numatgtd | sed 's/^/  /'
  took=$(journalctl --after-cursor="$C" -u numatgtd -o cat --no-pager | grep -c 'handover: taking over')
  newcaps=$(awk '$1 == "CapEff:" { print $2 }' "/proc/$PID/status" 2>/dev/null)
  if [ "$rc" = 0 ] && echo "$out" | grep -q "^upgraded: numatgtd pid $PID (/usr/sbin/numatgtd" &&
    [ "$(main_pid)" = "$PID" ] && [ "$took" = 1 ] && [ "$(systemctl is-active numatgtd)" = active ] &&
    [ "$(systemctl show -p NRestarts --value numatgtd)" = "$NR" ] && [ "$newcaps" = 0000000000004400 ]; then
    pass "numatgtadm --upgrade under systemd: the new executable in MainPID $PID (execve), active, no restart, CapEff $newcaps"
  else
    bad "upgrade under systemd: exit $rc, MainPID $(main_pid) (was $PID), taking-over lines $took, $(systemctl is-active numatgtd), caps '$newcaps'"
  fi
  # open-iscsi's sessions moved with their TCP connections (no logout, no login)
  if echo "$out" | grep -q " [1-9][0-9]* connections moved, 0 asked to log out"; then
    pass "the initiator's sessions moved to the new executable: $(echo "$out" | grep -o '[0-9]* connections moved')"
  else
    bad "upgrade under systemd: the sessions did not move: $out"
  fi
  i=0
  until iscsiadm -m session 2>/dev/null | grep -q "$IQN_ADM" && iscsiadm -m session 2>/dev/null | grep -q "$IQN_ADMIN"; do
    i=$((i + 1)); [ $i -le 30 ] || break; sleep 1
  done
  got=$(dd if="/dev/$D2" bs=1M count=8 iflag=direct status=none | sha256sum | cut -d' ' -f1)
  show=$(show_targets)
  if [ "$got" = "$SHA2" ] && echo "$show" | grep -q "$IQN_YAML" && echo "$show" | grep -q "$IQN_ADM"; then
    pass "after the upgrade: the same sessions read the same data (sha256), every target served"
  else
    bad "after the upgrade: raw sha256 $got (want $SHA2), targets: $(echo "$show" | grep -c '^Target')"
  fi

  step "reboot (sessions logged in, node.startup=automatic)"
  {
    echo "PHASE=2"
    echo "FAILS=$FAILS"
    echo "SHA1=$SHA1"
    echo "SHA2=$SHA2"
  } > "$STATE"
  sync
  echo "$FAILS" > "$SHARE/phase1-fails"
  journalctl -u numatgtd -u tgt -u open-iscsi -u iscsid --no-pager -o short-monotonic \
    > "$SHARE/journal-boot1.txt" 2>&1
  sync
  echo "VM_SYSTEMD_PHASE1_DONE failures=$FAILS"
  systemctl --no-block reboot
  exit 0
}

phase2() {
  step "boot 2: $(journalctl --list-boots --no-pager 2>/dev/null | grep -c -E '^ *-?[0-9]+ ') boots in the journal"
  echo "  system: $(timeout 120 systemctl is-system-running --wait 2>&1)"
  systemctl --failed --no-legend --no-pager | sed 's/^/  failed unit: /'
  props=$(systemctl show -p ActiveState,SubState,StatusText,MainPID numatgtd | tr '\n' ' ')
  echo "  numatgtd: $props; tgt.service: $(systemctl is-enabled tgt.service) $(systemctl is-active tgt.service)"
  [ "$(systemctl is-active numatgtd)" = active ] || fail "numatgtd not active after the reboot"
  pass "numatgtd.service started at boot: $props"
  one_daemon numatgtd "after the reboot"
  journalctl -b -u numatgtd --no-pager -o cat | grep -i -E 'saved' | head -n 3 | sed 's/^/  log: /'
  show=$(show_targets)
  echo "$show" | grep -E '^Target' | sed 's/^/  /'
  if echo "$show" | grep -q "$IQN_ADM" && echo "$show" | grep -q "$IQN_ADMIN" && echo "$show" | grep -q "$IQN_YAML" &&
    echo "$show" | grep -q "Backing store path: $LUN1"; then
    pass "saved configuration back after the reboot: $IQN_ADM (tgtadm), $IQN_ADMIN (tgt-admin), $IQN_YAML (yaml)"
  else
    bad "targets missing after the reboot"
  fi

  step "initiator: logged in again at boot?"
  echo "  open-iscsi.service: $(systemctl show -p ActiveState,Result open-iscsi.service | tr '\n' ' ')"
  i=0
  until iscsiadm -m session 2>/dev/null | grep -q "$IQN_ADM" && iscsiadm -m session 2>/dev/null | grep -q "$IQN_ADMIN"; do
    i=$((i + 1)); [ $i -le 60 ] || break; sleep 1
  done
  iscsiadm -m session 2>&1 | sed 's/^/  session: /'
  if iscsiadm -m session 2>/dev/null | grep -q "$IQN_ADM" && iscsiadm -m session 2>/dev/null | grep -q "$IQN_ADMIN"; then
    pass "open-iscsi logged in to both targets at boot (node.startup=automatic)"
  else
    bad "no automatic login at boot; logging in by hand"
    for iqn in "$IQN_ADM" "$IQN_ADMIN"; do
      timeout 90 iscsiadm -m node -T "$iqn" -p "$PORTAL" --login 2>&1 | sed 's/^/  /'
    done
  fi
  D1=$(disk_of "$IQN_ADM") || fail "no disk for $IQN_ADM after the reboot"
  D2=$(disk_of "$IQN_ADMIN") || fail "no disk for $IQN_ADMIN after the reboot"
  mkdir -p "$MNT"
  mount -o ro "/dev/$D1" "$MNT" || fail "mount /dev/$D1 after the reboot"
  got1=$(sha256sum < "$MNT/blob" | cut -d' ' -f1)
  umount "$MNT"
  got2=$(dd if="/dev/$D2" bs=1M count=8 iflag=direct status=none | sha256sum | cut -d' ' -f1)
  [ "$got1" = "$SHA1" ] && [ "$got2" = "$SHA2" ] &&
    pass "after the reboot: ext4 blob and raw blocks read back with their sha256" ||
    bad "data after the reboot: ext4 $got1 (want $SHA1), raw $got2 (want $SHA2)"
  timeout 60 iscsiadm -m node --logoutall=all 2>&1 | sed 's/^/  /'

  step "apt-get remove numatgt"
  PID=$(main_pid)
  timeout 300 apt-get remove -y numatgt > "$WORK/apt-remove.log" 2>&1; rc=$?
  tr '\r' '\n' < "$WORK/apt-remove.log" | grep -v 'Reading database' | tail -n 3 | sed 's/^/  apt: /'
  i=0
  while [ -n "$(listeners)" ] && [ $i -lt 50 ]; do i=$((i + 1)); sleep 0.2; done
  st=$(systemctl is-active numatgtd 2>&1)
  if [ "$rc" = 0 ] && [ "$st" != active ] && ! kill -0 "$PID" 2>/dev/null && [ -z "$(listeners)" ] &&
    [ ! -e /usr/sbin/numatgtd ]; then
    pass "apt-get remove numatgt: the service stopped ($st, pid $PID gone), nothing on 3260, $CONF kept: $(ls "$CONF" 2>&1)"
  else
    bad "apt-get remove: exit $rc, numatgtd $st, on 3260: '$(listeners)'"
  fi

  step "numatgt installed again (tgt.service disabled)"
  (cd "$WORK" && timeout 300 apt-get install -y "./$(basename "$DEB")") > "$WORK/apt-install2.log" 2>&1 ||
    bad "second apt-get install"
  grep 'numatgt:' "$WORK/apt-install2.log" | sed 's/^/  postinst: /'
  echo "  numatgtd.service: $(systemctl is-enabled numatgtd) $(systemctl is-active numatgtd)"
  # the daemon stopped by the removal was started again with the new binary: no word of a
  # previous version still running
  if [ "$(systemctl is-active numatgtd)" = active ] && ! grep -q 'previous version' "$WORK/apt-install2.log"; then
    pass "reinstall after remove: numatgtd started again by the postinst, no 'previous version' notice"
  else
    bad "reinstall after remove: numatgtd $(systemctl is-active numatgtd); $(grep 'previous version' "$WORK/apt-install2.log")"
  fi
  one_daemon numatgtd "numatgt installed again"

  TGT_DEB=$(ls "$WORK"/tgt_*.deb 2>/dev/null | head -n 1)
  [ -n "$TGT_DEB" ] || fail "no tgt .deb in $WORK"
  step "Debian's tgt installed after numatgt, tgt.service masked first (README)"
  timeout 300 apt-get purge -y tgt > "$WORK/apt-tgt.log" 2>&1 || bad "apt-get purge tgt"
  systemctl mask tgt.service 2>&1 | sed 's/^/  /'
  timeout 300 apt-get install -y "$TGT_DEB" >> "$WORK/apt-tgt.log" 2>&1 || bad "apt-get install tgt (masked)"
  echo "  tgt.service: $(systemctl is-enabled tgt.service 2>&1) $(systemctl is-active tgt.service); numatgtd: $(systemctl is-active numatgtd)"
  [ "$(systemctl is-active numatgtd)" = active ] || bad "numatgtd not active after tgt was installed masked"
  one_daemon numatgtd "tgt installed after numatgt, tgt.service masked"

  step "Debian's tgt installed after numatgt, not masked"
  systemctl unmask tgt.service 2>&1 | sed 's/^/  /'
  timeout 300 apt-get purge -y tgt >> "$WORK/apt-tgt.log" 2>&1 || bad "apt-get purge tgt"
  C=$(cursor)
  timeout 300 apt-get install -y "$TGT_DEB" >> "$WORK/apt-tgt.log" 2>&1 || bad "apt-get install tgt"
  settle tgt.service
  echo "  tgt.service: $(systemctl is-enabled tgt.service 2>&1) $(systemctl is-active tgt.service); numatgtd: $(systemctl is-active numatgtd)"
  switched "tgt installed after numatgt" tgt.service numatgtd.service "$C"
  one_daemon tgtd "tgt installed after numatgt, not masked"

  # and back, as an admin would with both installed: starting one stops the other
  step "systemctl start numatgtd while tgt.service runs"
  C=$(cursor)
  out=$(timeout 120 systemctl start numatgtd 2>&1); rc=$?
  [ -n "$out" ] && echo "$out" | sed 's/^/  /'
  settle numatgtd.service
  echo "  exit $rc; numatgtd: $(systemctl is-active numatgtd); tgt.service: $(systemctl is-active tgt.service)"
  [ "$rc" = 0 ] || bad "systemctl start numatgtd beside a running tgt.service: exit $rc"
  switched "systemctl start numatgtd beside tgt.service" numatgtd.service tgt.service "$C"
  one_daemon numatgtd "numatgtd started while tgt.service ran"

  finish "$FAILS"
}

DEB=$(ls "$SHARE"/numatgt_*.deb 2>/dev/null | head -n 1)
[ -n "$DEB" ] || fail "no numatgt_*.deb on the share"
mkdir -p "$STATE_DIR" "$WORK"
case "$PHASE" in
  1) phase1 ;;
  2) phase2 ;;
  *) fail "unknown phase '$PHASE' in $STATE" ;;
esac
