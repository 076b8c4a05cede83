# Guest step of the iSER test (sourced by guest-iser.sh, numatgtd only, with no session
# logged in): many iSER sessions from one host at once (issue 24).
#   - scale: for N in ISER_SCALE_NS (1 8 32), N open-iscsi ifaces of transport iser log in
#     at once to the same target and portal; every login must succeed with transport iser
#     and give a disk, numatgtd must hold N queue pairs; then one ISER_SCALE line of what the
#     N connections cost: numatgtd's registered memory as the kernel counts it (`rdma
#     resource show mr`, summed over its threads and protection domains) and its VmPin, its queue pairs and SRQs,
#     and its own iSER metrics when it has them (n/a otherwise); per_conn_kib is the MR
#     bytes above the baseline with no session (the device's shared objects, registered
#     once) divided by N. All N log out at once: 0 queue pairs within 15 s.
#   - storm: ISER_STORM_ROUNDS (10) rounds of 4 logins at once, then 4 logouts at once;
#     every one must succeed; then 0 queue pairs within 15 s, numatgtd alive, and a fresh
#     login reads the same first DATA_MB MiB as before (ISER_STORM line).
# Every iscsiadm is bounded by timeout. ISER_MAX_CONN_KIB bounds per_conn_kib at the largest
# N (default 1536 when that N is 32 or more, where the shared pools are spread thin; 0: no
# bound). Prints a Markdown table of the ISER_SCALE lines (with the MR count).
# Measured with the binary before issue 24's shared receive queues: 5705 KiB registered per
# connection at 1, 8 and 32 connections (two 242 MiB cache arenas once per device besides).
# Uses from guest-iser.sh: IQN, ISER_PORTAL, IFACE, IP, TPID, LUN_MB, ISER_SHA, DEV, fail,
# step, qps, login, logout, raw_sha.

SC_NS=${ISER_SCALE_NS:-1 8 32}
SC_ROUNDS=${ISER_STORM_ROUNDS:-10}
SC_OUT=/tmp/iser-scale
SC_T0=$(cut -d. -f1 /proc/uptime)
mkdir -p "$SC_OUT"
SC_NMAX=0
for n in $SC_NS; do [ "$n" -gt "$SC_NMAX" ] && SC_NMAX=$n; done
# ifaces: as many as the most sessions at once, 4 at least (the storm's)
SC_MAX=$SC_NMAX
[ "$SC_MAX" -ge 4 ] || SC_MAX=4

