#!/bin/bash
# Build numatgt's Debian package from this tree, in one command:
#   target/debian/numatgt_<version>_<arch>.deb        (version: tools/deb/changelog)
# A staged tree packed by `dpkg-deb --build --root-owner-group`, no debian/ source
# package: dpkg-dev (dpkg-shlibdeps, dpkg-parsechangelog) and pandoc are the only tools it
# needs besides cargo; tools/deb/README.md says what goes where and why.
#
#   /usr/sbin/numatgtd, /usr/sbin/numatgtadm       release build, stripped
#   /lib/systemd/system/numatgtd.service           tools/systemd/, /usr/local/sbin -> /usr/sbin
#   /usr/lib/sysusers.d/numatgt.conf               tools/systemd/numatgt.sysusers
#   /usr/lib/tmpfiles.d/numatgt.conf               tools/deb/numatgt.tmpfiles
#   /etc/numatgt/numatgt.yaml                      config/examples/default.yaml (conffile)
#   /usr/share/man/man8/numatgtd.8.gz, numatgtadm.8.gz   `--generate man` of the binaries
#   /usr/share/man/man5/numatgt.yaml.5.gz          docs/configuration.md through pandoc
#   /usr/share/bash-completion/completions/numatgtd, numatgtadm    `--generate bash`
#   /usr/share/zsh/vendor-completions/_numatgtd, _numatgtadm       `--generate zsh`
#   /usr/share/doc/numatgt/                        copyright, changelog.Debian.gz, docs
#   /usr/share/numatgt/grafana/*.json, prometheus/*.yml    whatever tools/ holds now
# Depends: dpkg-shlibdeps on the two binaries; librbd and the RDMA libraries are opened
# at run time (dlopen) and only suggested.
#
# Usage: tools/build-deb.sh [--no-build]
#   --no-build   package the binaries target/release already holds
# Env: CARGO_TARGET_DIR is honoured (the package goes to $CARGO_TARGET_DIR/debian).
# Needs: cargo (Rust >= 1.85; tools/install-build-deps.sh for the libraries), dpkg-dev,
# pandoc. The package's lintian check: lintian target/debian/numatgt_*.deb
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
if [ -d "${HOME:-/root}/.cargo/bin" ]; then PATH="${HOME:-/root}/.cargo/bin:$PATH"; fi
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
OUT_DIR=$TARGET_DIR/debian
DEB=$REPO/tools/deb
umask 022

die() { echo "build-deb: $*" >&2; exit 1; }
BUILD=1
case "${1:-}" in
  "") ;;
  --no-build) BUILD=0 ;;
  *) die "usage: tools/build-deb.sh [--no-build]" ;;
esac
for tool in dpkg-deb dpkg-shlibdeps dpkg-parsechangelog pandoc strip gzip; do
  command -v "$tool" >/dev/null ||
    die "$tool not found (apt-get install dpkg-dev pandoc binutils; tools/install-test-deps.sh has them)"
done

# the version: the changelog's, whose upstream part must be the workspace's
VERSION=$(dpkg-parsechangelog -l "$DEB/changelog" -S Version)
MAINTAINER=$(dpkg-parsechangelog -l "$DEB/changelog" -S Maintainer)
# reproducible: file dates, man page dates and dpkg-deb's timestamps from the changelog
SOURCE_DATE_EPOCH=$(dpkg-parsechangelog -l "$DEB/changelog" -S Timestamp)
export SOURCE_DATE_EPOCH
CARGO_VERSION=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[ "${VERSION%-*}" = "$CARGO_VERSION" ] ||
  die "tools/deb/changelog is at $VERSION but Cargo.toml at $CARGO_VERSION: add a changelog entry"
ARCH=$(dpkg --print-architecture)
PKG=$OUT_DIR/numatgt_${VERSION}_${ARCH}.deb

if [ "$BUILD" = 1 ]; then
  cargo build --release --locked -p target-server -p tools --bin numatgtd --bin numatgtadm
