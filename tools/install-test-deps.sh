#!/bin/bash
# Install everything numatgt's tests need on a Debian 12 (bookworm) machine.
# Root, idempotent, non-interactive; returns quickly when everything is already there.
#
# - libiscsi-bin: iscsi-ls / iscsi-inq / iscsi-readcapacity16 / iscsi-test-cu / iscsi-perf
# - tgt: Debian's tgtd, the reference target (its service is never started here)
# - qemu-block-extra: qemu-img's libiscsi driver; must match the installed qemu-utils, which on
#   these machines comes from bookworm-backports, so it is taken from there too
# - qemu-system-x86 + linux-image-amd64 (backports, 6.12) + busybox-static ...: the VM test
# - libhwloc-dev libudev-dev pkg-config: to build the cache crate (hwlocality)
# - systemd (same version as the installed libsystemd0): systemd-analyze, to verify the
#   shipped unit file
# - ibverbs-providers, ibverbs-utils, curl: the iSER guest test (rxe provider, ibv_devinfo;
#   curl reads the metrics in the guest)
# - multipath-tools: multipathd + multipath in the dm-multipath guest test (ALUA over two
#   gateways); its service is not started on the host (policy-rc.d below); sg3-utils:
#   sg_rtpg, the RBD variant's REPORT TARGET PORT GROUPS checks
# - prometheus, python3: Prometheus 2.42 and promtool for the metrics tests (python3 -m
#   http.server serves their static exposition fixture); the tests start their own server by
#   PID on a free 127.0.0.1 port with a temp TSDB. The packaged service is not started
#   (policy-rc.d below) and, when this run installs it on a systemd host, disabled, so no
#   stray Prometheus listens on :9090 after a reboot; the tests never use it either way.
# - ceph-mon ceph-osd ceph-common librbd1 uuid-runtime bc: the RBD backing-store tests bring up
#   their own one-monitor, one-OSD cluster (tools/ceph/up.sh, loopback, free port, stopped by
#   PID); no Ceph service is enabled. tgt-rbd: tgtd's bs_rbd, the reference for benchmarks.
# - genisoimage, eject: the CD/DVD LUN tests (ISO 9660 images; the tray opened and closed in
#   the guest)
# - dpkg-dev, pandoc, binutils: tools/build-deb.sh (dpkg-shlibdeps for Depends, numatgt.yaml(5)
#   from docs/configuration.md, strip); lintian, man-db, groff-base, zsh: the package test
#   (tests/tests/deb_package.rs) lints the .deb, renders its man pages, loads its completions
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

if [ "$(id -u)" != 0 ]; then
  echo "install-test-deps: must run as root" >&2
  exit 1
fi

BOOKWORM_PKGS=(libiscsi-bin tgt chromium libhwloc-dev pkg-config cmake libclang-dev busybox-static
  cpio xz-utils zstd kmod iproute2 util-linux procps e2fsprogs open-iscsi numactl prometheus
  python3 ibverbs-providers ibverbs-utils curl ceph-mon ceph-osd ceph-common librbd1 uuid-runtime bc
  tgt-rbd multipath-tools sg3-utils genisoimage eject mt-st mtx
  dpkg-dev pandoc binutils lintian man-db groff-base zsh mmdebstrap fio)
BACKPORTS_PKGS=(qemu-system-x86 linux-image-amd64 qemu-utils qemu-block-extra)
# -dev packages that must match an already-installed runtime library exactly (machines of this
# kind may carry a backports libudev1)
MATCHED_DEV=(libudev1:libudev-dev libsystemd0:systemd)

installed() { # PKG -> 0 if dpkg has it fully installed
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}
have_backports() {
  grep -rqs '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/
}
qemu_versions_match() {
  installed qemu-utils && installed qemu-block-extra &&
    [ "$(dpkg-query -W -f='${Version}' qemu-utils)" = "$(dpkg-query -W -f='${Version}' qemu-block-extra)" ]
}

missing=()
for p in "${BOOKWORM_PKGS[@]}" "${BACKPORTS_PKGS[@]}" "${MATCHED_DEV[@]#*:}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} = 0 ] && have_backports && qemu_versions_match && ls /boot/vmlinuz-6.* >/dev/null 2>&1; then
  echo "install-test-deps: everything already installed"
  exit 0
fi
echo "install-test-deps: missing: ${missing[*]:-(none; checking backports/qemu versions)}"

# bookworm-backports on the mirror this machine already uses
if ! have_backports; then
  MIRROR=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$MIRROR" ] || MIRROR=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$MIRROR" ] || MIRROR=http://deb.debian.org/debian
  echo "install-test-deps: adding bookworm-backports from $MIRROR"
  cat > /etc/apt/sources.list.d/bookworm-backports.sources <<SRC
Types: deb
URIs: $MIRROR
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi

apt-get update -q

# Keep packaged daemons (tgtd, iscsid) from being started on the host by maintainer scripts.
RM_POLICY=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  RM_POLICY=1
fi
cleanup() { if [ "$RM_POLICY" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi; }
trap cleanup EXIT

APT=(apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)

# qemu + the 6.12 kernel from backports (backports qemu-utils "Breaks" bookworm's qemu-system 7.2)
"${APT[@]}" -t bookworm-backports qemu-system-x86 linux-image-amd64 qemu-utils
# qemu-block-extra must be exactly the qemu-utils version
QVER=$(dpkg-query -W -f='${Version}' qemu-utils)
"${APT[@]}" -t bookworm-backports "qemu-block-extra=$QVER"
# -dev packages pinned to their runtime library's version (whichever suite that came from)
for pair in "${MATCHED_DEV[@]}"; do
  lib=${pair%%:*} dev=${pair#*:}
  if installed "$lib"; then
    "${APT[@]}" "$dev=$(dpkg-query -W -f='${Version}' "$lib")"
  else
    "${APT[@]}" "$dev"
  fi
done
# everything else from bookworm itself
PROM_BEFORE=0; installed prometheus && PROM_BEFORE=1
"${APT[@]}" "${BOOKWORM_PKGS[@]}"
if [ "$PROM_BEFORE" = 0 ] && [ -d /run/systemd/system ]; then
  systemctl disable --now prometheus.service || true
fi

for p in "${BOOKWORM_PKGS[@]}" "${BACKPORTS_PKGS[@]}" "${MATCHED_DEV[@]#*:}"; do
  installed "$p" || { echo "install-test-deps: $p still not installed" >&2; exit 1; }
done
echo "install-test-deps: done (kernel: $(ls /boot/vmlinuz-* | tr '\n' ' '))"
