# iSER under dm-multipath, one numatgtd, two portals (issue 24): sourced by guest-iser.sh
# (numatgtd only, after the scale step; it provides IP, ND, IQN, IFACE, ISER_PORTAL, C,
# TPID, LOG and the helpers step, fail, adm, login, logout, qps, wait_for). Steps:
#   - a second address MP_IP2 on the soft-RoCE netdev and an iSER portal on it added at run
#     time (tgtadm --lld iser --op new --mode portal): one target, one LUN, two portals;
#   - the kernel initiator logs in through both (iface iser0), udevd and multipathd build
#     one map with both paths active in one path group (one target port group:
#     round-robin over the two iSER connections);
#   - MP_MB MiB of random data written O_DIRECT through /dev/mapper/<wwid>, read back and
#     compared; both paths' disks must have carried I/O (what the region held before is
#     saved first and written back at the end, checked);
#   - the second portal's session logged out under running O_DIRECT reads of the map: the
#     reads finish through the first path with the same bytes and multipath shows one path;
#   - the map flushed, multipathd and udevd stopped by PID, the session logged out, the
#     portal deleted (its RDMA CM listener gone), the address removed, no queue pair left.
# Knobs: MP_MB (32), MP_IP2 (192.168.77.2).

MP_MB=${MP_MB:-32}
MP_IP2=${MP_IP2:-192.168.77.2}
MP_PORTAL2=$MP_IP2:3260
MP_UDEV=
MP_MPATHD=
mp_stop() { # stop what this step started, by PID
  [ -n "$MP_MPATHD" ] && { kill "$MP_MPATHD" 2>/dev/null; wait "$MP_MPATHD" 2>/dev/null; MP_MPATHD=; }
  [ -n "$MP_UDEV" ] && { kill "$MP_UDEV" 2>/dev/null; wait "$MP_UDEV" 2>/dev/null; MP_UDEV=; }
}
mp_fail() {
  multipath -ll 2>&1 | head -n 20
  tail -n 20 /tmp/mp-multipathd.log 2>/dev/null
  mp_stop
  fail "$*"
}
# the block devices of the sessions to IQN (one per session)
mp_disks() {
  for s in /sys/class/iscsi_session/session*; do
    [ "$(cat "$s/targetname" 2>/dev/null)" = "$IQN" ] || continue
    for d in "$s"/device/target*/*/block/*; do [ -e "$d" ] && basename "$d"; done
  done
}
mp_ios() { awk '{ print $1 + $5 }' "/sys/block/$1/stat"; }

step "iSER multipath: a second portal $MP_PORTAL2 on the same device, dm-multipath over both"
for t in multipath multipathd dmsetup; do
  command -v "$t" >/dev/null || fail "$t missing (tools/install-test-deps.sh installs multipath-tools)"
done
modprobe -a dm_mod dm_multipath dm_round_robin dm_service_time || fail "modprobe dm_multipath"
ip addr add "$MP_IP2/24" dev "$ND" || fail "ip addr add $MP_IP2"
adm --lld iser --op new --mode portal --param portal=$MP_PORTAL2
wait_for 10 "an RDMA CM listener on $MP_PORTAL2" sh -c "timeout 5 rdma resource show cm_id | grep LISTEN | grep -q '$MP_IP2:3260'"

mkdir -p /etc/multipath
cat > /etc/multipath.conf <<'EOF'
defaults {
    user_friendly_names no
    find_multipaths     no
    polling_interval    2
}
blacklist {
    device {
        vendor  ".*"
        product ".*"
    }
}
blacklist_exceptions {
    device {
        vendor  "NUMATGT"
    }
}
devices {
    device {
        vendor               "NUMATGT"
        product              ".*"
        path_grouping_policy multibus
        path_selector        "round-robin 0"
        rr_min_io_rq         1
        no_path_retry        fail
    }
}
EOF
/lib/systemd/systemd-udevd > /tmp/mp-udevd.log 2>&1 &
MP_UDEV=$!
sleep 0.5
kill -0 "$MP_UDEV" 2>/dev/null || mp_fail "systemd-udevd exited: $(tail -n 3 /tmp/mp-udevd.log)"

login "$IQN" "$ISER_PORTAL" "$IFACE" iser
ensure_node "$IQN" "$MP_PORTAL2" "$IFACE"
timeout 90 iscsiadm -m node -T "$IQN" -p "$MP_PORTAL2" -I "$IFACE" --login >/dev/null ||
  mp_fail "login to $IQN at $MP_PORTAL2 via $IFACE"
timeout 20 udevadm settle || true
set -- $(mp_disks)
[ $# = 2 ] || mp_fail "want 2 disks of $IQN (one per portal), have: $*"
MP_D1=$1 MP_D2=$2
multipathd -d -s > /tmp/mp-multipathd.log 2>&1 &
MP_MPATHD=$!
i=0
while :; do
  MAP=$(multipath -l -v1 2>/dev/null | head -n 1)
  [ -n "$MAP" ] && [ "$(multipath -ll "$MAP" 2>/dev/null | grep -c 'active ready running')" = 2 ] && break
  i=$((i + 1))
  [ $i -le 100 ] || mp_fail "multipathd made no map with two active paths in 20 s"
  kill -0 "$MP_MPATHD" 2>/dev/null || mp_fail "multipathd exited"
  sleep 0.2
done
timeout 10 udevadm settle || true
multipath -ll "$MAP"
[ -b "/dev/mapper/$MAP" ] || mp_fail "/dev/mapper/$MAP missing"
step "map $MAP over /dev/$MP_D1 ($ISER_PORTAL) and /dev/$MP_D2 ($MP_PORTAL2), both active"

# the region written here is put back at the end (the later steps compare the LUN's first
# DATA_MB MiB with what they read before)
timeout 180 dd if="/dev/mapper/$MAP" of=/tmp/mp-orig bs=256k count=$((MP_MB * 4)) iflag=direct status=none ||
  mp_fail "O_DIRECT read of the first $MP_MB MiB through the map"
orig=$(sha256sum < /tmp/mp-orig | cut -c1-64)
a1=$(mp_ios "$MP_D1") a2=$(mp_ios "$MP_D2")
timeout 60 head -c "${MP_MB}M" /dev/urandom > /tmp/mp-data || mp_fail "random data"
want=$(sha256sum < /tmp/mp-data | cut -c1-64)
timeout 180 dd if=/tmp/mp-data of="/dev/mapper/$MAP" bs=256k oflag=direct conv=fsync status=none ||
  mp_fail "O_DIRECT write of $MP_MB MiB through the map"
got=$(timeout 180 dd if="/dev/mapper/$MAP" bs=256k count=$((MP_MB * 4)) iflag=direct status=none | sha256sum | cut -c1-64)
[ "$got" = "$want" ] || mp_fail "read back through the map: $got, want $want"
b1=$(($(mp_ios "$MP_D1") - a1)) b2=$(($(mp_ios "$MP_D2") - a2))
step "wrote and read back $MP_MB MiB through the map: $b1 I/Os on /dev/$MP_D1, $b2 on /dev/$MP_D2"
[ "$b1" -gt 0 ] && [ "$b2" -gt 0 ] || mp_fail "one path carried no I/O ($b1 / $b2)"

# one path goes away under reads: they finish through the other with the same bytes
( timeout 300 dd if="/dev/mapper/$MAP" bs=64k count=$((MP_MB * 16)) iflag=direct status=none | sha256sum | cut -c1-64 > /tmp/mp-under.sha ) &
MP_DD=$!
sleep 1
timeout 60 iscsiadm -m node -T "$IQN" -p "$MP_PORTAL2" -I "$IFACE" --logout >/dev/null || mp_fail "logout of the second path"
wait "$MP_DD" || mp_fail "reads through the map failed when a path went away"
[ "$(cat /tmp/mp-under.sha)" = "$want" ] || mp_fail "reads through the map while a path went away: $(cat /tmp/mp-under.sha), want $want"
wait_for 20 "multipath showing one path" sh -c "[ \$(multipath -ll '$MAP' 2>/dev/null | grep -c 'ready running') = 1 ]"
step "second path logged out under reads: they finished through $ISER_PORTAL with the same bytes"

timeout 180 dd if=/tmp/mp-orig of="/dev/mapper/$MAP" bs=256k oflag=direct conv=fsync status=none ||
  mp_fail "putting the first $MP_MB MiB back"
got=$(timeout 180 dd if="/dev/mapper/$MAP" bs=256k count=$((MP_MB * 4)) iflag=direct status=none | sha256sum | cut -c1-64)
[ "$got" = "$orig" ] || mp_fail "the first $MP_MB MiB put back read $got, want $orig"
timeout 20 multipath -f "$MAP" || mp_fail "multipath -f $MAP"
mp_stop
logout "$IQN" "$ISER_PORTAL" "$IFACE"
iscsiadm -m node -p "$MP_PORTAL2" -o delete >/dev/null 2>&1
adm --lld iser --op delete --mode portal --param portal=$MP_PORTAL2
timeout 5 rdma resource show cm_id | grep LISTEN | grep -q "$MP_IP2:3260" &&
  fail "the RDMA CM listener on $MP_PORTAL2 is still there after its delete"
ip addr del "$MP_IP2/24" dev "$ND" || fail "ip addr del $MP_IP2"
wait_for 40 "no queue pair of numatgtd left after the multipath step" sh -c "[ \"\$(timeout 5 rdma resource show qp 2>/dev/null | grep -c -E 'comm ev-n[0-9]+-[0-9]+ *\$')\" = 0 ]"
rm -f /etc/multipath.conf /tmp/mp-data /tmp/mp-orig
step "iSER multipath step done: map flushed, portal $MP_PORTAL2 deleted, no queue pair left"
