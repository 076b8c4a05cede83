# Guest step of the kernel-initiator test (sourced by guest-iscsi-tcp.sh): SCSI passthrough.
# A local SCSI disk made here by the kernel's scsi_debug (64 MiB of RAM, 512-byte sectors,
# vendor "Linux", product "scsi_debug") is exported through the target as it is: tgtadm
# `--bstype sg --device-type pt -b /dev/sgN` (target tid 6) and `--bstype bsg --device-type
# pt -b /dev/bsg/H:C:T:L` (tid 7); every variant configures them with tgtadm here, the
# YAML one too (the device nodes are only known at run time). `tgtadm --op show` lists them
# as passthrough LUNs of that backing store type and path; it refuses sg without pt, pt
# without sg or bsg, and sg over a block device, as tgtd does. Over the kernel's iscsi_tcp
# each LUN attaches as a disk that is scsi_debug itself: sg_inq shows scsi_debug's identity
# (vendor, product, unit serial number: not the target's), sg_readcap its capacity (131072
# blocks of 512 bytes); 4 MiB of random bytes written through each target (dd oflag=direct)
# read back byte-exact from scsi_debug's own local disk (iflag=direct), through the same
# target and through the other one. `sg_reset -d` (LOGICAL UNIT RESET) through each target
# succeeds and the LU reads the same afterwards; whether the reset reached scsi_debug is
# seen in its log (opts=1 around the reset: "scsi_debug_device_reset" in 6.12, "doing
# device reset" in later kernels), first checked with a local sg_reset of its own sg node.
# numatgtd must pass the reset on (PT_RESET_MUST_REACH=0 only reports it); tgtd 1.0.85
# does not (LOGICAL UNIT RESET only aborts the task set: "abort_task_set ... found 0 0").
# tgtd 1.0.85 cannot export bsg on this kernel (the bsg node lost read/write and has no
# poll: epoll refuses it, "tgt_event_add ... Cannot add fd, Operation not permitted"):
# for TARGET=tgtd only, that half is skipped with a note; numatgtd must do both. Logout,
# both targets deleted (numatgtd: after a live upgrade with both sessions moved, the first
# TEST UNIT READY of each is GOOD and the data the same); then the same sg node from a targets.conf (bs-type sg, device-type
# pt) loaded by Debian's tgt-admin -e serves scsi_debug's identity too; scsi_debug unloaded.
# Uses from guest-iscsi-tcp.sh: TARGET, PORTAL, C, TC, LOG, fail, step.

PT_SG_IQN=iqn.2026-11.org.numatgt:vmtest-pt-sg
PT_BSG_IQN=iqn.2026-11.org.numatgt:vmtest-pt-bsg
PT_CONF_IQN=iqn.2026-11.org.numatgt:vmtest-pt-conf
PT_SG_TID=6
PT_BSG_TID=7
PT_BLOCKS=131072
PT_A=/tmp/vm-pt-a.bin
PT_B=/tmp/vm-pt-b.bin
PT_OPTS=/sys/bus/pseudo/drivers/scsi_debug/opts
case "$TARGET" in
  tgtd) PT_RESET_MUST_REACH=${PT_RESET_MUST_REACH:-0} ;;
  *) PT_RESET_MUST_REACH=${PT_RESET_MUST_REACH:-1} ;;
esac

pt_fail() {
  echo 0 > "$PT_OPTS" 2> /dev/null
  timeout 20 iscsiadm -m node -T "$PT_SG_IQN" -p "$PORTAL" --logout > /dev/null 2>&1
  timeout 20 iscsiadm -m node -T "$PT_BSG_IQN" -p "$PORTAL" --logout > /dev/null 2>&1
  fail "pt: $*"
}

