# Helpers the benchmark scripts share (sourced, not run): a free loopback port, waiting until
# a daemon itself listens on its port, and stopping a daemon by its PID.

free_port() { # first port from $1 upwards that nothing listens on (bounded scan)
  local p
  for p in $(seq "$1" $(($1 + 200))); do
    ss -Hltn "sport = :$p" | grep -q . || { echo "$p"; return 0; }
  done
  echo "bench: no free port near $1" >&2; return 1
}

stop_pid() { # PID: SIGTERM, up to 10 s, then SIGKILL (the PID must be a child of this shell)
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return 0; }; sleep 0.1; done
  echo "bench: pid $pid ignored SIGTERM, killing" >&2
  kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
}

wait_port() { # PORT PID: until PID itself listens on PORT (at most 10 s)
  local i
  for i in $(seq 1 100); do
    ss -Hltnp "sport = :$1" | grep -q "pid=$2," && return 0
    kill -0 "$2" 2>/dev/null || { echo "bench: target pid $2 exited" >&2; return 1; }
    sleep 0.1
  done
  echo "bench: nothing listens on port $1" >&2; return 1
}

free_ctl() { # first tgtd control port from $1 whose socket nobody listens on (bounded scan;
  local c l  # tgtd leaves its socket file behind and reuses a stale one)
  l=$(ss -Hxl)
  for c in $(seq "$1" $(($1 + 50))); do
    grep -q "/var/run/tgtd/socket\.$c " <<< "$l" || { echo "$c"; return 0; }
  done
  echo "bench: no free control port near $1" >&2; return 1
}

stop_tgtd_pid() { # CTL PID: tgtd stops only once offline, its targets deleted, then the system
  tgtadm -C "$1" --op update --mode sys --name State -v offline >/dev/null 2>&1
  tgtadm -C "$1" --lld iscsi --op delete --mode target --tid 1 --force >/dev/null 2>&1
  tgtadm -C "$1" --op delete --mode system >/dev/null 2>&1
  stop_pid "$2"
}

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; } # PID: utime + stime, all threads

median() { # numbers on stdin (spaces or lines) -> the median (the lower one of an even count)
  tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "n/a"; else print a[int((NR + 1) / 2)] }'
}

has_libiscsi() { [ -n "$1" ] && [ -x "$1" ] && timeout 10 "$1" --enghelp=libiscsi >/dev/null 2>&1; } # FIO
