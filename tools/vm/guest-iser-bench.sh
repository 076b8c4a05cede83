#!/bin/sh
# Guest side of the iSER benchmark (tools/bench/iser.sh boots the QEMU guest with vm-run.sh
# and runs this as root in it). Everything stays inside the guest: soft-RoCE (rdma_rxe) on a
# dummy netdev with a private address, TCP on 127.0.0.1.
#
# Targets, side by side in this one boot, each on its own ports, each with its own copy of
# the same LUN_MB MiB of random data on tmpfs, started the way their users start them:
#   numatgtd       NUMATGTD -f -C N --iscsi portal=127.0.0.1:3271 --iser portal=IP:3261; one
#                  target made with tgtadm --lld iser (LUN 1, -b FILE, -I ALL), default
#                  settings; it serves both transports
#   numatgtd-base  only with NUMATGTD_BASE: that binary, the same way (3273 / IP:3263)
#   tgtd           Debian's tgtd -f -C N --iscsi portal=127.0.0.1:3270; its iSER driver
#                  listens on port 3260 of every RDMA device (tgt 1.0.85 refuses --iser
#                  portal=). tgt 1.0.85 quirks: an iSER login needs an initiator-name ACL
#                  besides -I ALL, and a --lld iser target refuses TCP logins, so TCP goes to
#                  a second target (--lld iscsi, tid 2) on the same file
#   lio            only with LIO=1: the kernel target (target_core_mod, iscsi_target_mod,
#                  ib_isert, target_core_file) configured with python3-rtslib-fb: a fileio
#                  backstore on its file (write_back, targetcli's default), one TPG with an
#                  iSER portal IP:3262 and a TCP portal 127.0.0.1:3272, demo mode (generated
#                  node ACLs, writable), no authentication
# The kernel initiator (open-iscsi, iface iser0 with transport iser, and iface default for
# TCP) logs in to every target over both transports at the start and stays logged in; the
# load switches devices. Each iSER disk is read once whole (warm). Then fio (libaio,
# direct=1) runs every POINT over every TRANSPORT on each target in turn, ROUNDS rounds of
# SECS s. Per run: /proc/PID/stat utime+stime of the user-space target's process, and the
# guest-wide /proc/stat counters (busy = user+nice+system+irq+softirq+steal; total adds idle
# and iowait), before and after; a line per run in /vmtest/out/raw.tsv:
#   transport point target round json target_ticks guest_busy_ticks guest_total_ticks
# (target_ticks "-" for LIO). With STRACE=1, afterwards: strace -f -ttt -p PID for STRACE_SECS
# s in the middle of a STRACE_POINT run per user-space target and transport, and the disk's
# completed I/Os (/sys/block/DEV/stat) sampled every 0.1 s meanwhile: /vmtest/out/syscalls.tsv
#   target transport point trace_file ios_file
# With PROFILE=1, afterwards: where each user-space target's CPU goes over iSER, per
# PROFILE_POINT (default "sr512k-qd8 sw128k-qd8"): a PROFILE_SECS (6) s window in the middle
# of a fio run, every thread's utime and stime (/proc/PID/task/*/stat) before and after
# (raw/profile-POINT-TARGET.threads: first line "ios N", the disk's I/Os in the window, then
# tid comm utime0 stime0 utime1 stime1 in ticks); /vmtest/out/profile.tsv: target point
# threads_file ios. No system-wide perf: under TCG its samples land in the idle loop, and it
# slowed the 128K writes 30-fold (27 I/Os in 6 s instead of 832, 2026-11-27). With PERF=1,
# afterwards: numatgtd's own flat profile (perf record -e task-clock -p PID, PERF_SECS s per
# PROFILE_POINT, raw/perf-POINT-TARGET.txt); under TCG it often records no sample at all
# (3 of 4 windows on 2026-11-29). numatgtd's metrics at the end: raw/metrics-TARGET.prom.
# Everything is bounded by timeout; every process started here is stopped by PID; the
# sessions are logged out and LIO's configuration cleared before the guest powers off.
# Env: NUMATGTD (required), NUMATGTD_BASE, TGTD (1; 0: no tgtd), LIO (1), ROUNDS, SECS, POINTS, TRANSPORTS
#      ("iser tcp"), LUN_MB, STRACE (0), STRACE_SECS (4), STRACE_POINT (rr4k-qd32),
#      PROFILE (0), PROFILE_SECS (6), PROFILE_POINTS ("sr512k-qd8 sw128k-qd8"), PERF (0),
#      PERF_SECS (10), NET_MTU (1500:
#      the dummy netdev's MTU; soft-RoCE's path MTU follows it: 1024 at 1500, 4096 at 9000)
# Prints ISER_BENCH_OK at the end, ISER_BENCH_FAIL: <why> (exit 1) otherwise.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
OUT=/vmtest/out
[ -d "$OUT" ] || { echo "ISER_BENCH_FAIL: no /vmtest/out (VM_OUT unset)"; exit 1; }
mkdir -p "$OUT/raw"
. /vmtest/guest-lib.sh
IP=192.168.77.1
ND=rdmanet0
LUN_MB=${LUN_MB:-128}
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
POINTS=${POINTS:-"rr4k-qd1 rr4k-qd32 rw4k-qd32 sr512k-qd8 sw128k-qd8"}
TRANSPORTS=${TRANSPORTS:-"iser tcp"}
LIO=${LIO:-1}
STRACE=${STRACE:-0}
STRACE_SECS=${STRACE_SECS:-4}
STRACE_POINT=${STRACE_POINT:-rr4k-qd32}
PROFILE=${PROFILE:-0}
NET_MTU=${NET_MTU:-1500}
PROFILE_SECS=${PROFILE_SECS:-6}
PROFILE_POINTS=${PROFILE_POINTS:-"sr512k-qd8 sw128k-qd8"}
D=/tmp/bench
mkdir -p "$D"
PY=/usr/bin/python3 # the distribution's, with python3-rtslib-fb
INAME=$(sed -n 's/^InitiatorName=//p' /etc/iscsi/initiatorname.iscsi)
declare -A PID IQN_OF DEV CTL METRICS
TARGETS=()
SESSIONS_UP=0
LIO_UP=0