pt_lun_dir() { # IQN: the sysfs directory of LUN 1 of IQN's session
  local s d
  for s in /sys/class/iscsi_session/session*; do
    grep -qx "$1" "$s/targetname" 2> /dev/null || continue
    for d in "$s"/device/target*/*:*:*:1; do [ -d "$d" ] && echo "$d"; done
  done | head -n 1
}

pt_show_lun() { # TID [LUN]: the lines of LUN (1) of target TID in tgtadm's show
  tgtadm $C --lld iscsi --op show --mode target | awk -v t="Target $1:" -v l="${2:-1}" '
    /^Target [0-9]+:/ { in_t = (index($0, t) == 1); in_l = 0 }
    in_t && /^ *(Account|ACL) information:/ { in_l = 0 }
    in_t && /^ *LUN: / { in_l = ($2 == l) }
    in_t && in_l'
}

pt_resets() { # lines of scsi_debug's log (opts=1) saying it did a device reset of the LU
  dmesg | grep -cE "^\[ *[0-9.]+\] sd $PT_HCTL: (scsi_debug_device_reset|doing device reset)"
}

pt_id() { # SG: "vendor|product|serial" from sg_inq
  sg_inq "$1" 2> /dev/null | awk -F: '
    /Vendor identification/ { v = $2 } /Product identification/ { p = $2 }
    /Unit serial number/ { s = $2 }
    END { gsub(/^ +| +$/, "", v); gsub(/^ +| +$/, "", p); gsub(/^ +| +$/, "", s); print v "|" p "|" s }'
}

# 1. scsi_debug: one disk of 64 MiB with 512-byte sectors, quiet (opts=0)
step "pt: scsi_debug as the local SCSI device to pass through"
if [ -d /sys/bus/pseudo/drivers/scsi_debug ]; then rmmod scsi_debug || pt_fail "scsi_debug already loaded and busy"; fi
modprobe scsi_debug dev_size_mb=64 sector_size=512 num_tgts=1 max_luns=1 add_host=1 opts=0 ||
  pt_fail "modprobe scsi_debug"
modprobe sg || pt_fail "modprobe sg"
PT_HCTL= PT_SG= PT_SD= PT_BSGDEV=
i=0
while [ $i -lt 100 ]; do
  for h in /sys/class/scsi_host/host*; do
    [ "$(cat "$h/proc_name" 2> /dev/null)" = scsi_debug ] || continue
    for d in "$h"/device/target*/*:*:*:*; do
      [ -f "$d/vendor" ] || continue
      [ "$(sed 's/ *$//' "$d/vendor")" = Linux ] && [ "$(sed 's/ *$//' "$d/model")" = scsi_debug ] || continue
      PT_HCTL=$(basename "$d")
      PT_SG=$(ls "$d/scsi_generic" 2> /dev/null | head -n 1)
      PT_SD=$(ls "$d/block" 2> /dev/null | head -n 1)
    done
  done
  PT_BSGDEV=/dev/bsg/$PT_HCTL
  [ -n "$PT_HCTL" ] && [ -c "/dev/$PT_SG" ] && [ -b "/dev/$PT_SD" ] && [ -c "$PT_BSGDEV" ] && break
  i=$((i + 1)); sleep 0.2
done
[ -n "$PT_HCTL" ] && [ -c "/dev/$PT_SG" ] && [ -b "/dev/$PT_SD" ] && [ -c "$PT_BSGDEV" ] ||
  pt_fail "no scsi_debug device with sg, sd and bsg nodes (hctl '$PT_HCTL' sg '$PT_SG' sd '$PT_SD')"
PT_LOCAL_ID=$(pt_id "/dev/$PT_SG")
step "pt: scsi_debug $PT_HCTL: /dev/$PT_SG, $PT_BSGDEV, /dev/$PT_SD ($(cat "/sys/block/$PT_SD/size") sectors, queue_depth $(cat "/sys/class/scsi_generic/$PT_SG/device/queue_depth")), id $PT_LOCAL_ID"
[ "$(cat "/sys/block/$PT_SD/size")" = $PT_BLOCKS ] || pt_fail "scsi_debug disk has $(cat "/sys/block/$PT_SD/size") sectors"
case "$PT_LOCAL_ID" in "Linux|scsi_debug|"?*) ;; *) pt_fail "local sg_inq of scsi_debug: $PT_LOCAL_ID" ;; esac
# scsi_debug logs a device reset only with opts=1: prove it on its own sg node first (this
# leaves a POWER ON, RESET unit attention, taken off here before the targets see it)
echo 1 > "$PT_OPTS" || pt_fail "cannot set scsi_debug opts"
n=$(pt_resets)
sg_reset -d "/dev/$PT_SG" || pt_fail "local sg_reset -d /dev/$PT_SG"
echo 0 > "$PT_OPTS"
[ "$(pt_resets)" -gt "$n" ] || pt_fail "a local device reset left no trace in scsi_debug's log"
i=0
until sg_turs "/dev/$PT_SG" > /dev/null 2>&1; do
  i=$((i + 1)); [ $i -le 5 ] || pt_fail "local TEST UNIT READY keeps failing after the reset"
