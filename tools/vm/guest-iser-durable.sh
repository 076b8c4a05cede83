# Guest step of the iSER test (sourced by guest-iser.sh, numatgtd only): WRITE data that is
# not a write-back also lands in registered cache slots and goes to the backing file from
# there. A target of its own (tid 4) with two LUNs from tgtadm --lld iser: LUN 1 cached
# (the default), LUN 2 `--bsopts cache=off`. The kernel initiator over iSER writes 8 MiB of
# random data with bs=1M O_DIRECT to each:
#   - to LUN 2 plainly: an uncached LUN's write is in the backing file before its status;
#   - to LUN 1 with O_DSYNC: the block layer sends WRITEs with FUA (DPOFUA is set), which
#     must be in the backing file before their status and leave no dirty cache bytes;
# checked at once after dd returns (no SYNCHRONIZE CACHE, no logout in between), and the
# iSER WRITE data counters must show the data went by RDMA READ into the slots
# (numatgt_iser_data_bytes_total{direction="out",path="direct"}), almost none of it
# through staging chunks. Both LUNs are then read back over iSER.
# Uses from guest-iser.sh: IP, ISER_PORTAL, IFACE, C, TPID, fail, step, adm, ensure_node,
# iser_data.

DU_IQN=iqn.2026-11.org.numatgt:vmiser-durable
DU_CACHED=/tmp/vm-iser-durable-cached.img
DU_OFF=/tmp/vm-iser-durable-off.img
DU_SRC=/tmp/vm-iser-durable-src
DU_MB=8

