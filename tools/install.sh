#!/bin/bash
# Install numatgt for production use on Debian 12:
#   $PREFIX/sbin/numatgtd, $PREFIX/sbin/numatgtadm       (PREFIX default /usr/local)
#   /etc/systemd/system/numatgtd.service                 (Type=notify, reload = numatgtadm --reload)
#   /etc/numatgt/numatgt.yaml                            (only if absent: never overwritten;
#                                                         root:numatgt 0640, it may hold secrets)
#   /usr/lib/sysusers.d/numatgt.conf                     (the system user numatgt the unit
#                                                         runs as, created here)
#   /var/lib/numatgt                                     (state directory, numatgt's)
# Usage: sudo tools/install.sh [--no-build]
#   --no-build   install what target/release already holds
#   DESTDIR=dir  stage the files under dir (packaging); systemd is then not told
# Afterwards: edit /etc/numatgt/numatgt.yaml, then `systemctl enable --now numatgtd`.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}

if [ "${1:-}" != --no-build ]; then
  tools/install-build-deps.sh
  cargo build --release -p target-server -p tools
fi
for b in numatgtd numatgtadm; do
  [ -x "target/release/$b" ] || { echo "install: target/release/$b missing (build first)" >&2; exit 1; }
  install -D -m 0755 "target/release/$b" "$DESTDIR$PREFIX/sbin/$b"
done
unit=$(mktemp)
trap 'rm -f "$unit"' EXIT
sed "s#/usr/local/sbin/#$PREFIX/sbin/#g" tools/systemd/numatgtd.service > "$unit"
install -D -m 0644 "$unit" "$DESTDIR/etc/systemd/system/numatgtd.service"
install -D -m 0644 tools/systemd/numatgt.sysusers "$DESTDIR/usr/lib/sysusers.d/numatgt.conf"
if [ -e "$DESTDIR/etc/numatgt/numatgt.yaml" ]; then
  echo "install: keeping the existing $DESTDIR/etc/numatgt/numatgt.yaml"
else
  install -D -m 0640 config/examples/default.yaml "$DESTDIR/etc/numatgt/numatgt.yaml"
fi
install -d -m 0750 "$DESTDIR/var/lib/numatgt"
if [ -z "$DESTDIR" ]; then
  # the service user: systemd-sysusers reads the file just installed; adduser where there
  # is no systemd
  if ! getent passwd numatgt >/dev/null; then
    if command -v systemd-sysusers >/dev/null; then
      systemd-sysusers numatgt.conf
    else
      adduser --system --group --home /var/lib/numatgt --no-create-home \
        --shell /usr/sbin/nologin numatgt
    fi
  fi
  # the daemon reads its configuration as numatgt (root keeps writing it)
  chgrp numatgt /etc/numatgt/numatgt.yaml && chmod g+r,o-rwx /etc/numatgt/numatgt.yaml
  chown numatgt:numatgt /var/lib/numatgt
fi
if [ -z "$DESTDIR" ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
fi
echo "install: done. Configure /etc/numatgt/numatgt.yaml, then: systemctl enable --now numatgtd"
echo "install: numatgtd runs as user numatgt (group disk for block devices): LUN files must be"
echo "install: numatgt's or read/write for the group disk (see the README, least privilege)"
