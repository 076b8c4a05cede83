#!/bin/sh
# Guest side of the rdma crate's verbs test (runs as root inside the QEMU guest, see
# vm-run.sh): soft-RoCE (rdma_rxe) on a dummy netdev with 192.168.77.1, then the host-built
# rdma_echo example as server (background) and client on that address: CM private data both
# ways, an inline Send, RDMA READ and RDMA WRITE of 8 KiB with two SGEs each, verified bytes,
# disconnect. Nothing is built here.
# Env: RDMA_ECHO  path of the rdma_echo binary as the guest sees it
# Prints VM_RDMA_ECHO_OK on success, RDMA_ECHO_TEST_FAIL: <why> otherwise (exit 1).
set -u
IP=192.168.77.1
ND=rdmanet0
PORT=7471
SLOG=/tmp/rdma-echo-server.log
SPID=

step() { echo "== $(cut -d' ' -f1 /proc/uptime)s: $*"; }
fail() {
  echo "RDMA_ECHO_TEST_FAIL: $*"
  echo "---- server log ----"
  cat "$SLOG" 2>/dev/null
  echo "---- dmesg (last 20) ----"
  dmesg | tail -n 20
  [ -n "$SPID" ] && kill -9 "$SPID" 2>/dev/null
  exit 1
}

[ -n "${RDMA_ECHO:-}" ] && [ -x "$RDMA_ECHO" ] || fail "rdma_echo binary not visible in the guest: '${RDMA_ECHO:-}'"
step "$(nproc) CPUs, kernel $(uname -r)"
modprobe -a rdma_rxe ib_uverbs rdma_ucm dummy || fail "modprobe rdma_rxe ib_uverbs rdma_ucm dummy"
ip link add "$ND" type dummy || fail "ip link add $ND type dummy"
ip addr add "$IP/24" dev "$ND" || fail "ip addr add $IP"
ip link set "$ND" up || fail "ip link set $ND up"
rdma link add rxe0 type rxe netdev "$ND" || fail "rdma link add rxe0 type rxe netdev $ND"
rdma link show rxe0/1
# RDMA memory registration pins pages: no memlock limit for the test
ulimit -l unlimited 2>/dev/null || echo "(ulimit -l unlimited refused: $(ulimit -l))"

step "server on $IP:$PORT"
"$RDMA_ECHO" server "$IP:$PORT" --timeout 60 > "$SLOG" 2>&1 &
SPID=$!
i=0
until timeout 5 rdma resource show cm_id 2>/dev/null | grep LISTEN | grep -q ":$PORT"; do
  i=$((i + 1)); [ $i -le 100 ] || fail "no RDMA CM listener on port $PORT after 20 s"
  kill -0 "$SPID" 2>/dev/null || fail "the server exited before listening"
  sleep 0.2
done

step "client"
timeout 120 "$RDMA_ECHO" client "$IP:$PORT" --timeout 60 > /tmp/rdma-echo-client.log 2>&1
crc=$?
cat /tmp/rdma-echo-client.log
[ "$crc" = 0 ] || fail "client exited with $crc"
grep -q "RDMA_ECHO_OK client" /tmp/rdma-echo-client.log || fail "client printed no success marker"
i=0
while kill -0 "$SPID" 2>/dev/null; do
  i=$((i + 1)); [ $i -le 150 ] || fail "server still running 30 s after the client finished"
  sleep 0.2
done
wait "$SPID"
src=$?
SPID=
echo "---- server log ----"
cat "$SLOG"
[ "$src" = 0 ] || fail "server exited with $src"
grep -q "RDMA_ECHO_OK server" "$SLOG" || fail "server printed no success marker"
timeout 5 rdma statistic show link rxe0/1 2>/dev/null | grep -o -E '(sent_pkts|rcvd_pkts) [0-9]+' | tr '\n' ' '
echo
echo "VM_RDMA_ECHO_OK"