fi
BIN=$TARGET_DIR/release
for b in numatgtd numatgtadm; do
  [ -x "$BIN/$b" ] || die "$BIN/$b missing (build first, or drop --no-build)"
done

STAGE=$OUT_DIR/stage
ROOT=$STAGE/root
rm -rf "$STAGE"
mkdir -p "$ROOT/DEBIAN" "$STAGE/debian"

put() { # MODE SRC DEST: install SRC at DEST inside the package
  install -D -m "$1" "$2" "$ROOT/$3"
}
gz() { # SRC DEST.gz: gzip -9n (no name, no time stamp), 0644
  mkdir -p "$(dirname "$ROOT/$2")"
  gzip -9nc "$1" > "$ROOT/$2"
  chmod 0644 "$ROOT/$2"
}

# binaries, stripped as dh_strip does (the build id stays)
for b in numatgtd numatgtadm; do
  put 0755 "$BIN/$b" "usr/sbin/$b"
  strip --remove-section=.comment --remove-section=.note "$ROOT/usr/sbin/$b"
done

# systemd: the unit with the package's paths (any /usr/local/sbin/ becomes /usr/sbin/),
# the service user, the state directory
sed 's#/usr/local/sbin/#/usr/sbin/#g' tools/systemd/numatgtd.service > "$STAGE/numatgtd.service"
grep -q '/usr/local/' "$STAGE/numatgtd.service" && die "numatgtd.service still names /usr/local"
put 0644 "$STAGE/numatgtd.service" lib/systemd/system/numatgtd.service
put 0644 tools/systemd/numatgt.sysusers usr/lib/sysusers.d/numatgt.conf
put 0644 "$DEB/numatgt.tmpfiles" usr/lib/tmpfiles.d/numatgt.conf

# the configuration: a conffile (postinst makes it root:numatgt 0640)
put 0644 config/examples/default.yaml etc/numatgt/numatgt.yaml
echo /etc/numatgt/numatgt.yaml > "$ROOT/DEBIAN/conffiles"

# man pages and completions, printed by the binaries from their own command-line
# definitions; numatgt.yaml(5) from the configuration reference
MAN_DATE=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%d)
export NUMATGT_MAN_DATE=$MAN_DATE
for b in numatgtd numatgtadm; do
  "$BIN/$b" --generate man > "$STAGE/$b.8"
  gz "$STAGE/$b.8" "usr/share/man/man8/$b.8.gz"
  "$BIN/$b" --generate bash > "$STAGE/$b.bash"
  put 0644 "$STAGE/$b.bash" "usr/share/bash-completion/completions/$b"
  "$BIN/$b" --generate zsh > "$STAGE/_$b"
  put 0644 "$STAGE/_$b" "usr/share/zsh/vendor-completions/_$b"
done
pandoc --from gfm --to man --standalone --lua-filter "$DEB/yaml-man.lua" \
  --metadata title=NUMATGT.YAML --metadata section=5 --metadata date="$MAN_DATE" \
  --metadata footer="numatgt $CARGO_VERSION" --metadata header="File Formats Manual" \
  --output "$STAGE/numatgt.yaml.5" docs/configuration.md
gz "$STAGE/numatgt.yaml.5" usr/share/man/man5/numatgt.yaml.5.gz

# monitoring: every dashboard and Prometheus file tools/ holds at build time
shopt -s nullglob
for f in tools/grafana/*.json; do put 0644 "$f" "usr/share/numatgt/grafana/${f##*/}"; done
for f in tools/prometheus/*.yml; do
  case "$f" in *.test.yml) continue ;; esac # promtool's tests of the rules stay in the tree
  put 0644 "$f" "usr/share/numatgt/prometheus/${f##*/}"
done
shopt -u nullglob

# documentation: copyright (DEP-5, with the statically linked crates), changelog, docs
DOC=usr/share/doc/numatgt
CRATES=$(cargo tree --locked -e normal,no-proc-macro -p target-server -p tools \
  --target "$(rustc -vV | sed -n 's/^host: //p')" --prefix none --format '{p}|{l}' |
  grep -v '(/' | sed 's/ (\*)$//' | sort -u |
  awk -F'|' 'NF == 2 && $1 != "" { sub(/ v/, " ", $1); printf " %s: %s\n", $1, ($2 == "" ? "(none declared)" : $2) }')