done
step "pt: a local sg_reset -d shows in scsi_debug's log: $(dmesg | grep -E "sd $PT_HCTL: (scsi_debug_device_reset|doing device reset)" | tail -n 1 | sed 's/^\[[^]]*\] //')"

# 2. the two passthrough targets
step "pt: tgtadm --bstype sg --device-type pt -b /dev/$PT_SG (tid $PT_SG_TID)"
tgtadm $C --lld iscsi --op new --mode target --tid $PT_SG_TID -T "$PT_SG_IQN" || pt_fail "tgtadm sg target"
tgtadm $C --lld iscsi --op new --mode logicalunit --tid $PT_SG_TID --lun 1 --bstype sg --device-type pt \
  -b "/dev/$PT_SG" || pt_fail "tgtadm --bstype sg --device-type pt -b /dev/$PT_SG"
tgtadm $C --lld iscsi --op bind --mode target --tid $PT_SG_TID -I ALL || pt_fail "tgtadm sg bind"
# refused as tgtd refuses them (tgtadm: invalid request): sg without pt ("Must set device
# type to pt for bsg/sg bstype"), pt without sg or bsg ("Must set bstype to bsg or sg for
# devicetype pt, not rdwr"), sg over a block device ("Not a character device")
tgtadm $C --lld iscsi --op new --mode logicalunit --tid $PT_SG_TID --lun 2 --bstype sg -b "/dev/$PT_SG" \
  2> /dev/null && pt_fail "tgtadm took --bstype sg without --device-type pt"
tgtadm $C --lld iscsi --op new --mode logicalunit --tid $PT_SG_TID --lun 2 --device-type pt -b "/dev/$PT_SG" \
  2> /dev/null && pt_fail "tgtadm took --device-type pt without --bstype sg or bsg"
tgtadm $C --lld iscsi --op new --mode logicalunit --tid $PT_SG_TID --lun 2 --bstype sg --device-type pt \
  -b "/dev/$PT_SD" 2> /dev/null && pt_fail "tgtadm took --bstype sg over the block device /dev/$PT_SD"
[ -z "$(pt_show_lun $PT_SG_TID 2)" ] || pt_fail "a refused tgtadm left LUN 2 in target $PT_SG_TID"
step "pt: refused: --bstype sg without --device-type pt, pt without sg/bsg, sg over /dev/$PT_SD"
step "pt: tgtadm --bstype bsg --device-type pt -b $PT_BSGDEV (tid $PT_BSG_TID)"
PT_DO_BSG=1
tgtadm $C --lld iscsi --op new --mode target --tid $PT_BSG_TID -T "$PT_BSG_IQN" || pt_fail "tgtadm bsg target"
if ! out=$(tgtadm $C --lld iscsi --op new --mode logicalunit --tid $PT_BSG_TID --lun 1 --bstype bsg \
  --device-type pt -b "$PT_BSGDEV" 2>&1); then
  [ "$TARGET" = tgtd ] || pt_fail "tgtadm --bstype bsg --device-type pt -b $PT_BSGDEV: $out"
  # tgtd 1.0.85 puts the bsg fd in its epoll set: Linux's bsg node has no poll (nor its
  # old read/write interface), epoll_ctl says EPERM and the LUN is refused
  step "pt: NOTE: tgtd cannot export bsg on this kernel: tgtadm: $out; tgtd: $(grep -E 'tgt_event_add|bs_sg_open' "$LOG" | tail -n 2 | tr '\n' ' ')"
  step "pt: NOTE: the bsg half is skipped for TARGET=tgtd"
  tgtadm $C --lld iscsi --op delete --mode target --tid $PT_BSG_TID || pt_fail "tgtadm delete of the bsg target"
  PT_DO_BSG=0
