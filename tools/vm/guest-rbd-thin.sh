# Allocation of an RBD LUN as the guest kernel's initiator sees it (issue 25). Sourced by
# guest-multipath.sh (MPATH_BACKEND=rbd) after its gateways have stopped, while its Ceph
# cluster is still up; uses its CEPH_DIR, NUMATGTD, C2, fail and now, and guest-lib.sh;
# sets THIN_PID, THIN_IQN (its fail logs out and kills them) and THIN_RESULT.
#   - a third numatgtd, started as tgtd on 127.0.0.3:3260, gets a 64 MiB image rbd/thin as
#     LUN 1 of a target of its own from Debian's tgtadm (--bstype rbd, cache=off), then
#     --params thin_provisioning=1, before the guest logs in (multipathd has stopped: the
#     disk is a plain /dev/sdX);
#   - dd oflag=direct writes 4 MiB at 0, 64 KiB at 40 MiB and 4 KiB at 50 MiB;
#   - the mapped extents of sg_get_lba_status (GET LBA STATUS, whole LUN, descriptors
#     without gaps) must be those of `rbd diff` (bytes turned into LBAs, neighbours merged),
#     and cover what was written;
#   - blkdiscard of the first 4 MiB (one object; UNMAP, as librbd aio write_zeroes): the
#     same comparison; the first 4 MiB deallocated in both, read back as zeros, the other
#     data unchanged;
#   - logout, the LUN and target deleted with tgtadm (the image closed: no watcher left),
#     numatgtd stopped (exit 0), the image removed.
THIN_IQN=iqn.2026-11.org.numatgt:vmthin
THIN_P=127.0.0.3:3260
THIN_C=$((C2 + 1))
THIN_IMAGE=thin
THIN_MB=64
THIN_DIR=/tmp/thin
THIN_PID=
THIN_DEV=
THIN_BS=512
THIN_LBAS=0
THIN_RESULT=

# stdin "LBA BLOCKS" lines, sorted: the same extents with neighbours merged
thin_merge() {
  awk 'n && s + l == $1 { l += $2; next } { if (n) print s, l; s = $1; l = $2; n = 1 } END { if (n) print s, l }'
}

# the mapped extents of rbd/thin by `rbd diff` in LBAs, merged, into FILE (and its output
# into FILE.raw)
thin_rbd_diff() { # FILE
  timeout 60 rbd -c "$CEPH_DIR/ceph.conf" diff "rbd/$THIN_IMAGE" > "$1.raw" \
    || fail "rbd thin: rbd diff rbd/$THIN_IMAGE"
  awk -v bs="$THIN_BS" '$3 == "data" { if ($1 % bs || $2 % bs) exit 1; print $1 / bs, $2 / bs }' \
    "$1.raw" > "$1.lbas" || fail "rbd thin: rbd diff lists an extent of part of a block: $(cat "$1.raw")"
  thin_merge < "$1.lbas" > "$1"
}

