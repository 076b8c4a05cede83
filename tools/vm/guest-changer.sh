# Guest step of the kernel-initiator test (sourced by guest-iscsi-tcp.sh): a virtual tape
# library. Debian's own example /usr/share/doc/tgt/examples/targets.conf.vtl.L700 (an STK
# L700: a picker, 216 slots, 20 mail slots, three HP LTO3 drives whose empty state is a
# shared "notape" cleaning cartridge), its paths moved to /tmp/vm-vtl and its drives bound
# to the library's own tid (other targets hold tid 1 here), is loaded with
# Debian's `tgt-admin -e`; two tapes made by tgtimg go into slots 1000 and 1001 with tgtadm,
# as the example's comment says. Over the kernel's iscsi_tcp: `mtx status` (through the sg
# driver) shows the barcodes; `mtx load 1 0` puts the first tape into drive 0 (element 500,
# which the example binds to LUN 3); the st driver writes a tar archive to it and reads it
# back byte-exact; `mt offline` and `mtx unload 1 0` put it back in its slot, and `mtx
# status` shows it there. Logout.
# Uses from guest-iscsi-tcp.sh: TARGET, PORTAL, TC, fail, step.

VTL=/tmp/vm-vtl
VTL_IQN=iqn.2008-09.com.example:server.tape
VTL_SRC=/tmp/vm-vtl-src
VTL_OUT=/tmp/vm-vtl-out

