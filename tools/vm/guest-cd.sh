# Guest step of the kernel-initiator test (sourced by guest-iscsi-tcp.sh): a CD/DVD LUN.
# An ISO 9660 image made here with genisoimage (three files of random bytes, Rock Ridge and
# Joliet) is exported as a CD/DVD drive: tgtadm `--device-type cd` (target tid 3), or
# `device_type: cd` in the YAML variant. Over the kernel's iscsi_tcp the initiator's sr
# driver attaches it (/dev/srN, SCSI type 5) and reads its capabilities page (an MMC
# drive: "scsi3-mmc drive"); sg3_utils see a DVD-ROM drive (sg_inq,
# sg_get_config's current profile); blkid finds the ISO's label; `mount -t iso9660` reads
# every file byte-exact; a WRITE(10) sent with sg_raw is refused (ILLEGAL REQUEST, INVALID
# COMMAND OPERATION CODE: the drive does not write; TARGET=tgtd: CANNOT WRITE MEDIUM); `eject` opens the tray (reads then
# fail: no medium) and `eject -t` closes it (the disc reads the same again). Logout.
# Uses from guest-iscsi-tcp.sh: TARGET, PORTAL, C, fail, step; CD_IQN and CD_ISO are set
# there (the YAML variant configures them before the target starts).

CD_SRC=/tmp/vm-cd-src
CD_MNT=/tmp/mnt-cd

cd_dev() { # the sr device of the CD target's session
  local s b
  for s in /sys/class/iscsi_session/session*; do
    grep -qx "$CD_IQN" "$s/targetname" 2>/dev/null || continue
    for b in "$s"/device/target*/*/block/*; do [ -e "$b" ] && basename "$b"; done
  done | head -n 1
}

step "cd: an ISO image exported as a CD/DVD drive ($CD_IQN)"
if [ "$TARGET" != numatgtd-yaml ]; then
  tgtadm $C --lld iscsi --op new --mode target --tid 3 -T "$CD_IQN" || fail "tgtadm cd target"
  tgtadm $C --lld iscsi --op new --mode logicalunit --tid 3 --lun 1 -b "$CD_ISO" --device-type cd ||
    fail "tgtadm --device-type cd"
  tgtadm $C --lld iscsi --op bind --mode target --tid 3 -I ALL || fail "tgtadm cd bind"
fi
tgtadm $C --lld iscsi --op show --mode target | grep -A3 'LUN: 1' | grep -m1 'Type: cd/dvd' ||
  fail "tgtadm show: no cd/dvd LUN"
modprobe -a sr_mod isofs 2> /dev/null
timeout 60 iscsiadm -m discovery -t sendtargets -p "$PORTAL" > /dev/null || fail "cd: discovery"
timeout 60 iscsiadm -m node -T "$CD_IQN" -p "$PORTAL" --login || fail "cd: login"
SR=
i=0
while [ $i -lt 100 ]; do
  SR=$(cd_dev)
  [ -n "$SR" ] && [ -b "/dev/$SR" ] && break
  i=$((i + 1)); sleep 0.2
done
[ -n "$SR" ] && [ -b "/dev/$SR" ] || fail "cd: no block device for the session"
case "$SR" in sr*) ;; *) fail "cd: the LUN attached as /dev/$SR, not as an sr device" ;; esac
type=$(cat "/sys/block/$SR/device/type")
step "cd: /dev/$SR, SCSI type $type, $(cat "/sys/block/$SR/size") 512-byte sectors, ro=$(cat "/sys/block/$SR/ro")"
[ "$type" = 5 ] || fail "cd: SCSI type $type, want 5"
drive=$(dmesg | grep -E "\[$SR\] (scsi3-mmc|scsi-1) drive" | tail -n 1)
step "cd: sr: ${drive#*] }"
# the sr driver reads the MM Capabilities page with MODE SENSE(6) (no 10-byte fallback);
# tgtd 1.0.85 does not answer it, so sr takes its drive for a "scsi-1" one (no DVD)
case "$TARGET" in
  tgtd) ;;
  *) echo "$drive" | grep -q 'scsi3-mmc drive' || fail "cd: sr did not read the capabilities page: $drive" ;;
esac
sg_inq "/dev/$SR" | grep -E 'PDT=5|Peripheral device type: cd/dvd' || fail "cd: sg_inq does not see a cd/dvd"
profile=$(sg_get_config -c "/dev/$SR" 2> /dev/null | grep -i 'current profile' || true)
step "cd: sg_get_config: $profile"
echo "$profile" | grep -qi 'DVD-ROM' || fail "cd: current profile is not DVD-ROM ($profile)"
label=$(blkid -o value -s LABEL "/dev/$SR")
[ "$label" = NUMATGT_CD ] || fail "cd: blkid label '$label', want NUMATGT_CD"
mkdir -p "$CD_MNT"
mount -t iso9660 -o ro "/dev/$SR" "$CD_MNT" || fail "cd: mount -t iso9660"
(cd "$CD_SRC" && find . -type f | sort | xargs sha256sum) > /tmp/cd-src.sha || fail "cd: source sums"
(cd "$CD_MNT" && sha256sum -c /tmp/cd-src.sha) || fail "cd: a file on the disc differs"
step "cd: $(wc -l < /tmp/cd-src.sha) files read byte-exact from the mounted disc"
umount "$CD_MNT" || fail "cd: umount"
head -c 2048 /dev/zero > /tmp/cd-zero.bin
out=$(sg_raw -s 2048 -i /tmp/cd-zero.bin "/dev/$SR" 2a 00 00 00 00 10 00 00 01 00 2>&1)
# numatgtd's drive has no write feature: WRITE(10) is an unknown command there. tgtd
# 1.0.85 emulates a DVD writer (a DVD+R profile for an empty image) and refuses the write
# to a DVD-ROM disc as CANNOT WRITE MEDIUM - INCOMPATIBLE FORMAT.
case "$TARGET" in
  tgtd) want='cannot write medium' ;;
  *) want='invalid command operation code' ;;
esac
echo "$out" | grep -qi "$want" || fail "cd: a WRITE(10) was not refused with '$want': $out"
step "cd: WRITE(10) refused: $(echo "$out" | grep -i -m1 "$want")"
eject "/dev/$SR" || fail "cd: eject"
# sg_turs opens without the cdrom driver's disc check (O_NONBLOCK): the tray stays open
tur=$(sg_turs -v "/dev/$SR" 2>&1)
echo "$tur" | grep -qi 'medium not present' || fail "cd: TEST UNIT READY after eject: $tur"
# an open for reading closes the tray by itself (the cdrom driver's autoclose): off here
echo 0 > /proc/sys/dev/cdrom/autoclose
dd if="/dev/$SR" of=/dev/null bs=2048 count=1 iflag=direct 2> /dev/null && fail "cd: read with the tray open"
echo 1 > /proc/sys/dev/cdrom/autoclose
step "cd: ejected: $(echo "$tur" | grep -i -m1 'medium not present'); reads fail"
eject -t "/dev/$SR" || fail "cd: eject -t (close the tray)"
head -c 65536 "$CD_ISO" > /tmp/cd-head.bin
i=0
until dd if="/dev/$SR" bs=2048 count=32 iflag=direct 2> /dev/null | cmp -s - /tmp/cd-head.bin; do
  i=$((i + 1)); [ $i -le 25 ] || fail "cd: the disc does not read the same after the tray closed"; sleep 0.2
done
step "cd: tray closed, the disc reads the same again"
timeout 60 iscsiadm -m node -T "$CD_IQN" -p "$PORTAL" --logout || fail "cd: logout"
