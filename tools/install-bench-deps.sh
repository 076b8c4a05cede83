#!/bin/bash
# Install what tools/bench/run.sh needs beyond the test dependencies (tools/install-test-deps.sh:
# tgt, libiscsi-bin, the QEMU guest and rdma-core) on a Debian machine:
# gnuplot-nox for the PNG chart; for tools/bench/iser.sh (the iSER benchmark in the guest,
# which runs the host's userspace) Debian's fio (libaio engine: the load on the kernel
# initiator's disks), python3-rtslib-fb (configures LIO, the kernel target) and strace
# (system calls per I/O). Root, idempotent,
# non-interactive; returns at once when everything is there. fio with the libiscsi engine is
# built separately (tools/build-fio-libiscsi.sh; run.sh calls it when target/tools/fio is
# missing).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
[ "$(id -u)" = 0 ] || { echo "install-bench-deps: must run as root" >&2; exit 1; }
PKGS=(gnuplot-nox fio python3-rtslib-fb strace)
installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]; }
missing=()
for p in "${PKGS[@]}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} = 0 ]; then echo "install-bench-deps: everything already installed"; exit 0; fi
echo "install-bench-deps: installing ${missing[*]}"
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
for p in "${PKGS[@]}"; do installed "$p" || { echo "install-bench-deps: $p still not installed" >&2; exit 1; }; done
echo "install-bench-deps: done"
