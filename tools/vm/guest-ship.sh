# I/O shipping across the two gateways of an RBD LUN, as the guest kernel's initiator and
# dm-multipath use it (issue 26). Sourced by guest-multipath.sh for MPATH_BACKEND=rbd
# MPATH_MODE=ship once its map exists; uses its fail, step, alua_metrics and MAP. Both
# gateways are active/non-optimized non-owners of each other, multipathd puts both paths
# in one path group (multibus) and sends I/O round robin over them (rr_min_io_rq 1): every
# other request reaches gateway 2, which ships it to the owner, gateway 1.
#   - 32 MiB of random data written through the map with O_DIRECT (64 KiB requests), read
#     back through the map and through each path's own disk: the same bytes every time;
#   - gateway 2's metrics count shipped commands, gateway 1's the same number served; no
#     takeover on either, gateway 1 still owns the LUN (active/optimized);
#   - both paths of the map active and ready, none failed.
#   - persistent reservations over the round-robin map (guest-pr-shared.sh's helpers): each
#     path registers the host's key (as mpathpersist does), gateway 1's reserves Write
#     Exclusive – Registrants Only before the writes above, which go on through both
#     paths under it; then gateway 2's nexus leaves (REGISTER with key 0) and a WRITE
#     through its path ends in RESERVATION CONFLICT; CLEAR through gateway 1.
# Sets SHIP_RESULT (a summary for the result line).
SHIP_RESULT=

# gateway GROUP's shipped-command counter of kind KIND (sent, served, lost, refused)
ship_metric() { # GROUP KIND
  curl -s --max-time 5 "http://127.0.0.$1:9470/metrics" | awk -v k="kind=\"$2\"" '
    /^numatgt_lun_shipped_commands_total\{/ && index($0, k) { v = $NF } END { print v + 0 }'
}

ship_check() { # DEV1 DEV2 (gateway 1's and gateway 2's path)
  local d1=$1 d2=$2 src=/tmp/ship.src sum got d sent served lost paths r s
  head -c $((32 << 20)) /dev/urandom > "$src" || fail "ship: random data"
  pr_out "REGISTER key 0xabab" "$d1" --register --param-sark=0xabab
  pr_out "REGISTER key 0xabab" "$d2" --register --param-sark=0xabab
  pr_out "RESERVE (Write Exclusive - Registrants Only)" "$d1" --reserve --param-rk=0xabab --prout-type=5
  r=$(pr_reservation "$d2")
  case "$r" in "0xabab Write Exclusive, registrants only"*) ;; *) fail "ship: gateway 2 reports reservation '$r'" ;; esac
  step "ship: both paths registered 0xabab, gateway 1's reserved ($r)"
  sum=$(sha256sum < "$src" | cut -d' ' -f1)
  timeout 120 dd if="$src" of="/dev/mapper/$MAP" bs=64k oflag=direct status=none \
    || fail "ship: dd to /dev/mapper/$MAP"
  got=$(timeout 120 dd if="/dev/mapper/$MAP" bs=64k count=512 iflag=direct status=none | sha256sum | cut -d' ' -f1)
  [ "$got" = "$sum" ] || fail "ship: the map read back other bytes"
  for d in "$d1" "$d2"; do
    got=$(timeout 120 dd if="/dev/$d" bs=64k count=512 iflag=direct status=none | sha256sum | cut -d' ' -f1)
    [ "$got" = "$sum" ] || fail "ship: /dev/$d read back other bytes"
  done
  step "ship: 32 MiB written round robin through both paths, read back identical through the map, /dev/$d1 and /dev/$d2"
  sent=$(ship_metric 2 sent)
  served=$(ship_metric 1 served)
  lost=$(ship_metric 2 lost)
  step "ship: gateway 2 shipped $sent commands, gateway 1 served $served, lost $lost"
  [ "$sent" -gt 256 ] || fail "ship: gateway 2 shipped only $sent commands (round robin should send it half of 1024+)"
  [ "$served" = "$sent" ] && [ "$lost" = 0 ] || fail "ship: sent $sent, served $served, lost $lost"
  set -- $(alua_metrics 1)
  [ "$1 $2 $3" = "0 1 0" ] || fail "ship: gateway 1's metrics: want state 0 owner 1 takeover 0, got '$*'"
  set -- $(alua_metrics 2)
  [ "$2 $3" = "1 0" ] || fail "ship: gateway 2's metrics: want owner 1 takeover 0, got '$*'"
  paths=$(multipath -ll "$MAP" | grep -c 'active ready running')
  multipath -ll "$MAP" | grep -q 'failed' && fail "ship: a path failed: $(multipath -ll "$MAP")"
  [ "$paths" = 2 ] || fail "ship: want 2 active ready paths, got $paths"
  pr_out "REGISTER key 0 (leave)" "$d2" --register --param-rk=0xabab --param-sark=0
  s=$(pr_write_status "$d2")
  case "$s" in *[Cc]onflict*) ;; *) fail "ship: WRITE through gateway 2, no longer registered: status '$s'" ;; esac
  pr_out "CLEAR" "$d1" --clear --param-rk=0xabab
  [ "$(pr_keys "$d2") $(pr_reservation "$d2")" = "none none" ] || fail "ship: keys or a reservation left after CLEAR"
  step "ship: under the reservation the writes went through both paths; gateway 2's nexus unregistered, a WRITE through it: $s; CLEAR"
  SHIP_RESULT="ship=sent:$sent,served:$served,verified,pr=register,reserve,conflict,clear"
}