else
  tgtadm $C --lld iscsi --op bind --mode target --tid $PT_BSG_TID -I ALL || pt_fail "tgtadm bsg bind"
fi
for t in $PT_SG_TID $PT_BSG_TID; do
  [ $t = $PT_BSG_TID ] && [ $PT_DO_BSG = 0 ] && continue
  if [ $t = $PT_SG_TID ]; then bs=sg path=/dev/$PT_SG; else bs=bsg path=$PT_BSGDEV; fi
  show=$(pt_show_lun $t)
  echo "$show"
  echo "$show" | grep -qx ' *Type: passthrough' || pt_fail "tgtadm show: tid $t LUN 1 is not Type: passthrough"
  echo "$show" | grep -qx " *Backing store type: $bs" || pt_fail "tgtadm show: tid $t LUN 1 backing store type is not $bs"
  echo "$show" | grep -qx " *Backing store path: $path" || pt_fail "tgtadm show: tid $t LUN 1 backing store path is not $path"
done

# 3. through the initiator
timeout 60 iscsiadm -m discovery -t sendtargets -p "$PORTAL" > /dev/null || pt_fail "discovery"
head -c 4194304 /dev/urandom > "$PT_A" || pt_fail "pattern A"
head -c 4194304 /dev/urandom > "$PT_B" || pt_fail "pattern B"
PT_SG_SD= PT_BSG_SD=
for iqn in $PT_SG_IQN $PT_BSG_IQN; do
  if [ "$iqn" = "$PT_SG_IQN" ]; then kind=sg pat=$PT_A off=8; else kind=bsg pat=$PT_B off=24; fi
  [ $kind = bsg ] && [ $PT_DO_BSG = 0 ] && continue
  timeout 60 iscsiadm -m node -T "$iqn" -p "$PORTAL" --login || pt_fail "$kind: login"
  d= sd= sg=
  i=0
  while [ $i -lt 100 ]; do
    d=$(pt_lun_dir "$iqn")
    if [ -n "$d" ]; then
      sd=$(ls "$d/block" 2> /dev/null | head -n 1)
      sg=$(ls "$d/scsi_generic" 2> /dev/null | head -n 1)
    fi
    [ -n "$sd" ] && [ -b "/dev/$sd" ] && [ -n "$sg" ] && [ -c "/dev/$sg" ] && break
    i=$((i + 1)); sleep 0.2
  done
  [ -n "$sd" ] && [ -b "/dev/$sd" ] && [ -c "/dev/$sg" ] || pt_fail "$kind: no disk for LUN 1 of the session"
  if [ $kind = sg ]; then PT_SG_SD=$sd; else PT_BSG_SD=$sd; fi
  step "pt/$kind: LUN 1 of the session is $(basename "$d"): /dev/$sd, /dev/$sg, SCSI type $(cat "$d/type")"
  # the first command of a new nexus may meet a unit attention
  sg_turs "/dev/$sg" > /dev/null 2>&1
  inq=$(sg_inq "/dev/$sg" 2>&1) || pt_fail "$kind: sg_inq: $inq"
  echo "$inq" | grep -E 'identification|serial number|device type'
  id=$(pt_id "/dev/$sg")
  [ "$id" = "$PT_LOCAL_ID" ] || pt_fail "$kind: sg_inq through the target says '$id', scsi_debug itself '$PT_LOCAL_ID'"
  cap=$(sg_readcap "/dev/$sg" 2>&1) || pt_fail "$kind: sg_readcap: $cap"
  echo "$cap" | sed -n '2,3p'
  echo "$cap" | grep -q "Number of logical blocks=$PT_BLOCKS\$" || pt_fail "$kind: sg_readcap: $cap"
  echo "$cap" | grep -q 'Logical block length=512 bytes' || pt_fail "$kind: sg_readcap block length: $cap"
  [ "$(cat "/sys/block/$sd/size")" = $PT_BLOCKS ] || pt_fail "$kind: /dev/$sd has $(cat "/sys/block/$sd/size") sectors"
  step "pt/$kind: sg_inq and sg_readcap show scsi_debug itself: $id, $PT_BLOCKS blocks of 512 bytes"
  timeout 60 dd if="$pat" of="/dev/$sd" bs=1M seek=$off count=4 oflag=direct status=none || pt_fail "$kind: write at ${off} MiB"
  timeout 60 dd if="/dev/$PT_SD" bs=1M skip=$off count=4 iflag=direct status=none | cmp -s - "$pat" ||
    pt_fail "$kind: scsi_debug's own /dev/$PT_SD does not hold what was written through the target"
  timeout 60 dd if="/dev/$sd" bs=1M skip=$off count=4 iflag=direct status=none | cmp -s - "$pat" ||
    pt_fail "$kind: the 4 MiB written do not read back through the target"
  step "pt/$kind: 4 MiB written at ${off} MiB through the target read back from scsi_debug's /dev/$PT_SD and through the target"
  # LOGICAL UNIT RESET through the target; scsi_debug says so in its log with opts=1
  echo 1 > "$PT_OPTS"
  n=$(pt_resets)
  out=$(timeout 60 sg_reset -d "/dev/$sg" 2>&1) || pt_fail "$kind: sg_reset -d /dev/$sg: $out"
  i=0
  while [ "$(pt_resets)" -le "$n" ] && [ $i -lt 10 ]; do i=$((i + 1)); sleep 0.2; done
  echo 0 > "$PT_OPTS"
  reached=$(($(pt_resets) - n))
  # (a reset scsi_debug leaves a POWER ON, RESET unit attention for the next command)
  tur=$(sg_turs "/dev/$sg" 2>&1 | grep -iE 'sense key|additional sense' | tr '\n' ' ' | sed 's/  */ /g')
  step "pt/$kind: sg_reset -d done; scsi_debug device resets seen: $reached; next TEST UNIT READY: ${tur:-GOOD}"
  if [ "$reached" -lt 1 ]; then
    [ "$PT_RESET_MUST_REACH" = 1 ] && pt_fail "$kind: the LOGICAL UNIT RESET did not reach scsi_debug"
    step "pt/$kind: NOTE: the LOGICAL UNIT RESET was not passed on to scsi_debug (TARGET=$TARGET)"
  fi
  timeout 60 dd if="/dev/$sd" bs=1M skip=$off count=4 iflag=direct status=none | cmp -s - "$pat" ||
    pt_fail "$kind: after the reset the LU does not read the same"
  sg_turs "/dev/$sg" > /dev/null 2>&1 || sg_turs "/dev/$sg" > /dev/null 2>&1 || pt_fail "$kind: TEST UNIT READY fails after the reset"
  step "pt/$kind: after the reset the LU reads the same"