stop_all() {
  local t
  if [ "$SESSIONS_UP" = 1 ]; then timeout 90 iscsiadm -m node --logoutall=all > /dev/null 2>&1; SESSIONS_UP=0; fi
  if [ -s /run/iscsid.pid ]; then kill -TERM "$(cat /run/iscsid.pid)" 2> /dev/null; fi
  if [ "$LIO_UP" = 1 ]; then
    timeout 60 $PY -c 'from rtslib_fb import RTSRoot; RTSRoot().clear_existing(confirm=True)' 2>&1
    LIO_UP=0
  fi
  for t in "${!PID[@]}"; do
    [ -n "${PID[$t]}" ] || continue
    if [ "$t" = tgtd ]; then # SIGTERM alone does not stop tgtd while targets exist
      timeout 20 tgtadm -C "${CTL[$t]}" --op update --mode sys --name State -v offline > /dev/null 2>&1
      timeout 20 tgtadm -C "${CTL[$t]}" --lld iser --op delete --mode target --tid 1 --force > /dev/null 2>&1
      timeout 20 tgtadm -C "${CTL[$t]}" --lld iscsi --op delete --mode target --tid 2 --force > /dev/null 2>&1
      timeout 20 tgtadm -C "${CTL[$t]}" --op delete --mode system > /dev/null 2>&1
    fi
    kill -TERM "${PID[$t]}" 2> /dev/null
    i=0
    while kill -0 "${PID[$t]}" 2> /dev/null && [ $i -lt 50 ]; do i=$((i + 1)); sleep 0.2; done
    kill -KILL "${PID[$t]}" 2> /dev/null
    wait "${PID[$t]}" 2> /dev/null
    PID[$t]=
  done
}
fail() {
  echo "ISER_BENCH_FAIL: $*"
  dmesg | tail -n 30
  for t in "${!PID[@]}"; do [ -z "${PID[$t]}" ] || { echo "---- $t.log (last 20) ----"; tail -n 20 "$OUT/$t.log" 2> /dev/null; }; done
  stop_all
  exit 1
}
. /vmtest/points.sh # point_spec, shipped by tools/bench/iser.sh
for p in $POINTS $STRACE_POINT; do point_spec "$p" > /dev/null || fail "unknown point $p"; done
ticks() { [ -n "$1" ] && awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat" || echo -; }
# numatgtd's iSER verbs calls and completions so far (numatgt_iser_verbs_calls_total,
# numatgt_iser_completions_total): "cq_event cq_arm post_send send receive", "-" without
iser_calls() { # METRICS_ADDRESS
  [ -n "$1" ] || { echo -; return; }
  timeout 10 curl -sf "http://$1/metrics" 2> /dev/null | awk '
    /^numatgt_iser_verbs_calls_total\{call="cq_event"\}/ { e = $2 } /^numatgt_iser_verbs_calls_total\{call="cq_arm"\}/ { a = $2 }
    /^numatgt_iser_verbs_calls_total\{call="post_send"\}/ { p = $2 }
    /^numatgt_iser_completions_total\{queue="send"\}/ { s = $2 } /^numatgt_iser_completions_total\{queue="receive"\}/ { r = $2 }
    END { if (r == "") print "-"; else printf "%d %d %d %d %d\n", e, a, p, s, r }'
}
guest_cpu() { awk '/^cpu / { b = $2 + $3 + $4 + $7 + $8 + $9; print b, b + $5 + $6 }' /proc/stat; }
disk_ios() { awk '{ print $1 + $5 }' "/sys/block/$1/stat"; }
tcp_listening() { ss -Hltn "sport = :$1" | grep -q .; }
cm_listening() { timeout 5 rdma resource show cm_id 2> /dev/null | grep LISTEN | grep -q ":$1 "; }
wait_up() { # NAME PID TCP_PORT CM_PORT: both listeners up within 30 s
  local i=0
  until tcp_listening "$3" && cm_listening "$4"; do
    i=$((i + 1))
    [ $i -le 150 ] || fail "$1: no TCP listener on $3 or RDMA CM listener on $4 after 30 s"
    kill -0 "$2" 2> /dev/null || fail "$1 exited at start ($OUT/$1.log)"
    sleep 0.2
  done
}
# session_devs: the block devices of all iSCSI sessions, one a line
session_devs() {
  local d
  for d in /sys/class/iscsi_session/session*/device/target*/*/block/*; do [ -e "$d" ] && basename "$d"; done | sort
}
# login_dev NAME IQN PORTAL IFACE [try]: a node record by hand, login (bounded),
# DEV[NAME.transport]; with "try" a failed login returns 1 (record deleted) instead of failing
login_dev() {
  local name=$1 iqn=$2 portal=$3 iface=$4 before dev="" i=0 tr=tcp
  [ "$iface" = iser0 ] && tr=iser
  before=$(session_devs | tr '\n' ' ')
  iscsiadm -m node -o new -T "$iqn" -p "$portal" -I "$iface" > /dev/null || fail "iscsiadm node new $iqn $portal"
  iscsiadm -m node -T "$iqn" -p "$portal" -I "$iface" -o update -n node.session.initial_login_retry_max -v 2 || fail "node update"
  iscsiadm -m node -T "$iqn" -p "$portal" -I "$iface" -o update -n node.conn[0].timeo.login_timeout -v 10 || fail "node update"
  if ! timeout 60 iscsiadm -m node -T "$iqn" -p "$portal" -I "$iface" --login > /dev/null; then
    [ "${5:-}" = try ] || fail "$name: login to $iqn at $portal via $iface"
    iscsiadm -m node -o delete -T "$iqn" -p "$portal" -I "$iface" > /dev/null 2>&1
    return 1
  fi
  SESSIONS_UP=1
  while [ -z "$dev" ]; do
    # (no process substitution: the guest's /dev has no /dev/fd)
    for d in $(session_devs); do
      case " $before " in *" $d "*) ;; *) [ -b "/dev/$d" ] && dev=$d ;; esac
    done
    [ -n "$dev" ] && break
    # numatgtd's first iSER login registers its cache arenas for RDMA (~15 s under TCG)
    i=$((i + 1)); [ $i -le 450 ] || fail "$name: no new disk 90 s after the $tr login"
    sleep 0.2
  done
  [ "$(cat "/sys/block/$dev/size")" = $((LUN_MB * 2048)) ] ||
    fail "$name over $tr: /dev/$dev has $(cat "/sys/block/$dev/size") sectors, want $((LUN_MB * 2048))"
  # the same (no) I/O scheduler on every disk: the targets are measured, not mq-deadline
  echo none > "/sys/block/$dev/queue/scheduler" 2> /dev/null
  DEV[$name.$tr]=$dev
  step "$name over $tr: /dev/$dev"
}

step "guest: $(nproc) CPUs, $(awk '/MemTotal/ { print int($2 / 1024) }' /proc/meminfo) MiB, kernel $(uname -r); LUN $LUN_MB MiB"
modprobe -a rdma_rxe ib_uverbs rdma_ucm ib_iser dummy || fail "modprobe rdma_rxe ib_uverbs rdma_ucm ib_iser dummy"
ip link add "$ND" type dummy || fail "ip link add $ND"
ip addr add "$IP/24" dev "$ND" || fail "ip addr add $IP"
ip link set "$ND" mtu "$NET_MTU" || fail "ip link set $ND mtu $NET_MTU"
ip link set "$ND" up || fail "ip link set $ND up"
rdma link add rxe0 type rxe netdev "$ND" || fail "rdma link add rxe0"
step "soft-RoCE: netdev MTU $NET_MTU, rxe0 active MTU $(timeout 5 ibv_devinfo -d rxe0 2> /dev/null | awk '/active_mtu/ { print $2 }')"
timeout 60 head -c "${LUN_MB}M" /dev/urandom > "$D/lun-numatgtd.img" || fail "LUN data"
LUN_SHA=$(timeout 60 sha256sum "$D/lun-numatgtd.img" | cut -c1-16)

# ---- the initiator's side: iscsid and the iser iface; each target is logged in to over every
# transport right after its start (tgtd first: see below), and stays logged in for the run
iscsid || fail "iscsid"
sleep 1
iscsiadm -m iface -I iser0 -o new > /dev/null || fail "iscsiadm iface new iser0"
iscsiadm -m iface -I iser0 -o update -n iface.transport_name -v iser > /dev/null || fail "iface transport iser"
login_all() { # TARGET: log in over every transport
  local x
  for x in $TRANSPORTS; do
    case $x in
      iser) login_dev "$1" "${IQN_OF[$1]}" "${PORTS_ISER[$1]}" iser0 ;;
      tcp) login_dev "$1" "${IQN_TCP[$1]}" "${PORTS_TCP[$1]}" default ;;
      *) fail "unknown transport $x" ;;
    esac
  done
}

# ---- targets
start_numatgtd() { # NAME BIN TCP_PORT ISER_PORT CTL
  local t=$1
  [ -x "$2" ] || fail "$t binary not visible in the guest: '$2'"
  cp "$D/lun-numatgtd.img" "$D/lun-$t.img" 2> /dev/null
  mkdir -p "$D/state-$t"
  # the metrics on a port of its own (two numatgtd may run; everything else default)
  "$2" -f -C "$5" --iscsi "portal=127.0.0.1:$3" --iser "portal=$IP:$4" --state-dir "$D/state-$t" \
    --metrics "127.0.0.1:$((9400 + $3 % 100))" > "$OUT/$t.log" 2>&1 &
  PID[$t]=$! CTL[$t]=$5 IQN_OF[$t]=iqn.2026-11.org.numatgt:bench-$t METRICS[$t]=127.0.0.1:$((9400 + $3 % 100))
  wait_up "$t" "${PID[$t]}" "$3" "$4"
  timeout 20 tgtadm -C "$5" --lld iser --op new --mode target --tid 1 -T "${IQN_OF[$t]}" || fail "$t: tgtadm new target"
  timeout 20 tgtadm -C "$5" --lld iser --op new --mode logicalunit --tid 1 --lun 1 -b "$D/lun-$t.img" || fail "$t: tgtadm new lun"
  timeout 20 tgtadm -C "$5" --lld iser --op bind --mode target --tid 1 -I ALL || fail "$t: tgtadm bind"
  PORTS_ISER[$t]=$IP:$4 PORTS_TCP[$t]=127.0.0.1:$3 IQN_TCP[$t]=${IQN_OF[$t]}
  TARGETS+=("$t")
  step "$t: pid ${PID[$t]}, iSER $IP:$4, TCP 127.0.0.1:$3, control port $5"
}
declare -A PORTS_ISER PORTS_TCP IQN_TCP
# tgt 1.0.85 over soft-RoCE sometimes fails an iSER connection (rdma_create_qp: Invalid
# argument) and then dies of SIGSEGV in librdmacm; seen in 1 of 5 boots with 2-3 GiB and in
# every one of 3 boots with 3.5-6 GiB. It is restarted (a fresh control port) up to 3 times.
start_tgtd() { # CTL
  tgtd -f -C "$1" --iscsi portal=127.0.0.1:3270 >> "$OUT/tgtd.log" 2>&1 &
  PID[tgtd]=$! CTL[tgtd]=$1 IQN_OF[tgtd]=iqn.2026-11.org.numatgt:bench-tgtd
  wait_up tgtd "${PID[tgtd]}" 3270 3260
  tadm() { timeout 20 tgtadm -C "${CTL[tgtd]}" "$@" || fail "tgtd: tgtadm $*"; }
  tadm --lld iser --op new --mode target --tid 1 -T "${IQN_OF[tgtd]}"
  tadm --lld iser --op new --mode logicalunit --tid 1 --lun 1 -b "$D/lun-tgtd.img"
  tadm --lld iser --op bind --mode target --tid 1 -I ALL
  tadm --lld iser --op bind --mode target --tid 1 -Q "$INAME" # tgt 1.0.85: iSER needs a name ACL
  tadm --lld iscsi --op new --mode target --tid 2 -T "${IQN_OF[tgtd]}-tcp"
  tadm --lld iscsi --op new --mode logicalunit --tid 2 --lun 1 -b "$D/lun-tgtd.img"
  tadm --lld iscsi --op bind --mode target --tid 2 -I ALL
  PORTS_ISER[tgtd]=$IP:3260 PORTS_TCP[tgtd]=127.0.0.1:3270 IQN_TCP[tgtd]=${IQN_OF[tgtd]}-tcp
  step "tgtd: pid ${PID[tgtd]}, iSER $IP:3260 (every RDMA device), TCP 127.0.0.1:3270 (tid 2, same file), control port $1"
}
if [ "${TGTD:-1}" = 1 ]; then
  cp "$D/lun-numatgtd.img" "$D/lun-tgtd.img"
  : > "$OUT/tgtd.log"
  for attempt in 1 2 3; do
    start_tgtd $((2002 + 10 * attempt))
    case " $TRANSPORTS " in *" iser "*) ;; *) break ;; esac
    login_dev tgtd "${IQN_OF[tgtd]}" "${PORTS_ISER[tgtd]}" iser0 try && break
    step "tgtd: iSER login failed (attempt $attempt): $(grep -c 'rdma_create_qp failed' "$OUT/tgtd.log") rdma_create_qp failures in its log; restarting it"
    kill -KILL "${PID[tgtd]}" 2> /dev/null; wait "${PID[tgtd]}" 2> /dev/null; PID[tgtd]=
    [ "$attempt" -lt 3 ] || fail "tgtd: no iSER login in 3 starts ($OUT/tgtd.log)"
  done
  TARGETS+=(tgtd)
  case " $TRANSPORTS " in *" tcp "*) login_dev tgtd "${IQN_TCP[tgtd]}" "${PORTS_TCP[tgtd]}" default ;; esac
fi

start_numatgtd numatgtd "${NUMATGTD:-}" 3271 3261 2001
if [ -n "${NUMATGTD_BASE:-}" ]; then start_numatgtd numatgtd-base "$NUMATGTD_BASE" 3273 3263 2003; fi
for t in numatgtd numatgtd-base; do [ -z "${PID[$t]:-}" ] || login_all "$t"; done

if [ "$LIO" = 1 ]; then
  cp "$D/lun-numatgtd.img" "$D/lun-lio.img"
  modprobe -a target_core_mod iscsi_target_mod ib_isert target_core_file > "$OUT/lio.log" 2>&1 ||
    fail "modprobe target_core_mod iscsi_target_mod ib_isert target_core_file: $(cat "$OUT/lio.log")"
  # configfs is a module here, loaded only now (the boot's mount of it failed); rtslib keeps
  # its database root in /etc/rtslib-fb-target
  [ -d /sys/kernel/config/target ] || mount -t configfs configfs /sys/kernel/config 2> /dev/null
  [ -d /sys/kernel/config/target ] || fail "no /sys/kernel/config/target after loading target_core_mod"
  mkdir -p /etc/rtslib-fb-target /etc/target
  IQN_OF[lio]=iqn.2026-11.org.numatgt:bench-lio
  LIO_UP=1
  timeout 60 $PY - "$D/lun-lio.img" "${IQN_OF[lio]}" "$IP" 3262 3272 >> "$OUT/lio.log" 2>&1 << 'EOF' || fail "LIO configuration with rtslib: $(tail -n 5 "$OUT/lio.log")"
import os
import sys
from rtslib_fb import FabricModule, FileIOStorageObject, LUN, NetworkPortal, Target, TPG
path, iqn, ip, iser_port, tcp_port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
# write_back: targetcli's default for a fileio backstore (WCE=1, as numatgtd's and tgtd's)
so = FileIOStorageObject("bench", path, size=os.path.getsize(path), write_back=True)
tpg = TPG(Target(FabricModule("iscsi"), iqn), 1)
LUN(tpg, 0, so)
NetworkPortal(tpg, ip, iser_port).iser = True
NetworkPortal(tpg, "127.0.0.1", tcp_port)
tpg.set_attribute("authentication", "0")
tpg.set_attribute("generate_node_acls", "1")
tpg.set_attribute("cache_dynamic_acls", "1")
tpg.set_attribute("demo_mode_write_protect", "0")
tpg.enable = True
for np in tpg.network_portals:
    print("LIO portal %s:%d iser=%s" % (np.ip_address, np.port, np.iser))
EOF
  PORTS_ISER[lio]=$IP:3262 PORTS_TCP[lio]=127.0.0.1:3272 IQN_TCP[lio]=${IQN_OF[lio]}
  PID[lio]=""
  TARGETS+=(lio)
  step "lio: $(grep -c 'LIO portal' "$OUT/lio.log") portals ($(grep 'LIO portal' "$OUT/lio.log" | tr '\n' ' '))"
  login_all lio
fi

# the alternation order: numatgtd first, as in tools/bench/run.sh
ORDERED=()
for t in numatgtd numatgtd-base tgtd lio; do case " ${TARGETS[*]} " in *" $t "*) ORDERED+=("$t") ;; esac; done
TARGETS=("${ORDERED[@]}")
iscsiadm -m session -P 1 2> /dev/null | grep -E 'Target:|Current Portal|Iface Transport' > "$OUT/sessions.txt"
step "warm: each LUN read once whole, and compared with the data"
for t in "${TARGETS[@]}"; do
  for x in $TRANSPORTS; do
    dev=${DEV[$t.$x]}
    sha=$(timeout $((60 + LUN_MB)) dd if="/dev/$dev" bs=1M count=$LUN_MB iflag=direct status=none | sha256sum | cut -c1-16)
    [ "$sha" = "$LUN_SHA" ] || fail "$t over $x: /dev/$dev reads $sha, the LUN data is $LUN_SHA"
    step "$t over $x: $LUN_MB MiB read, same data"
    break # one transport warms the file: the same LUN file behind both
  done
done

# ---- the matrix
: > "$OUT/raw.tsv"
{ echo "guest_cpus=$(nproc)"; echo "guest_kernel=$(uname -r)"; echo "guest_mem_mb=$(awk '/MemTotal/ { print int($2 / 1024) }' /proc/meminfo)"
  echo "guest_hz=$(getconf CLK_TCK)"; echo "guest_targets=${TARGETS[*]}"; echo "guest_load_before=$(cat /proc/loadavg)"
  echo "tgtd_version=$(tgtd -V 2> /dev/null | head -n 1)"; echo "fio_version=$(fio --version)"
  for t in "${TARGETS[@]}"; do for x in $TRANSPORTS; do echo "dev_$t.$x=${DEV[$t.$x]}"; done; done; } > "$OUT/guest-meta.txt"
measure() { # TRANSPORT POINT TARGET ROUND
  local x=$1 p=$2 t=$3 r=$4 rw bs qd fflags dev c0 c1 g0 g1 name
  set -- $(point_spec "$p"); rw=$1 bs=$2 qd=$3 fflags=$(point_fio_flags "$p")
  dev=${DEV[$t.$x]}
  name=$x-$p-$t-r$r
  [ -z "${PID[$t]}" ] || kill -0 "${PID[$t]}" 2> /dev/null || fail "$t (pid ${PID[$t]}) exited ($OUT/$t.log)"
  k0=-; [ "$x" = iser ] && k0=$(iser_calls "${METRICS[$t]:-}")
  c0=$(ticks "${PID[$t]}"); g0=$(guest_cpu)
  timeout -k 5 $((SECS + 40)) fio --name=p --ioengine=libaio --direct=1 "--filename=/dev/$dev" --rw="$rw" --bs="$bs" $fflags \
    --iodepth="$qd" --size="${LUN_MB}M" --time_based --runtime="$SECS" --norandommap --randrepeat=0 \
    --output-format=json --output="$OUT/raw/$name.json" > "$OUT/raw/$name.err" 2>&1 || echo "fio failed: $name: $(tail -n 2 "$OUT/raw/$name.err" | tr '\n' ' ')"
  c1=$(ticks "${PID[$t]}"); g1=$(guest_cpu)
  # a connection adds its counts once a second: the scrape waits for the last of them
  if [ "$k0" != - ]; then sleep 1.2; printf '%s\n%s\n' "$k0" "$(iser_calls "${METRICS[$t]:-}")" > "$OUT/raw/$name.calls"; fi
  [ "$c0" = - ] || c0=$((c1 - c0))
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$x" "$p" "$t" "$r" "$name.json" "$c0" \
    $(( ${g1% *} - ${g0% *} )) $(( ${g1#* } - ${g0#* } )) >> "$OUT/raw.tsv"
}
step "matrix: transports '$TRANSPORTS', points '$POINTS', targets '${TARGETS[*]}', $ROUNDS rounds x $SECS s"
for x in $TRANSPORTS; do
  for p in $POINTS; do
    for r in $(seq 1 "$ROUNDS"); do
      for t in "${TARGETS[@]}"; do measure "$x" "$p" "$t" "$r"; done
    done
    step "done: $x $p"
  done
done
echo "guest_load_after=$(cat /proc/loadavg)" >> "$OUT/guest-meta.txt"

# ---- system calls per I/O of the user-space targets (a separate window: strace slows them)
if [ "$STRACE" = 1 ] && command -v strace > /dev/null; then
  : > "$OUT/syscalls.tsv"
  set -- $(point_spec "$STRACE_POINT"); rw=$1 bs=$2 qd=$3 fflags=$(point_fio_flags "$STRACE_POINT")
  for t in "${TARGETS[@]}"; do
    [ -n "${PID[$t]}" ] || continue
    for x in $TRANSPORTS; do
      dev=${DEV[$t.$x]}
      timeout -k 5 $((STRACE_SECS + 60)) fio --name=s --ioengine=libaio --direct=1 "--filename=/dev/$dev" --rw="$rw" --bs="$bs" $fflags \
        --iodepth="$qd" --size="${LUN_MB}M" --time_based --runtime=$((STRACE_SECS + 6)) --norandommap --randrepeat=0 \
        --output-format=json --output="$OUT/raw/strace-$x-$t.json" > /dev/null 2>&1 &
      FIOPID=$!
      sleep 1.5
      # the disk's completed I/Os every 0.1 s with the wall clock strace -ttt stamps (bash
      # builtins only): the report counts the I/Os between the first and the last traced call,
      # so the seconds strace spends attaching to every thread do not count
      ( while :; do read -r r1 _ _ _ w1 _ < "/sys/block/$dev/stat"; echo "$EPOCHREALTIME $((r1 + w1))"; sleep 0.1; done ) > "$OUT/raw/strace-$x-$t.ios" &
      SAMPLER=$!
      timeout -s INT -k 5 "$STRACE_SECS" strace -f -ttt -q -p "${PID[$t]}" -o "$OUT/raw/strace-$x-$t.txt" 2> /dev/null
      kill "$SAMPLER" 2> /dev/null; wait "$SAMPLER" 2> /dev/null
      wait "$FIOPID"
      printf '%s\t%s\t%s\t%s\t%s\n' "$t" "$x" "$STRACE_POINT" "strace-$x-$t.txt" "strace-$x-$t.ios" >> "$OUT/syscalls.tsv"
      step "strace $t over $x: $(grep -c . "$OUT/raw/strace-$x-$t.txt") trace lines"
    done
  done
fi

# ---- where the CPU goes (iSER): per-thread user/system time and a system-wide profile
thread_ticks() { # PID: tid comm utime stime per thread
  local t c
  for t in /proc/"$1"/task/*; do
    c=$(cat "$t/comm" 2> /dev/null) || continue
    awk -v tid="${t##*/}" -v comm="${c// /_}" '{ sub(/^.*\) /, ""); print tid, comm, $12, $13 }' "$t/stat" 2> /dev/null
  done
}
if [ "$PROFILE" = 1 ]; then
  : > "$OUT/profile.tsv"
  for p in $PROFILE_POINTS; do
    set -- $(point_spec "$p"); rw=$1 bs=$2 qd=$3 fflags=$(point_fio_flags "$p")
    for t in "${TARGETS[@]}"; do
      [ -n "${PID[$t]}" ] || continue
      dev=${DEV[$t.iser]}
      f=profile-$p-$t
      timeout -k 5 $((PROFILE_SECS + 60)) fio --name=pr --ioengine=libaio --direct=1 "--filename=/dev/$dev" --rw="$rw" --bs="$bs" $fflags \
        --iodepth="$qd" --size="${LUN_MB}M" --time_based --runtime=$((PROFILE_SECS + 6)) --norandommap --randrepeat=0 \
        --output-format=json --output="$OUT/raw/$f.json" > /dev/null 2>&1 &
      FIOPID=$!
      sleep 2
      thread_ticks "${PID[$t]}" | sort > "$D/$f.t0"
      read -r r0 _ _ _ w0 _ < "/sys/block/$dev/stat"
      sleep "$PROFILE_SECS"
      read -r r1 _ _ _ w1 _ < "/sys/block/$dev/stat"
      thread_ticks "${PID[$t]}" | sort > "$D/$f.t1"
      wait "$FIOPID"
      { echo "ios $((r1 + w1 - r0 - w0))"; join "$D/$f.t0" "$D/$f.t1" | awk '{ print $1, $2, $3, $4, $6, $7 }'; } > "$OUT/raw/$f.threads"
      printf '%s\t%s\t%s\t%s\n' "$t" "$p" "$f.threads" "$((r1 + w1 - r0 - w0))" >> "$OUT/profile.tsv"
      step "profile $t $p: $((r1 + w1 - r0 - w0)) I/Os in ${PROFILE_SECS} s"
    done
  done
fi

# ---- where numatgtd's threads spend their CPU (PERF=1): `perf record -e task-clock` on the
# process (per-thread software clock: samples only where its threads run, which works under
# TCG where a system-wide profile lands in the idle loop) for PERF_SECS while fio runs each
# PROFILE_POINT over iSER; a flat profile by thread and symbol (no call graphs: the release
# build keeps no frame pointers, and DWARF unwinding is too slow in the guest).
if [ "${PERF:-0}" = 1 ] && command -v perf > /dev/null; then
  for p in $PROFILE_POINTS; do
    set -- $(point_spec "$p"); rw=$1 bs=$2 qd=$3 fflags=$(point_fio_flags "$p")
    for t in "${TARGETS[@]}"; do
      case "$t" in numatgtd*) ;; *) continue ;; esac
      dev=${DEV[$t.iser]}
      timeout -k 5 $((PERF_SECS + 90)) fio --name=pf --ioengine=libaio --direct=1 "--filename=/dev/$dev" --rw="$rw" --bs="$bs" $fflags \
        --iodepth="$qd" --size="${LUN_MB}M" --time_based --runtime=$((PERF_SECS + 8)) --norandommap --randrepeat=0 \
        --output-format=json --output="$OUT/raw/perf-$p-$t.json" > /dev/null 2>&1 &
      FIOPID=$!
      sleep 2
      timeout -k 5 $((PERF_SECS + 120)) perf record -q -B -N -e task-clock -F 97 -p "${PID[$t]}" -o "$D/perf-$p-$t.data" -- sleep "$PERF_SECS" > /dev/null 2>&1
      wait "$FIOPID"
      timeout 120 perf report -i "$D/perf-$p-$t.data" --no-children --sort comm,dso,sym --stdio 2> /dev/null |
        grep -v '^$' | head -n 80 > "$OUT/raw/perf-$p-$t.txt"
      step "perf $t $p: $(grep -m1 -o 'Samples: [0-9]*' "$OUT/raw/perf-$p-$t.txt" 2> /dev/null || echo 'no samples')"
    done
  done
fi
# numatgtd's metrics as they are at the end (cache, iSER data paths, throttling)
for t in "${TARGETS[@]}"; do
  [ -n "${METRICS[$t]:-}" ] && timeout 10 curl -sf "http://${METRICS[$t]}/metrics" > "$OUT/raw/metrics-$t.prom" 2> /dev/null
done

step "stopping: logout, LIO cleared, targets by PID"
stop_all
echo "ISER_BENCH_OK"