# dirty bytes in numatgtd's cache now, all nodes (numatgt_cache_bytes{...state="dirty"})
du_dirty() {
  timeout 10 curl -sf http://127.0.0.1:9470/metrics |
    awk '/^numatgt_cache_bytes\{/ && /state="dirty"/ { s += $2; f = 1 } END { if (f) printf "%d\n", s; else print "-" }'
}
# du_disk LUN: the block device of this target's LUN (its iSCSI session only)
du_disk() {
  for b in /sys/class/iscsi_session/session*/device/target*/*:0:0:"$1"/block/*; do
    [ -e "$b" ] || continue
    s=$(cd "${b%%/device/*}" && basename "$PWD")
    grep -qx "$DU_IQN" "/sys/class/iscsi_session/$s/targetname" 2>/dev/null && basename "$b"
  done
}
du_sha() { head -c $((DU_MB << 20)) "$1" | sha256sum | cut -d' ' -f1; }

step "durable and uncached writes over iSER: target $DU_IQN (tid 4), LUN 1 cached, LUN 2 cache=off"
truncate -s 32M "$DU_CACHED" "$DU_OFF" || fail "create the durable step's LUN files"
head -c $((DU_MB << 20)) /dev/urandom > "$DU_SRC" || fail "random source data"
SRC_SHA=$(du_sha "$DU_SRC")
adm --lld iser --op new --mode target --tid 4 -T "$DU_IQN"
adm --lld iser --op new --mode logicalunit --tid 4 --lun 1 -b "$DU_CACHED"
adm --lld iser --op new --mode logicalunit --tid 4 --lun 2 -b "$DU_OFF" --bsopts cache=off
adm --lld iser --op bind --mode target --tid 4 -I ALL
timeout 60 iscsiadm -m discovery -t sendtargets -p "$ISER_PORTAL" -I "$IFACE" > /dev/null 2>&1 ||
  echo "(discovery over iSER failed)"
ensure_node "$DU_IQN" "$ISER_PORTAL" "$IFACE"
timeout 90 iscsiadm -m node -T "$DU_IQN" -p "$ISER_PORTAL" -I "$IFACE" --login || fail "login to $DU_IQN over iSER"
D1= D2= i=0
while [ -z "$D1" ] || [ -z "$D2" ] || [ ! -b "/dev/$D1" ] || [ ! -b "/dev/$D2" ]; do
  i=$((i + 1))
  [ $i -le 100 ] || fail "no block devices for LUNs 1 and 2 of $DU_IQN ('$D1' '$D2')"
  sleep 0.2
  D1=$(du_disk 1) D2=$(du_disk 2)
done
grep -q 'write back' "/sys/block/$D1/device/scsi_disk/"*/cache_type ||
  fail "LUN 1 of $DU_IQN: cache_type $(cat /sys/block/"$D1"/device/scsi_disk/*/cache_type), want write back"
[ "$(cat "/sys/block/$D1/queue/fua")" = 1 ] || fail "LUN 1 of $DU_IQN: the kernel sends no FUA (queue/fua 0)"
step "LUN 1 /dev/$D1 (write back, FUA), LUN 2 /dev/$D2 (cache=off)"

wd0=$(iser_data out direct) ws0=$(iser_data out staged) dirty0=$(du_dirty)
# LUN 2, uncached: in the file when the write's status came
timeout 120 dd if="$DU_SRC" of="/dev/$D2" bs=1M oflag=direct status=none || fail "write to the cache=off LUN"
[ "$(du_sha "$DU_OFF")" = "$SRC_SHA" ] || fail "the cache=off LUN's file lacks the data its WRITEs acknowledged"
# LUN 1, FUA writes: in the file at once, nothing left dirty in the cache
timeout 120 dd if="$DU_SRC" of="/dev/$D1" bs=1M oflag=direct,dsync status=none || fail "FUA writes to the cached LUN"
dirty1=$(du_dirty)
[ "$(du_sha "$DU_CACHED")" = "$SRC_SHA" ] || fail "the cached LUN's file lacks the data its FUA WRITEs acknowledged"
case "$dirty0$dirty1" in *-*) fail "metrics: no numatgt_cache_bytes{state=\"dirty\"}" ;; esac
[ "$dirty1" -le "$dirty0" ] || fail "FUA writes left dirty bytes in the cache ($dirty0 before, $dirty1 after)"
step "acknowledged writes are in the backing files at once: cache=off, and FUA (dirty bytes $dirty0 -> $dirty1)"
# the counters move once a second per connection
sleep 2.5
wd1=$(iser_data out direct) ws1=$(iser_data out staged)
case "$wd0$ws0$wd1$ws1" in *-*) fail "metrics: no numatgt_iser_data_bytes_total{direction=\"out\",...}" ;; esac
landed=$((wd1 - wd0)) wstaged=$((ws1 - ws0))
step "iSER WRITE data of the durable and uncached writes: $landed bytes landed in cache slots, $wstaged through staging chunks"
# 2 x DU_MB MiB, less each command's immediate data (8 KiB per command of 512 KiB or more)
[ "$landed" -ge $(((2 * DU_MB - 1) << 20)) ] ||
  fail "fewer than $((2 * DU_MB - 1)) MiB of durable and uncached WRITE data landed in cache slots ($landed)"
[ "$wstaged" -le $((landed / 16)) ] || fail "durable and uncached WRITE data through staging chunks ($wstaged bytes) above 1/16 of the landed bytes ($landed)"
for d in "$D1" "$D2"; do
  got=$(timeout 60 dd if="/dev/$d" bs=1M count=$DU_MB iflag=direct status=none | sha256sum | cut -d' ' -f1)
  [ "$got" = "$SRC_SHA" ] || fail "/dev/$d reads back $got over iSER, want $SRC_SHA"
done
step "both LUNs read back over iSER what was written"
timeout 60 iscsiadm -m node -T "$DU_IQN" -p "$ISER_PORTAL" -I "$IFACE" --logout || fail "logout from $DU_IQN"
iscsiadm -m node -T "$DU_IQN" -o delete > /dev/null 2>&1
adm --lld iser --op delete --mode target --tid 4 --force
rm -f "$DU_CACHED" "$DU_OFF" "$DU_SRC"
