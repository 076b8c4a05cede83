#!/bin/sh
# Guest side of the NUMA cache test (runs as root inside the QEMU guest, see vm-run.sh; the
# guest has 2 real NUMA nodes, one vCPU each). Issue 3's proof on a real two-node kernel:
#   - numactl sees 2 nodes, numatgtd's log says "2 real NUMA node(s)" (not virtual);
#   - numatgtd with a NUMA block cache of 64M per node, a 128 MiB file LUN on tmpfs;
#   - open-iscsi discovery + login, then two sequential O_DIRECT reads of the first 96 MiB
#     with dd bs=256k (pass 1 fills the cache, pass 2 is served from it);
#   - SIGUSR1 -> one `cache report:` line per node; asserted: placement_local >= 0.99 (over resident pages), resident_bytes > 0 and
#     binding Bound on both nodes, summed served_local_bytes / (local + remote) >= 0.90,
#     hits > 0 on both nodes;
#   - logout, SIGTERM by PID, exit status 0.
# Env: NUMATGTD  path of the numatgtd binary as the guest sees it
# Prints VM_NUMA_OK on success, VM_NUMA_FAIL: <why> otherwise (exit 1).
set -u
IQN=iqn.2026-11.org.numatgt:vmnuma
PORTAL=127.0.0.1:3260
LUN_FILE=/tmp/vm-numa-lun.img
LUN_MB=128
READ_MB=96
BS=256k
LOG=/tmp/numatgtd.log
TPID=
CTL=$((2000 + $$ % 20000))
ERRORS=

. /vmtest/guest-lib.sh
cleanup() {
  iscsiadm -m node -T "$IQN" -p "$PORTAL" --logout >/dev/null 2>&1
  [ -n "$TPID" ] && kill -9 "$TPID" 2>/dev/null
}
fail() {
  echo "VM_NUMA_FAIL: $*"
  dump_log "$LOG" "numatgtd-numa.log"
  cleanup
  exit 1
}
# a failed assertion on the numbers: keep going so every number is printed, fail at the end
check() { # MESSAGE (when the check failed)
  echo "CHECK FAILED: $*"
  ERRORS="$ERRORS
  - $*"
}
# field VALUE of a `cache report:` LINE, e.g. field "$line" hits
field() { printf '%s\n' "$1" | sed -n "s/.* $2=\([^ ]*\).*/\1/p"; }
# sectors read / reads completed of /dev/$DEV (fields 3 and 1 of /sys/block/X/stat)
disk_reads() { awk '{ print $1, $3 }' "/sys/block/$DEV/stat"; }

step "$(nproc) CPUs, kernel $(uname -r)"
numactl --hardware || fail "numactl --hardware failed"
nodes=$(numactl --hardware | sed -n 's/^available: \([0-9]*\) nodes.*/\1/p')
[ "$nodes" = 2 ] || fail "numactl --hardware shows '${nodes:-?}' nodes, want 2 (vm-run.sh VM_NODES=2)"

[ -n "${NUMATGTD:-}" ] && [ -x "$NUMATGTD" ] || fail "numatgtd binary not visible in the guest: '${NUMATGTD:-}'"
truncate -s "${LUN_MB}M" "$LUN_FILE" || fail "create LUN file"
cat > /tmp/numatgtd.yaml <<YAML
portals:
  - address: $PORTAL
cache:
  mode: numa
  size_per_node: 64M
  block_size: 64K
  group_blocks: 8
  partitions_per_node: 16
router:
  min_forward_bytes: 32K
  max_queue: 64
  enabled: true
targets:
  - iqn: $IQN
    luns:
      - lun: 1
        path: $LUN_FILE
        block_size: 512
YAML
mkdir -p /tmp/numatgt-state
"$NUMATGTD" -f --config /tmp/numatgtd.yaml --state-dir /tmp/numatgt-state -C "$CTL" > "$LOG" 2>&1 &
TPID=$!
step "numatgtd pid $TPID"

# the port is bound before the cache arenas are built and pre-faulted: wait for "numatgtd ready"
i=0
until grep -q "numatgtd ready" "$LOG" && ss -ltn | grep -q "127.0.0.1:3260 "; do
  i=$((i + 1))
  [ $i -le 150 ] || fail "numatgtd not ready (log line 'numatgtd ready' + listening on $PORTAL) after 30 s"
  kill -0 "$TPID" 2>/dev/null || fail "numatgtd exited during start"
  sleep 0.2
done
grep -E "topology:|runtime: cache arena ready|NUMA block cache ready|numatgtd ready" "$LOG"
grep -q "topology: 2 real NUMA node(s)" "$LOG" \
  || fail "numatgtd's log does not say 'topology: 2 real NUMA node(s)'"
if grep "topology:" "$LOG" | grep -qi virtual; then
  fail "numatgtd uses virtual NUMA nodes on a 2-node guest"
fi

step "iscsid + discovery"
iscsid || fail "iscsid"
sleep 1
timeout 60 iscsiadm -m discovery -t sendtargets -p "$PORTAL" || fail "discovery"
step "login"
timeout 60 iscsiadm -m node -T "$IQN" -p "$PORTAL" --login || fail "login"

session_disk
want=$((LUN_MB * 2048))
[ "$(cat /sys/block/$DEV/size)" = "$want" ] || fail "disk has $(cat /sys/block/$DEV/size) sectors, want $want"
step "disk /dev/$DEV: $want sectors, max_sectors_kb=$(cat /sys/block/$DEV/queue/max_sectors_kb)" \
  "max_hw_sectors_kb=$(cat /sys/block/$DEV/queue/max_hw_sectors_kb)" \
  "max_segments=$(cat /sys/block/$DEV/queue/max_segments)"