# sc_res KIND: "COUNT BYTES" of numatgtd's objects in `rdma resource show KIND` (mr, srq,
# qp): those made by one of its threads (pid) or in one of its protection domains (pdn; the
# kernel prints no pid once the thread that made an object has exited, as numatgtd's
# rdma-register thread does after registering the cache arenas); BYTES sums mrlen
sc_res() {
  _tids=" $TPID $(ls "/proc/$TPID/task" 2>/dev/null | tr '\n' ' ')"
  { timeout 5 rdma resource show pd 2>/dev/null | sed 's/^/PD /'
    timeout 5 rdma resource show "$1" 2>/dev/null; } | awk -v tids="$_tids" '
    { pid = ""; pdn = ""; len = 0
      for (i = 1; i < NF; i++) {
        if ($i == "pid") pid = $(i + 1)
        else if ($i == "pdn") pdn = $(i + 1)
        else if ($i == "mrlen") len = $(i + 1)
      }
      mine = pid != "" && index(tids, " " pid " ")
      if ($1 == "PD") { if (mine) pds[pdn] = 1; next }
      if (mine || (pdn != "" && pdn in pds)) { n++; b += len }
    }
    END { printf "%d %.0f\n", n, b }'
}
# the guest's iproute2 may not know SRQs
if timeout 5 rdma resource show srq >/dev/null 2>&1; then SC_SRQ=1; else SC_SRQ=0; fi
sc_vmpin_kb() { awk '$1 == "VmPin:" { print $2 }' "/proc/$TPID/status"; }
# sc_metric FAMILY [LABEL=\"VALUE\"]: the sum of FAMILY's samples (those carrying the label
# when given) in the last scrape, n/a when the daemon has no such family
sc_metric() {
  awk -v f="$1" -v sel="${2:-}" '
    $1 == f || index($1, f "{") == 1 { seen = 1; if (sel == "" || index($1, sel)) s += $NF }
    END { if (seen) printf "%.0f\n", s; else print "n/a" }' "$SC_OUT/metrics.txt"
}
# sc_disks: SC_DISKS, the iSCSI sessions' disks; SC_ODD, those not of the LUN's size
sc_disks() {
  SC_DISKS=0 SC_ODD=
  for _b in /sys/class/iscsi_session/session*/device/target*/*/block/*; do
    [ -b "/dev/${_b##*/}" ] || continue
    SC_DISKS=$((SC_DISKS + 1))
    _s=$(cat "$_b/size")
    [ "$_s" = $((LUN_MB * 2048)) ] || SC_ODD="$SC_ODD ${_b##*/}:$_s"
  done
}
# sc_each FIRST LAST OP: iscsiadm --OP (login | logout) of ifaces iscale<FIRST..LAST> all at
# once, each bounded; fails naming every one that did not succeed
sc_each() {
  _pids=
  for _i in $(seq "$1" "$2"); do
    timeout 90 iscsiadm -m node -T "$IQN" -p "$ISER_PORTAL" -I "iscale$_i" "--$3" > "$SC_OUT/$3-$_i.txt" 2>&1 &
    _pids="$_pids $!"
  done
  _i=$1 _bad=
  for _p in $_pids; do
    wait "$_p" || { _bad="$_bad iscale$_i(status $?)"; cat "$SC_OUT/$3-$_i.txt"; }
    _i=$((_i + 1))
  done
  [ -z "$_bad" ] || fail "iSER $3 via$_bad"
}
sc_no_qps() { [ "$(qps)" = 0 ]; }
# sc_qps_gone WHAT: 0 queue pairs of numatgtd within 15 s, else the QP list and a failure
sc_qps_gone() {
  _i=0
  until sc_no_qps; do
    _i=$((_i + 1))
    if [ $_i -gt 75 ]; then
      echo "---- rdma resource show qp ----"
      timeout 5 rdma resource show qp
      fail "numatgtd still holds $(qps) queue pair(s) 15 s after $1"
    fi
    kill -0 "$TPID" 2>/dev/null || fail "numatgtd exited after $1"
    sleep 0.2
  done
}

step "iSER scale: $SC_MAX ifaces of transport iser, node records for $IQN at $ISER_PORTAL"
# the first iface and its node record by iscsiadm, the others copied from them by name: each
# iscsiadm costs a fifth of a second under TCG (open-iscsi's records are one file per iface
# and one per node, target portal group and iface)
iscsiadm -m iface -I iscale1 -o new >/dev/null || fail "iscsiadm iface new iscale1"
iscsiadm -m iface -I iscale1 -o update -n iface.transport_name -v iser >/dev/null ||
  fail "iface iscale1 transport iser"
iscsiadm -m node -o new -T "$IQN" -p "$ISER_PORTAL,1" -I iscale1 >/dev/null ||
  fail "iscsiadm node -o new $IQN $ISER_PORTAL,1 iscale1"
iscsiadm -m node -T "$IQN" -p "$ISER_PORTAL" -I iscale1 -o update -n node.session.initial_login_retry_max -v 2 ||
  fail "iscsiadm update login retries"
iscsiadm -m node -T "$IQN" -p "$ISER_PORTAL" -I iscale1 -o update -n node.conn[0].timeo.login_timeout -v 30 ||
  fail "iscsiadm update login timeout"