[ -n "$CRATES" ] || die "cargo tree listed no crates"
awk -v crates="$CRATES" -v maint="$MAINTAINER" \
  '{ gsub(/@MAINTAINER@/, maint) } /^@CRATES@$/ { print crates; next } { print }' \
  "$DEB/copyright.in" > "$STAGE/copyright"
put 0644 "$STAGE/copyright" "$DOC/copyright"
gz "$DEB/changelog" "$DOC/changelog.Debian.gz"
gz README.md "$DOC/README.md.gz"
for f in docs/*.md; do gz "$f" "$DOC/${f##*/}.gz"; done

# lintian: the one tag overridden, with its reason (tools/deb/lintian-overrides)
put 0644 "$DEB/lintian-overrides" usr/share/lintian/overrides/numatgt

# maintainer scripts
for s in postinst prerm postrm; do
  install -m 0755 "$DEB/$s" "$ROOT/DEBIAN/$s"
done

# Depends: the shared libraries the binaries link (dpkg-shlibdeps reads the installed
# packages' symbols files), plus what the maintainer scripts run
cat > "$STAGE/debian/control" <<CONTROL
Source: numatgt

Package: numatgt
Architecture: any
CONTROL
SHLIBS=$(cd "$STAGE" && dpkg-shlibdeps -O -e"root/usr/sbin/numatgtd" -e"root/usr/sbin/numatgtadm" |
  sed -n 's/^shlibs:Depends=//p')
[ -n "$SHLIBS" ] || die "dpkg-shlibdeps found no dependencies"
DEPENDS="$SHLIBS, systemd | systemd-standalone-sysusers | systemd-sysusers, systemd | systemd-standalone-tmpfiles | systemd-tmpfiles"

# Suggests: the libraries numatgtd opens at run time (rbd/src/ffi.rs, rdma/src/error.rs),
# named by Debian's soname rule (libfoo.so.N -> libfooN) or by the installed package that
# holds them; the verbs providers (adapter drivers) iSER needs; tgt for tgt-admin/tgtimg
suggest=()
for soname in librbd.so.1 libibverbs.so.1 librdmacm.so.1; do
  pkg=$(dpkg-query -S "*/$soname" 2>/dev/null | sed -n '1s/:.*//p' || true)
  if [ -z "$pkg" ]; then
    base=${soname%%.so.*}
    pkg=$base${soname##*.so.}
  fi
  suggest+=("${pkg%%:*}")
done
SUGGESTS="$(IFS=,; echo "${suggest[*]}" | sed 's/,/, /g'), ibverbs-providers, tgt"

# pack: sizes, checksums, control
INSTALLED_SIZE=$(du -k -s --apparent-size --exclude=DEBIAN "$ROOT" | cut -f1)
(cd "$ROOT" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
  xargs -0 md5sum) > "$ROOT/DEBIAN/md5sums"
chmod 0644 "$ROOT/DEBIAN/md5sums" "$ROOT/DEBIAN/conffiles"
sed -e "s/@VERSION@/$VERSION/" -e "s/@ARCH@/$ARCH/" -e "s/@MAINTAINER@/$MAINTAINER/" \
  -e "s/@INSTALLED_SIZE@/$INSTALLED_SIZE/" -e "s/@DEPENDS@/$DEPENDS/" \
  -e "s/@SUGGESTS@/$SUGGESTS/" "$DEB/control.in" > "$ROOT/DEBIAN/control"
chmod 0644 "$ROOT/DEBIAN/control"
# every file dated by the changelog: the same tree gives the same package, byte for byte
find "$ROOT" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
rm -f "$PKG"
dpkg-deb --root-owner-group --build "$ROOT" "$PKG" >/dev/null
echo "build-deb: $PKG"
dpkg-deb --field "$PKG" Version Depends Suggests Installed-Size
