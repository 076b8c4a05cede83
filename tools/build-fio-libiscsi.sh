#!/bin/bash
# Builds fio with the libiscsi I/O engine (Debian's fio package lacks it) and installs the
# binary as $FIO_DIR/fio (default: REPO/target/tools/fio). Idempotent: when that binary
# already knows `--enghelp=libiscsi` it only prints its path.
#
# Recipe (../shared/PEERS.md): a deb-src line for the machine's own Debian mirror,
# `apt-get source fio`, the build dependencies that matter (libiscsi-dev, zlib, libaio),
# `./configure --disable-native --enable-libiscsi && make -j2` (~40 s on 2 vCPUs).
# Needs root for apt-get (the build itself runs in $FIO_DIR/src).
#
# One patch (below): the engine's SYNCHRONIZE CACHE covers the LUN instead of running past
# its end; a binary built before that patch needs FORCE=1 (tools/bench/run.sh RBD=1 checks).
#
# Env: FIO_DIR (install dir), JOBS (make -j, default 2), FORCE=1 (rebuild even if present).
# Prints the installed binary's path as its last line of stdout.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
FIO_DIR=${FIO_DIR:-$REPO/target/tools}
JOBS=${JOBS:-2}
FIO=$FIO_DIR/fio
log() { echo "build-fio: $*" >&2; }

has_engine() { [ -x "$1" ] && timeout 10 "$1" --enghelp=libiscsi >/dev/null 2>&1; }

if [ "${FORCE:-0}" != 1 ] && has_engine "$FIO"; then
  log "already built: $("$FIO" --version)"
  echo "$FIO"
  exit 0
fi
[ "$(id -u)" = 0 ] || { log "needs root (apt-get)"; exit 1; }

# 1. deb-src for the mirror and suite the machine already uses (deb822 or one-line style).
SRC_LIST=/etc/apt/sources.list.d/numatgt-deb-src.sources
if ! apt-get indextargets --format '$(IDENTIFIER)' 2>/dev/null | grep -qx Sources; then
  mirror= suite=
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    mirror=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources)
    suite=$(awk '/^Suites:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources)
  fi
  if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
    read -r mirror suite < <(awk '$1 == "deb" && $2 ~ /^(http|https|file):/ { print $2, $3; exit }' /etc/apt/sources.list) || true
  fi
  [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
  [ -n "$suite" ] || suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
  log "adding deb-src $mirror $suite main ($SRC_LIST)"
  cat > "$SRC_LIST" <<EOF
Types: deb-src
URIs: $mirror
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  apt-get update -qq
fi

# 2. Build dependencies: the compiler, the libiscsi engine's library, and fio's usual ones.
need=()
for p in build-essential dpkg-dev pkg-config libiscsi-dev zlib1g-dev libaio-dev; do
  dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# 3. Source package, configure with libiscsi, build.
mkdir -p "$FIO_DIR/src"
cd "$FIO_DIR/src"
srcdir=$(find . -maxdepth 1 -type d -name 'fio-*' | sort | tail -n 1)
if [ -z "$srcdir" ]; then
  log "apt-get source fio (into $FIO_DIR/src)"
  apt-get source -qq fio >/dev/null
  srcdir=$(find . -maxdepth 1 -type d -name 'fio-*' | sort | tail -n 1)
fi
[ -n "$srcdir" ] || { log "apt-get source fio produced no fio-* directory"; exit 1; }
cd "$srcdir"
# fio's libiscsi engine (3.33) sends SYNCHRONIZE CACHE(16) for num_blocks * block_size
# *blocks* from LBA 0: past the end of the LUN, so a target that checks the range as SBC
# says (numatgtd) answers LBA OUT OF RANGE, tgtd flushes anyway, and fio's --end_fsync /
# --fsync only log "end_fsync failed" and go on. Ask for 0 blocks: to the end of the medium.
if grep -q 'iscsi_lun->num_blocks \* iscsi_lun->block_size, 0, 0' engines/libiscsi.c; then
  sed -i 's/iscsi_lun->num_blocks \* iscsi_lun->block_size, 0, 0/0, 0, 0/' engines/libiscsi.c
  log "patched engines/libiscsi.c: SYNCHRONIZE CACHE(16) of the whole LUN (0 blocks), not past its end"
fi
start=$(date +%s)
log "configure + make -j$JOBS in $PWD"
./configure --disable-native --enable-libiscsi > ../configure.log 2>&1 ||
  { tail -20 ../configure.log >&2; exit 1; }
grep -Eiq '^(lib)?iscsi( engine)? +yes' ../configure.log ||
  { log "configure did not enable libiscsi:"; grep -i iscsi ../configure.log >&2; exit 1; }
make -j"$JOBS" > ../make.log 2>&1 || { tail -30 ../make.log >&2; exit 1; }
install -m 0755 fio "$FIO.new"
mv -f "$FIO.new" "$FIO"
log "built in $(( $(date +%s) - start )) s"

has_engine "$FIO" || { log "$FIO lacks the libiscsi engine"; "$FIO" --enghelp=libiscsi >&2 || true; exit 1; }
log "ok: $("$FIO" --version), libiscsi engine present"
echo "$FIO"
