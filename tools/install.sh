#!/bin/bash
# Install numatgt for production use on Debian 12:
#   $PREFIX/sbin/numatgtd, $PREFIX/sbin/numatgtadm       (PREFIX default /usr/local)
#   /etc/systemd/system/numatgtd.service                 (Type=notify, reload = SIGHUP)
#   /etc/numatgt/numatgt.yaml                            (only if absent: never overwritten)
#   /var/lib/numatgt                                     (state directory)
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
if [ -e "$DESTDIR/etc/numatgt/numatgt.yaml" ]; then
  echo "install: keeping the existing $DESTDIR/etc/numatgt/numatgt.yaml"
else
  install -D -m 0644 config/examples/default.yaml "$DESTDIR/etc/numatgt/numatgt.yaml"
fi
install -d -m 0750 "$DESTDIR/var/lib/numatgt"
if [ -z "$DESTDIR" ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
fi
echo "install: done. Configure /etc/numatgt/numatgt.yaml, then: systemctl enable --now numatgtd"