done
if [ $PT_DO_BSG = 1 ]; then
  # both targets pass through to the same device: each reads what the other wrote
  timeout 60 dd if="/dev/$PT_BSG_SD" bs=1M skip=8 count=4 iflag=direct status=none | cmp -s - "$PT_A" ||
    pt_fail "the bsg target does not read what was written through the sg target"
  timeout 60 dd if="/dev/$PT_SG_SD" bs=1M skip=24 count=4 iflag=direct status=none | cmp -s - "$PT_B" ||
    pt_fail "the sg target does not read what was written through the bsg target"
  step "pt: each target reads what was written through the other"
fi
if [ "$TARGET" = numatgtd ]; then
  # a live upgrade with the passthrough sessions logged in (issue 29): they move to the new
  # executable with what the target keeps for each LU (unit attentions, reservations): the
  # first TEST UNIT READY after it is GOOD, and the data reads the same
  ADM=$(dirname "$NUMATGTD")/numatgtadm
  out=$(timeout 120 "$ADM" $C --upgrade 2>&1) || pt_fail "numatgtadm --upgrade: $out"
  echo "$out" | grep -q 'upgraded: numatgtd pid' || pt_fail "numatgtadm --upgrade: $out"
  for sd in $PT_SG_SD $PT_BSG_SD; do
    tur=$(sg_turs "/dev/$sd" 2>&1) || pt_fail "the first TEST UNIT READY of /dev/$sd after the upgrade: $tur"
  done
  timeout 60 dd if="/dev/$PT_SG_SD" bs=1M skip=8 count=4 iflag=direct status=none | cmp -s - "$PT_A" ||
    pt_fail "after the upgrade the sg target does not read the same"
  step "pt: live upgrade ($(echo "$out" | grep -o '[0-9]* connections moved')): TEST UNIT READY GOOD at once, the data the same"