SC_IFREC= SC_NODEREC=
for d in /etc/iscsi /var/lib/iscsi; do
  for f in "$d/ifaces/iscale1" "$d/nodes/$IQN/"*/iscale1; do
    [ -f "$f" ] || continue
    case $f in */ifaces/*) SC_IFREC=$f ;; *) SC_NODEREC=$f ;; esac
  done
done
for i in $(seq 2 "$SC_MAX"); do
  if [ -n "$SC_IFREC" ] && [ -n "$SC_NODEREC" ]; then
    sed "s/^iface.iscsi_ifacename = iscale1\$/iface.iscsi_ifacename = iscale$i/" "$SC_IFREC" > "${SC_IFREC%1}$i" &&
      sed "s/^iface.iscsi_ifacename = iscale1\$/iface.iscsi_ifacename = iscale$i/" "$SC_NODEREC" > "${SC_NODEREC%1}$i" ||
      fail "copy of iscale1's records for iscale$i"
  else
    iscsiadm -m iface -I "iscale$i" -o new >/dev/null || fail "iscsiadm iface new iscale$i"
    iscsiadm -m iface -I "iscale$i" -o update -n iface.transport_name -v iser >/dev/null ||
      fail "iface iscale$i transport iser"
    iscsiadm -m node -o new -T "$IQN" -p "$ISER_PORTAL,1" -I "iscale$i" >/dev/null ||
      fail "iscsiadm node -o new $IQN $ISER_PORTAL,1 iscale$i"
    iscsiadm -m node -T "$IQN" -p "$ISER_PORTAL" -I "iscale$i" -o update -n node.session.initial_login_retry_max -v 2 ||
      fail "iscsiadm update login retries"
  fi
done
step "ifaces and node records made"

# the baseline: after a login and logout, when the device's shared objects exist
sc_each 1 1 login
sc_each 1 1 logout
sc_qps_gone "the baseline login's logout"
# numatgtd registers its cache arenas on a device in a thread of their own after the first
# connection: the baseline is taken once that is done (at most 60 s)
sc_registering() { grep -q -x rdma-register /proc/"$TPID"/task/*/comm 2>/dev/null; }
i=0
while sc_registering; do
  i=$((i + 1)); [ $i -le 300 ] || break
  sleep 0.2
done
set -- $(sc_res mr)
SC_BASE_MR=$2
SC_BASE_PIN=$(sc_vmpin_kb)
step "baseline with no session: numatgtd has $1 MR(s), $SC_BASE_MR bytes; VmPin ${SC_BASE_PIN} kB"
timeout 5 rdma resource show mr 2>&1 | grep -v "comm \[" | head -n 12

SC_TABLE=
for n in $SC_NS; do
  t0=$(cut -d' ' -f1 /proc/uptime)
  sc_each 1 "$n" login
  t1=$(cut -d' ' -f1 /proc/uptime)
  got=$(timeout 10 iscsiadm -m session 2>/dev/null | grep -c "$ISER_PORTAL,1 $IQN")
  iser=$(timeout 10 iscsiadm -m session 2>/dev/null | grep -c "^iser: .*$ISER_PORTAL,1 $IQN")
  [ "$got" = "$n" ] && [ "$iser" = "$n" ] ||
    { timeout 10 iscsiadm -m session; fail "$n iSER logins: $got session(s), $iser over iser"; }
  i=0
  sc_disks
  while [ "$SC_DISKS" != "$n" ]; do
    i=$((i + 1)); [ $i -le 150 ] || fail "$n iSER sessions: $SC_DISKS disk(s) after 30 s"
    sleep 0.2
    sc_disks
  done
  [ -z "$SC_ODD" ] || fail "$n iSER sessions: disks not of $LUN_MB MiB (name:sectors):$SC_ODD"
  nq=$(qps)
  [ "$nq" = "$n" ] || { timeout 5 rdma resource show qp; fail "$n iSER sessions: numatgtd holds $nq queue pair(s)"; }
  set -- $(sc_res mr)
  mrs=$1 mr_bytes=$2
  vmpin=$(sc_vmpin_kb)
  if [ $SC_SRQ = 1 ]; then set -- $(sc_res srq); srqs=$1; else srqs=n/a; fi
  timeout 10 curl -sf http://127.0.0.1:9470/metrics > "$SC_OUT/metrics.txt" || fail "metrics endpoint with $n iSER sessions"
  mconns=$(sc_metric numatgt_iser_connections)
  [ "$mconns" = n/a ] || [ "$mconns" = "$n" ] || fail "$n iSER sessions: numatgt_iser_connections says $mconns"
  per=$(awk -v a="$mr_bytes" -v b="$SC_BASE_MR" -v n="$n" 'BEGIN { printf "%.1f", (a - b) / n / 1024 }')
  line="conns=$n mr_bytes=$mr_bytes vmpin_kb=$vmpin qps=$nq srqs=$srqs"
  line="$line reg_receive=$(sc_metric numatgt_iser_registered_bytes 'kind="receive"')"
  line="$line reg_send=$(sc_metric numatgt_iser_registered_bytes 'kind="send"')"
  line="$line reg_staging=$(sc_metric numatgt_iser_registered_bytes 'kind="staging"')"
  line="$line reg_cache=$(sc_metric numatgt_iser_registered_bytes 'kind="cache"')"
  line="$line posted_shared=$(sc_metric numatgt_iser_posted_receives 'queue="shared"')"
  line="$line posted_conn=$(sc_metric numatgt_iser_posted_receives 'queue="connection"')"
  line="$line per_conn_kib=$per"
  echo "ISER_SCALE $line"
  SC_TABLE="$SC_TABLE