count=$((READ_MB * 4))   # blocks of 256 KiB
for pass in 1 2; do
  before=$(disk_reads)
  step "pass $pass: dd if=/dev/$DEV of=/dev/null bs=$BS count=$count iflag=direct"
  timeout 120 dd if="/dev/$DEV" of=/dev/null bs=$BS count=$count iflag=direct > /tmp/dd.out 2>&1 \
    || { cat /tmp/dd.out; fail "dd pass $pass"; }
  tail -n 1 /tmp/dd.out
  after=$(disk_reads)
  echo "$before $after" | awk -v p="$pass" '{ n = $3 - $1; s = $4 - $2;
    printf "pass %s: %d reads of /dev/sdX, %d KiB each on average\n", p, n, n ? s / 2 / n : 0 }'
done

step "SIGUSR1"
kill -USR1 "$TPID" || fail "kill -USR1 $TPID"
i=0
while [ "$(grep -c 'cache report: node=' "$LOG")" -lt 2 ]; do
  i=$((i + 1))
  [ $i -le 100 ] || fail "no 2 'cache report: node=' lines 20 s after SIGUSR1"
  kill -0 "$TPID" 2>/dev/null || fail "numatgtd died after SIGUSR1"
  sleep 0.2
done
REPORT=$(grep 'cache report: node=' "$LOG" | head -n 2)

local_sum=0
remote_sum=0
for node in 0 1; do
  line=$(printf '%s\n' "$REPORT" | grep "cache report: node=$node ")
  [ -n "$line" ] || { check "no cache report line for node $node"; continue; }
  virt=$(field "$line" virtual)
  binding=$(printf '%s\n' "$line" | sed -n 's/.* binding=\(.*\) placement_local=.*/\1/p')
  placement=$(field "$line" placement_local)
  hits=$(field "$line" hits)
  loc=$(field "$line" served_local_bytes)
  rem=$(field "$line" served_remote_bytes)
  echo "node $node: virtual=$virt binding=$binding placement_local=$placement hits=$hits" \
    "misses=$(field "$line" misses) evictions=$(field "$line" evictions)" \
    "served_local_bytes=$loc served_remote_bytes=$rem forwards_out=$(field "$line" forwards_out)" \
    "forwards_in=$(field "$line" forwards_in) busy=$(field "$line" busy) no_space=$(field "$line" no_space)"
  [ "$virt" = false ] || check "node $node: virtual=$virt, want false"
  case "$binding" in
    Bound*) ;;
    *) check "node $node: binding=$binding, want Bound" ;;
  esac
  awk -v p="$placement" 'BEGIN { exit !(p ~ /^[0-9.]+$/ && p + 0 >= 0.99) }' \
    || check "node $node: placement_local=$placement, want >= 0.99"
  # arenas grow as blocks are cached: placement is measured over the resident pages, so
  # some must be resident for it to mean anything
  resident=$(field "$line" resident_bytes)
  echo "node $node: capacity_bytes=$(field "$line" capacity_bytes) resident_bytes=$resident"
  case "$resident" in
    ''|*[!0-9]*|0) check "node $node: resident_bytes='$resident', want > 0 after the reads" ;;
  esac
  case "$hits" in
    ''|*[!0-9]*) check "node $node: hits='$hits' is not a number" ;;
    0) check "node $node: hits=0, want > 0" ;;
  esac
  case "$loc$rem" in
    ''|*[!0-9]*) check "node $node: served bytes '$loc'/'$rem' are not numbers" ;;
    *) local_sum=$((local_sum + loc)); remote_sum=$((remote_sum + rem)) ;;
  esac
done
share=$(awk -v l="$local_sum" -v r="$remote_sum" 'BEGIN { if (l + r == 0) print "none"; else printf "%.4f", l / (l + r) }')
step "served local $local_sum B, remote $remote_sum B: local share $share"
awk -v s="$share" 'BEGIN { exit !(s != "none" && s + 0 >= 0.90) }' \
  || check "served_local_bytes / (local + remote) = $share over both nodes, want >= 0.90"
served_mb=$(( (local_sum + remote_sum) / 1048576 ))
[ "$served_mb" -ge $((2 * READ_MB)) ] \
  || echo "NOTE: the cache served $served_mb MiB, less than the $((2 * READ_MB)) MiB read by dd"

step "logout"
timeout 60 iscsiadm -m node -T "$IQN" -p "$PORTAL" --logout || fail "logout"

step "stop numatgtd (pid $TPID)"
stop_pid "$TPID" 20
TPID=
[ "$TRC" = 0 ] || fail "numatgtd exited with status $TRC after SIGTERM"
step "numatgtd exited with status 0"

echo "---- cache report after SIGUSR1 ----"
printf '%s\n' "$REPORT"
echo "---- cache report at shutdown ----"
grep 'cache report: node=' "$LOG" | tail -n +3
echo "---- numatgtd warnings/errors ----"
grep -E ' (WARN|ERROR) ' "$LOG" | tail -n 40
if [ -d /vmtest/out ]; then cp "$LOG" /vmtest/out/numatgtd-numa.log 2>/dev/null; fi
if [ -n "$ERRORS" ]; then
  echo "VM_NUMA_FAIL: $(printf '%s\n' "$ERRORS" | grep -c '^  - ') check(s) failed:$ERRORS"
  dump_log "$LOG" "numatgtd-numa.log"
  exit 1
fi
echo "VM_NUMA_OK placement_ok=2/2 local_share=$share"
