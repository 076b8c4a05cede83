#!/bin/bash
# Install the system libraries numatgt needs to BUILD on Debian 12 (bookworm): libhwloc-dev
# (hwlocality), libudev-dev (pinned to the installed libudev1, which machines of this kind may
# carry from bookworm-backports), pkg-config, cmake and libclang-dev (rdma-mummy-sys, the
# RDMA binding of the `rdma` crate: it compiles its loader stubs and runs bindgen). Root, idempotent, non-interactive; quick when
# everything is there. tools/demo.sh runs it; tools/install-test-deps.sh installs a superset.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]; }
missing=()
for p in libhwloc-dev libudev-dev pkg-config cmake libclang-dev; do installed "$p" || missing+=("$p"); done
[ ${#missing[@]} = 0 ] && { echo "install-build-deps: everything already installed"; exit 0; }
if [ "$(id -u)" != 0 ]; then
  echo "install-build-deps: run as root to install ${missing[*]}" >&2
  exit 1
fi
have_backports() { grep -rqs '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; }
if installed libudev1 && ! have_backports && dpkg-query -W -f='${Version}' libudev1 | grep -q bpo; then
  # the installed libudev1 came from backports: its -dev package is only there
  MIRROR=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$MIRROR" ] || MIRROR=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$MIRROR" ] || MIRROR=http://deb.debian.org/debian
  cat > /etc/apt/sources.list.d/bookworm-backports.sources <<SRC
Types: deb
URIs: $MIRROR
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
apt-get update -q
APT=(apt-get install -y -q --no-install-recommends)
if installed libudev1; then
  "${APT[@]}" "libudev-dev=$(dpkg-query -W -f='${Version}' libudev1)" libhwloc-dev pkg-config cmake libclang-dev
else
  "${APT[@]}" libudev-dev libhwloc-dev pkg-config cmake libclang-dev
fi
for p in libhwloc-dev libudev-dev pkg-config cmake libclang-dev; do
  installed "$p" || { echo "install-build-deps: $p still not installed" >&2; exit 1; }
done
echo "install-build-deps: done"