vtl_dev() { # LUN -> the device of that LUN of the library's session (sg for a changer)
  local s d lun=$1 kind=$2
  for s in /sys/class/iscsi_session/session*; do
    grep -qx "$VTL_IQN" "$s/targetname" 2>/dev/null || continue
    for d in "$s"/device/target*/*:*:*:"$lun"/"$kind"/*; do [ -e "$d" ] && basename "$d"; done
  done | grep -E '^(sg|st)[0-9]+$' | head -n 1
}

step "vtl: Debian's L700 library example loaded with tgt-admin -e"
rm -rf "$VTL"
mkdir -p "$VTL" || fail "vtl: mkdir"
tgtimg --op new --device-type tape --barcode="" --size=1 --type=clean --file="$VTL/notape" > /dev/null ||
  fail "vtl: tgtimg notape"
for i in 1 2 3; do ln -s notape "$VTL/notape$i"; done
for b in A0000001 A0000002; do
  tgtimg --op new --device-type tape --barcode="$b" --size=64 --type=data --file="$VTL/$b" > /dev/null ||
    fail "vtl: tgtimg $b"
done
dd if=/dev/zero of="$VTL/smc" bs=1k count=1 2> /dev/null
# the example binds its drives to tid=1; here tids 1-4 are the other steps' targets, so
# the binding names the tid tgt-admin gives the library: the next after the highest
NEXT_TID=$(( $(tgtadm -C "$TC" --op show --mode target | sed -n 's/^Target \([0-9]*\):.*/\1/p' | sort -n | tail -n 1) + 1 ))
sed -e "s|/root/tapes|$VTL|g" -e "s|/root/smc|$VTL/smc|" -e '/^include/d' -e "s|,tid=1,|,tid=$NEXT_TID,|" \
  /usr/share/doc/tgt/examples/targets.conf.vtl.L700 > "$VTL/l700.conf" || fail "vtl: example"
tgt-admin -C "$TC" -e -c "$VTL/l700.conf" || fail "vtl: tgt-admin -e"
VTL_TID=$(tgtadm -C "$TC" --op show --mode target | sed -n "s/^Target \([0-9]*\): $VTL_IQN\$/\1/p")
[ "$VTL_TID" = "$NEXT_TID" ] || fail "vtl: tgt-admin gave the library tid '$VTL_TID', not $NEXT_TID"
for a in 1000:A0000001 1001:A0000002; do
  tgtadm -C "$TC" --lld iscsi --mode logicalunit --op update --tid "$VTL_TID" --lun 4 \
    --params "element_type=2,address=${a%:*},barcode=${a#*:},sides=1" ||
    fail "vtl: tgtadm barcode ${a#*:}"
done
tgtadm -C "$TC" --op show --mode target | grep -A1 'LUN: 4' | grep -q 'Type: changer' ||
  fail "vtl: tgtadm show: no changer at LUN 4"
modprobe -a st sg 2> /dev/null
timeout 60 iscsiadm -m discovery -t sendtargets -p "$PORTAL" > /dev/null || fail "vtl: discovery"
timeout 60 iscsiadm -m node -T "$VTL_IQN" -p "$PORTAL" --login || fail "vtl: login"
SG=
ST3=
i=0
while [ $i -lt 100 ]; do
  SG=$(vtl_dev 4 scsi_generic)
  ST3=$(vtl_dev 3 scsi_tape)
  [ -n "$SG" ] && [ -n "$ST3" ] && [ -c "/dev/$SG" ] && [ -c "/dev/n$ST3" ] && break
  i=$((i + 1)); sleep 0.2
done
[ -n "$SG" ] && [ -c "/dev/$SG" ] || fail "vtl: no sg device for the changer (LUN 4)"
[ -n "$ST3" ] && [ -c "/dev/n$ST3" ] || fail "vtl: no st device for the drive (LUN 3)"
step "vtl: changer /dev/$SG (type $(cat /sys/class/scsi_generic/$SG/device/type)), drive 0 /dev/n$ST3"
mtx -f "/dev/$SG" status > /tmp/vtl-status.txt 2>&1 || mtx -f "/dev/$SG" status > /tmp/vtl-status.txt 2>&1 ||
  fail "vtl: mtx status: $(cat /tmp/vtl-status.txt)"
head -n 4 /tmp/vtl-status.txt
grep -q 'Storage Changer.*3 Drives, 236 Slots ( 20 Import/Export )' /tmp/vtl-status.txt ||
  fail "vtl: mtx status header: $(head -n 1 /tmp/vtl-status.txt)"
grep -q 'Storage Element 1:Full :VolumeTag=A0000001' /tmp/vtl-status.txt || fail "vtl: A0000001 not in slot 1"
grep -q 'Storage Element 2:Full :VolumeTag=A0000002' /tmp/vtl-status.txt || fail "vtl: A0000002 not in slot 2"
step "vtl: mtx status shows both barcodes"
mtx -f "/dev/$SG" load 1 0 || fail "vtl: mtx load 1 0"
mtx -f "/dev/$SG" status > /tmp/vtl-status.txt 2>&1
grep 'Data Transfer Element 0' /tmp/vtl-status.txt
grep -q 'Data Transfer Element 0:Full (Storage Element 1 Loaded):VolumeTag = A0000001' /tmp/vtl-status.txt ||
  fail "vtl: drive 0 does not hold A0000001 after mtx load"
NST3=/dev/n$ST3
mt -f "$NST3" status > /dev/null 2>&1
mt -f "$NST3" status | grep -q 'ONLINE' || fail "vtl: drive 0 not online after the load: $(mt -f "$NST3" status 2>&1)"
mkdir -p "$VTL_SRC/d" "$VTL_OUT"
head -c 2000000 /dev/urandom > "$VTL_SRC/d/x.bin"
echo library > "$VTL_SRC/y.txt"
(cd "$VTL_SRC" && find . -type f | sort | xargs sha256sum) > /tmp/vtl-src.sha
mt -f "$NST3" rewind || fail "vtl: mt rewind"
tar -cf "$NST3" -C "$VTL_SRC" . || fail "vtl: tar write to drive 0"
mt -f "$NST3" rewind || fail "vtl: mt rewind"
tar -xf "$NST3" -C "$VTL_OUT" || fail "vtl: tar read from drive 0"
(cd "$VTL_OUT" && sha256sum -c --quiet /tmp/vtl-src.sha) || fail "vtl: the archive read back differs"
step "vtl: tar written to A0000001 in drive 0 and read back byte-exact"
mt -f "$NST3" offline || fail "vtl: mt offline"
mtx -f "/dev/$SG" unload 1 0 || fail "vtl: mtx unload 1 0"
mtx -f "/dev/$SG" status > /tmp/vtl-status.txt 2>&1
grep -q 'Data Transfer Element 0:Empty' /tmp/vtl-status.txt || fail "vtl: drive 0 not empty after mtx unload"
grep -q 'Storage Element 1:Full :VolumeTag=A0000001' /tmp/vtl-status.txt || fail "vtl: A0000001 not back in slot 1"
step "vtl: mt offline, mtx unload: A0000001 back in slot 1"
tgtimg --op show --device-type tape --file="$VTL/A0000001" | grep -q 'Uncompressed data' ||
  fail "vtl: tgtimg sees no data on A0000001"
timeout 60 iscsiadm -m node -T "$VTL_IQN" -p "$PORTAL" --logout || fail "vtl: logout"