# GET LBA STATUS of the whole LUN through /dev/$THIN_DEV (from LBA 0, again from the first
# LBA not yet described, at most 16 commands): the mapped extents in LBAs, merged, into
# FILE (and sg_get_lba_status's output into FILE.raw); fails unless the descriptors describe
# every LBA in order
thin_lba_status() { # FILE
  : > "$1.raw"
  : > "$1.all"
  next=0 k=0
  while [ "$next" -lt "$THIN_LBAS" ]; do
    k=$((k + 1))
    [ $k -le 16 ] || fail "rbd thin: GET LBA STATUS described only LBAs 0-$((next - 1)) of $THIN_LBAS in 16 commands"
    out=$(sg_get_lba_status --brief --maxlen=4096 --lba="$next" "/dev/$THIN_DEV" 2>&1) \
      || fail "rbd thin: sg_get_lba_status --lba=$next /dev/$THIN_DEV: $out"
    echo "$out" >> "$1.raw"
    # --brief: "0x<LBA> 0x<blocks> <provisioning status> <additional status>" per descriptor
    n=0
    for l in $(echo "$out" | awk 'NF >= 3 && $1 ~ /^0x/ { print $1 ":" $2 ":" $3 }'); do
      lba=$(( ${l%%:*} )) rest=${l#*:}
      blocks=$(( ${rest%%:*} )) st=${rest#*:}
      [ "$lba" = "$next" ] || fail "rbd thin: GET LBA STATUS descriptor at LBA $lba, want $next: $out"
      [ "$blocks" -gt 0 ] || fail "rbd thin: GET LBA STATUS descriptor of 0 blocks: $out"
      echo "$lba $blocks $st" >> "$1.all"
      next=$((lba + blocks)) n=$((n + 1))
    done
    [ $n -gt 0 ] || fail "rbd thin: no LBA status descriptor from LBA $next: $out"
  done
  [ "$next" = "$THIN_LBAS" ] || fail "rbd thin: GET LBA STATUS described LBAs up to $next, the LUN has $THIN_LBAS"
  # 0 mapped, 1 deallocated; nothing else from an RBD LUN
  awk '$3 != 0 && $3 != 1 { exit 1 }' "$1.all" \
    || fail "rbd thin: provisioning status other than mapped or deallocated: $(cat "$1.raw")"
  awk '$3 == 0 { print $1, $2 }' "$1.all" | thin_merge > "$1"
}

# whether extents FILE cover LBAs [LBA, LBA + N) (exit 0) or not
thin_covers() { # FILE LBA N
  awk -v a="$2" -v n="$3" '$1 <= a && a + n <= $1 + $2 { f = 1 } END { exit !f }' "$1"
}

# whether extents FILE overlap LBAs [LBA, LBA + N) at all
thin_overlaps() { # FILE LBA N
  awk -v a="$2" -v n="$3" '$1 < a + n && a < $1 + $2 { f = 1 } END { exit !f }' "$1"
}

# one line of extents FILE: "LBA+BLOCKS ..."
thin_show() { # FILE
  awk '{ printf "%s%s+%s", (NR > 1 ? " " : ""), $1, $2 }' "$1"
}

# GET LBA STATUS against rbd diff, as WHEN
thin_compare() { # WHEN
  thin_rbd_diff "$THIN_DIR/want"
  thin_lba_status "$THIN_DIR/got"
  echo "---- rbd diff rbd/$THIN_IMAGE ($1) ----"
  cat "$THIN_DIR/want.raw"
  echo "---- sg_get_lba_status --brief /dev/$THIN_DEV ($1) ----"
  cat "$THIN_DIR/got.raw"
  step "$1: mapped extents (LBA+blocks) by rbd diff: $(thin_show "$THIN_DIR/want"); by GET LBA STATUS: $(thin_show "$THIN_DIR/got")"
  cmp -s "$THIN_DIR/want" "$THIN_DIR/got" \
    || fail "$1: GET LBA STATUS maps '$(thin_show "$THIN_DIR/got")', rbd diff '$(thin_show "$THIN_DIR/want")'"
}

# `rbd du` of the image, for the log
thin_du() { # WHEN
  step "$1: rbd du: $(timeout 60 rbd -c "$CEPH_DIR/ceph.conf" du "rbd/$THIN_IMAGE" 2>&1 | tail -n 1)"
}

# the 4 MiB at 0, 64 KiB at 40 MiB and 4 KiB at 50 MiB in LBAs
thin_ranges() {
  echo "0 $((4194304 / THIN_BS)) $((41943040 / THIN_BS)) $((65536 / THIN_BS)) $((52428800 / THIN_BS)) $((4096 / THIN_BS))"
}

# tgtadm on the thin LUN's numatgtd
thin_tgtadm() {
  tgtadm -C "$THIN_C" --lld iscsi "$@"
}

# the librbd aio write_zeroes numatgtd made so far (its metrics)
thin_zero_ops() {
  curl -s --max-time 5 "http://${THIN_P%:*}:9470/metrics" \
    | awk '/^numatgt_lun_rbd_op_async_total\{/ && /op="zero"/ { n += $NF } END { print n + 0 }'
}

rbd_thin_check() {
  t0=$(now)
  mkdir -p "$THIN_DIR"
  timeout 60 rbd -c "$CEPH_DIR/ceph.conf" create --size "${THIN_MB}M" "rbd/$THIN_IMAGE" \
    || fail "rbd thin: rbd create rbd/$THIN_IMAGE"
  "$NUMATGTD" -f -C "$THIN_C" --iscsi portal="$THIN_P" --state-dir "$THIN_DIR/state" \
    --metrics "${THIN_P%:*}:9470" >> /tmp/thin.log 2>&1 &
  THIN_PID=$!
  wait_listen "$THIN_PID" "$THIN_P"
  thin_tgtadm --op new --mode target --tid 1 -T "$THIN_IQN" || fail "rbd thin: tgtadm new target"
  thin_tgtadm --op new --mode logicalunit --tid 1 --lun 1 --bstype rbd --backing-store "rbd/$THIN_IMAGE" \
    --bsopts "conf=$CEPH_DIR/ceph.conf;id=admin;cache=off" || fail "rbd thin: tgtadm new logicalunit --bstype rbd"
  thin_tgtadm --op update --mode logicalunit --tid 1 --lun 1 --params thin_provisioning=1 \
    || fail "rbd thin: tgtadm --params thin_provisioning=1"
  thin_tgtadm --op bind --mode target --tid 1 -I ALL || fail "rbd thin: tgtadm bind"
  step "rbd thin: numatgtd (pid $THIN_PID) on $THIN_P serves rbd/$THIN_IMAGE (${THIN_MB} MiB, cache=off, thin_provisioning=1) as LUN 1 of $THIN_IQN"
  timeout 60 iscsiadm -m discovery -t sendtargets -p "$THIN_P" >/dev/null || fail "rbd thin: discovery on $THIN_P"
  timeout 60 iscsiadm -m node -T "$THIN_IQN" -p "$THIN_P" --login >/dev/null || fail "rbd thin: login"
  i=0
  while [ -z "$THIN_DEV" ]; do
    for s in /sys/class/iscsi_session/session*; do
      [ "$(cat "$s/targetname" 2>/dev/null)" = "$THIN_IQN" ] || continue
      d=$(ls "$s"/device/target*/*/block 2>/dev/null | head -n 1)
      [ -n "$d" ] && [ -b "/dev/$d" ] && THIN_DEV=$d
    done
    i=$((i + 1)); [ -n "$THIN_DEV" ] || [ $i -le 100 ] || fail "rbd thin: no disk for $THIN_IQN 20 s after the login"
    [ -n "$THIN_DEV" ] || sleep 0.2
  done
  timeout 30 udevadm settle || true
  THIN_BS=$(blockdev --getss "/dev/$THIN_DEV")
  THIN_LBAS=$(( $(blockdev --getsize64 "/dev/$THIN_DEV") / THIN_BS ))
  q=/sys/block/$THIN_DEV/queue
  step "rbd thin: /dev/$THIN_DEV, $THIN_LBAS blocks of $THIN_BS bytes, provisioning_mode $(cat /sys/block/"$THIN_DEV"/device/scsi_disk/*/provisioning_mode), discard_max_bytes $(cat $q/discard_max_bytes), discard_granularity $(cat $q/discard_granularity)"
  [ "$THIN_LBAS" = $((THIN_MB * 1048576 / THIN_BS)) ] || fail "rbd thin: /dev/$THIN_DEV has $THIN_LBAS blocks, want ${THIN_MB} MiB"
  [ "$(cat $q/discard_max_bytes)" -ge 4194304 ] || fail "rbd thin: the kernel does not discard 4 MiB at once on /dev/$THIN_DEV (not thin?)"

  # a fresh image: nothing mapped
  thin_compare "rbd thin: fresh image"
  [ -s "$THIN_DIR/got" ] && fail "rbd thin: a fresh image has mapped extents: $(thin_show "$THIN_DIR/got")"
  head -c 4194304 /dev/urandom > "$THIN_DIR/data"
  dd if="$THIN_DIR/data" of="/dev/$THIN_DEV" bs=1M count=4 oflag=direct status=none || fail "rbd thin: dd 4 MiB at 0"
  dd if="$THIN_DIR/data" of="/dev/$THIN_DEV" bs=64k count=1 seek=640 oflag=direct status=none || fail "rbd thin: dd 64 KiB at 40 MiB"
  dd if="$THIN_DIR/data" of="/dev/$THIN_DEV" bs=4k count=1 seek=12800 oflag=direct status=none || fail "rbd thin: dd 4 KiB at 50 MiB"
  thin_compare "rbd thin: after the writes"
  thin_du "rbd thin: after the writes"
  set -- $(thin_ranges)
  while [ $# -ge 2 ]; do
    thin_covers "$THIN_DIR/got" "$1" "$2" || fail "rbd thin: written LBAs $1+$2 not mapped: $(thin_show "$THIN_DIR/got")"
    shift 2
  done
  n_written=$(wc -l < "$THIN_DIR/got")

  # UNMAP of the first object
  z0=$(thin_zero_ops)
  blkdiscard -o 0 -l 4194304 "/dev/$THIN_DEV" || fail "rbd thin: blkdiscard of the first 4 MiB"
  z1=$(thin_zero_ops)
  step "rbd thin: blkdiscard -o 0 -l 4194304: $((z1 - z0)) librbd aio write_zeroes"
  [ $((z1 - z0)) -ge 1 ] || fail "rbd thin: the discard made no librbd aio write_zeroes (numatgt_lun_rbd_op_async_total{op=\"zero\"} $z0 -> $z1)"
  thin_compare "rbd thin: after the UNMAP"
  thin_du "rbd thin: after the UNMAP"
  thin_overlaps "$THIN_DIR/got" 0 $((4194304 / THIN_BS)) \
    && fail "rbd thin: the first 4 MiB still mapped after the UNMAP: $(thin_show "$THIN_DIR/got")"
  set -- $(thin_ranges)
  shift 2
  while [ $# -ge 2 ]; do
    thin_covers "$THIN_DIR/got" "$1" "$2" || fail "rbd thin: LBAs $1+$2 no longer mapped after the UNMAP of 0-4 MiB: $(thin_show "$THIN_DIR/got")"
    shift 2
  done
  nz=$(dd if="/dev/$THIN_DEV" bs=1M count=4 iflag=direct status=none | tr -d '\000' | wc -c)
  [ "$nz" = 0 ] || fail "rbd thin: $nz non-zero bytes in the first 4 MiB after the UNMAP"
  [ "$(dd if="/dev/$THIN_DEV" bs=64k count=1 skip=640 iflag=direct status=none | sha256sum)" \
    = "$(head -c 65536 "$THIN_DIR/data" | sha256sum)" ] || fail "rbd thin: the 64 KiB at 40 MiB changed"
  [ "$(dd if="/dev/$THIN_DEV" bs=4k count=1 skip=12800 iflag=direct status=none | sha256sum)" \
    = "$(head -c 4096 "$THIN_DIR/data" | sha256sum)" ] || fail "rbd thin: the 4 KiB at 50 MiB changed"
  step "rbd thin: the first 4 MiB read back as zeros, the data at 40 and 50 MiB unchanged"
  n_unmapped=$(wc -l < "$THIN_DIR/got")

  timeout 60 iscsiadm -m node -T "$THIN_IQN" -p "$THIN_P" --logout >/dev/null || fail "rbd thin: logout"
  timeout 30 iscsiadm -m node -T "$THIN_IQN" -p "$THIN_P" -o delete >/dev/null 2>&1
  thin_tgtadm --op delete --mode logicalunit --tid 1 --lun 1 || fail "rbd thin: tgtadm delete logicalunit"
  thin_tgtadm --op delete --mode target --tid 1 || fail "rbd thin: tgtadm delete target"
  # the LUN's deletion closed the image: no watch, no exclusive lock left (numatgtd's SIGTERM
  # leaves both to the OSD's 30 s watch timeout, and rbd rm waits for it)
  w=$(timeout 60 rbd -c "$CEPH_DIR/ceph.conf" status "rbd/$THIN_IMAGE" 2>&1)
  case "$w" in *"Watchers: none"*) ;; *) fail "rbd thin: rbd/$THIN_IMAGE still watched after tgtadm deleted its LUN: $w" ;; esac
  step "rbd thin: logged out, LUN and target deleted, no watcher left on rbd/$THIN_IMAGE"
  stop_pid "$THIN_PID" 20
  THIN_PID=
  [ "$TRC" = 0 ] || fail "rbd thin: numatgtd exited with status $TRC after SIGTERM"
  timeout 60 rbd -c "$CEPH_DIR/ceph.conf" rm --no-progress "rbd/$THIN_IMAGE" >/dev/null \
    || fail "rbd thin: rbd rm rbd/$THIN_IMAGE"
  THIN_RESULT="lba_status=rbd_diff($n_written extents after the writes, $n_unmapped after the UNMAP)"
  step "rbd thin: GET LBA STATUS matched rbd diff before and after the UNMAP, in $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s"
}
