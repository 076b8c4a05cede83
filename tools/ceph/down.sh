#!/bin/bash
# Stops the cluster tools/ceph/up.sh started in DIR by the PIDs its daemons recorded
# (OSDs first, then the monitor), waits for each to exit (SIGKILL after 10 s), then removes
# DIR. Safe to run twice, or on a half-started cluster.
#   tools/ceph/down.sh DIR
set -uo pipefail
DIR=${1:?usage: down.sh DIR}
[ -d "$DIR" ] || exit 0
stop() { # PIDFILE
  local p
  p=$(cat "$1" 2>/dev/null) || return 0
  [[ "$p" =~ ^[0-9]+$ ]] || return 0
  kill -0 "$p" 2>/dev/null || return 0
  # only a Ceph daemon of this cluster: its command line names this directory's conf
  tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "$DIR/ceph.conf" || return 0
  kill -TERM "$p" 2>/dev/null
  for _ in $(seq 1 40); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.25; done
  kill -KILL "$p" 2>/dev/null
  echo "down.sh: $(basename "$1" .pid) (pid $p) needed SIGKILL" >&2
}
for f in "$DIR"/run/osd.*.pid; do [ -e "$f" ] && stop "$f"; done
for f in "$DIR"/run/mon.*.pid; do [ -e "$f" ] && stop "$f"; done
rm -rf "$DIR"