$line mrs=$mrs srq_metric=$(sc_metric numatgt_iser_shared_receive_queues)"
  [ "$n" = "$SC_NMAX" ] && SC_NMAX_PER=$per
  sc_each 1 "$n" logout
  sc_qps_gone "$n iSER sessions logged out"
  kill -0 "$TPID" 2>/dev/null || fail "numatgtd exited after $n iSER sessions"
  timeout 10 iscsiadm -m session >/dev/null 2>&1 && fail "a session is left after $n iSER logouts"
  t2=$(cut -d' ' -f1 /proc/uptime)
  step "$n iSER sessions: logins in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s, all logged out and their queue pairs gone in $(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.1f", b - a }') s"
done

echo "| iSER connections | MRs | MR bytes | VmPin kB | QPs | SRQs | reg. receive | reg. send | reg. staging | reg. cache | posted shared | posted per conn. | per conn. KiB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
echo "$SC_TABLE" | while read -r l; do
  [ -n "$l" ] || continue
  # shellcheck disable=SC2086
  ( for kv in $l; do eval "${kv%%=*}='${kv#*=}'"; done
    echo "| $conns | $mrs | $mr_bytes | $vmpin_kb | $qps | $srqs | $reg_receive | $reg_send | $reg_staging | $reg_cache | $posted_shared | $posted_conn | $per_conn_kib |" )
done
echo "(per conn. KiB: MR bytes above the $SC_BASE_MR with no session, over the connections)"
SC_BOUND=${ISER_MAX_CONN_KIB:-}
if [ -z "$SC_BOUND" ] && [ "$SC_NMAX" -ge 32 ]; then SC_BOUND=1536; fi
if [ -n "$SC_BOUND" ] && [ "$SC_BOUND" != 0 ]; then
  ISER_MAX_CONN_KIB=$SC_BOUND
  awk -v p="$SC_NMAX_PER" -v m="$ISER_MAX_CONN_KIB" 'BEGIN { exit !(p <= m) }' ||
    fail "registered memory per iSER connection at $SC_NMAX connections: $SC_NMAX_PER KiB, more than ISER_MAX_CONN_KIB=$ISER_MAX_CONN_KIB"
fi

step "iSER storm: $SC_ROUNDS rounds of 4 logins at once, then 4 logouts at once"
t0=$(cut -d' ' -f1 /proc/uptime)
SC_LOGINS=0
r=0
while [ $r -lt "$SC_ROUNDS" ]; do
  sc_each 1 4 login
  sc_each 1 4 logout
  SC_LOGINS=$((SC_LOGINS + 4))
  r=$((r + 1))
done
sc_qps_gone "the storm"
kill -0 "$TPID" 2>/dev/null || fail "numatgtd exited in the storm"
timeout 10 iscsiadm -m session >/dev/null 2>&1 && { timeout 10 iscsiadm -m session; fail "a session is left after the storm"; }
t1=$(cut -d' ' -f1 /proc/uptime)
login "$IQN" "$ISER_PORTAL" "$IFACE" iser
SC_SHA=$(raw_sha)
[ "$SC_SHA" = "$ISER_SHA" ] || fail "after the storm the first $DATA_MB MiB read $SC_SHA, want $ISER_SHA"
logout "$IQN" "$ISER_PORTAL" "$IFACE"
sc_qps_gone "the login after the storm"
echo "ISER_STORM rounds=$SC_ROUNDS logins=$SC_LOGINS secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') qps_after=$(qps)"

if [ -n "$SC_IFREC" ] && [ -n "$SC_NODEREC" ]; then
  rm -f "${SC_IFREC%1}"[0-9]* "${SC_NODEREC%1}"[0-9]*
else
  for i in $(seq 1 "$SC_MAX"); do
    iscsiadm -m node -T "$IQN" -p "$ISER_PORTAL" -I "iscale$i" -o delete >/dev/null 2>&1
    iscsiadm -m iface -I "iscale$i" -o delete >/dev/null 2>&1
  done
fi
step "iSER scale and storm done in $(( $(cut -d. -f1 /proc/uptime) - SC_T0 )) s; ifaces removed"