fi

# 4. logout, targets deleted, scsi_debug unloaded
timeout 60 iscsiadm -m node -T "$PT_SG_IQN" -p "$PORTAL" --logout || pt_fail "sg: logout"
if [ $PT_DO_BSG = 1 ]; then
  timeout 60 iscsiadm -m node -T "$PT_BSG_IQN" -p "$PORTAL" --logout || pt_fail "bsg: logout"
fi
tgtadm $C --lld iscsi --op delete --mode target --tid $PT_SG_TID || pt_fail "tgtadm delete of the sg target"
if [ $PT_DO_BSG = 1 ]; then
  tgtadm $C --lld iscsi --op delete --mode target --tid $PT_BSG_TID || pt_fail "tgtadm delete of the bsg target"
fi
tgtadm $C --lld iscsi --op show --mode target | grep -E "^Target ($PT_SG_TID|$PT_BSG_TID):" &&
  pt_fail "a passthrough target is still there after its delete"

# 5. the same device from a targets.conf through Debian's tgt-admin -e (bs-type sg,
# device-type pt); logged in, it is scsi_debug again; then deleted
cat > /tmp/vm-pt.conf << EOF
<target $PT_CONF_IQN>
    <backing-store /dev/$PT_SG>
        lun 1
        bs-type sg
        device-type pt
    </backing-store>
</target>
EOF
tgt-admin -C "$TC" -e -c /tmp/vm-pt.conf || pt_fail "tgt-admin -e of a passthrough targets.conf"
t=$(tgtadm $C --lld iscsi --op show --mode target | sed -n "s/^Target \([0-9]*\): $PT_CONF_IQN\$/\1/p")
[ -n "$t" ] || pt_fail "tgt-admin -e made no target $PT_CONF_IQN"
pt_show_lun "$t" | grep -qx ' *Type: passthrough' || pt_fail "tgt-admin -e: LUN 1 of tid $t is not passthrough"
timeout 60 iscsiadm -m discovery -t sendtargets -p "$PORTAL" > /dev/null || pt_fail "discovery"
timeout 60 iscsiadm -m node -T "$PT_CONF_IQN" -p "$PORTAL" --login || pt_fail "tgt-admin target: login"
sg= i=0
while [ $i -lt 100 ]; do
  d=$(pt_lun_dir "$PT_CONF_IQN")
  [ -n "$d" ] && sg=$(ls "$d/scsi_generic" 2> /dev/null | head -n 1)
  [ -n "$sg" ] && [ -c "/dev/$sg" ] && break
  i=$((i + 1)); sleep 0.2
done
[ -n "$sg" ] || pt_fail "tgt-admin target: no sg node for LUN 1"
sg_turs "/dev/$sg" > /dev/null 2>&1
[ "$(pt_id "/dev/$sg")" = "$PT_LOCAL_ID" ] || pt_fail "tgt-admin target: sg_inq says '$(pt_id "/dev/$sg")'"
timeout 60 iscsiadm -m node -T "$PT_CONF_IQN" -p "$PORTAL" --logout || pt_fail "tgt-admin target: logout"
tgtadm $C --lld iscsi --op delete --mode target --tid "$t" || pt_fail "tgtadm delete of the tgt-admin target"
step "pt: a targets.conf with bs-type sg, device-type pt, loaded by tgt-admin -e (tid $t), serves scsi_debug"
i=0
until rmmod scsi_debug 2> /dev/null; do
  i=$((i + 1)); [ $i -le 25 ] || pt_fail "rmmod scsi_debug: still in use after the targets were deleted"; sleep 0.2
done
step "pt: logged out, targets $PT_SG_TID and $PT_BSG_TID deleted, scsi_debug unloaded"
