#!/usr/bin/env bash
# Builds the two Debian packages with dpkg-deb alone (no debhelper), into dist/:
#   redis-ratelimit_<version>_amd64.deb  the module in /usr/lib/redis/modules/ and
#                                        /etc/redis/ratelimit.conf, the loadmodule line
#   rl-gateway_<version>_amd64.deb       /usr/bin/rl-gateway, /etc/rl-gateway/rules.toml,
#                                        a hardened systemd unit and its own user
# and records their sums in dist/SHA256SUMS. The sources of the control files, the unit
# and the maintainer scripts are in packaging/deb/.
#
# Usage: scripts/dist-deb.sh [--no-build]   (as scripts/dist.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/dist-common.sh

build_release "$(basename "$0")" "$@"

MAINTAINER="${DEB_MAINTAINER:-redis-ratelimit authors <maintainers@redis-ratelimit.invalid>}"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p dist

# The libc6 a binary needs: the highest GLIBC_x.y among the symbols it imports, which
# is what dpkg-shlibdeps would find for these two (they link only libc, libm, libgcc_s).
depends_of() {
    local glibc
    glibc="$(objdump -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' \
        | sort -V | tail -n 1)"
    echo "libc6 (>= ${glibc:-2.34}), libgcc-s1"
}

# Copyright and changelog where Debian expects them, for each package.
add_docs() {
    local root="$1" package="$2" doc="$1/usr/share/doc/$2"
    mkdir -p "$doc"
    # Debian's machine-readable format: the license text indented, blank lines as " .".
    { echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
      echo "Upstream-Name: redis-ratelimit"; echo
      echo "Files: *"; grep -m 1 '^Copyright' LICENSE | sed 's/^Copyright (c)/Copyright:/'
      echo "License: BSD-3-Clause"
      sed -e 's/^$/./' -e 's/^/ /' LICENSE; } > "$doc/copyright"
    gzip -n -9 -c CHANGELOG.md > "$doc/changelog.gz"
    install -m 0644 README.md "$doc/README.md"
}

# Fills in the control file, writes the conffiles list, and builds the package.
finish_package() {
    local root="$1" package="$2" binary="$3" size
    mkdir -p "$root/DEBIAN"
    size="$(du -sk --exclude=DEBIAN "$root" | cut -f1)"
    sed -e "s|@VERSION@|$VERSION|" -e "s|@MAINTAINER@|$MAINTAINER|" \
        -e "s|@SIZE@|$size|" \
        -e "s|@DEPENDS@|$(depends_of "$binary")|" \
        "packaging/deb/$package/control" > "$root/DEBIAN/control"
    (cd "$root" && find etc -type f 2>/dev/null | sed 's|^|/|' | LC_ALL=C sort) \
        > "$root/DEBIAN/conffiles"
    [ -s "$root/DEBIAN/conffiles" ] || rm "$root/DEBIAN/conffiles"
    find "$root" -exec touch -h -d "@$EPOCH" {} +
    local deb="dist/${package}_${VERSION}_amd64.deb"
    SOURCE_DATE_EPOCH="$EPOCH" dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
    update_sums "$deb"
    echo "$deb"
}

module_package() {
    local root="$stage/redis-ratelimit"
    # 0755, not a library's usual 0644: Redis 7 refuses to load a module it cannot execute.
    install -D -m 0755 "$MODULE_SO" "$root/usr/lib/redis/modules/libredis_ratelimit.so"
    install -D -m 0644 packaging/deb/redis-ratelimit/ratelimit.conf \
        "$root/etc/redis/ratelimit.conf"
    add_docs "$root" redis-ratelimit
    finish_package "$root" redis-ratelimit "$MODULE_SO"
}

gateway_package() {
    local root="$stage/rl-gateway" doc="$stage/rl-gateway/usr/share/doc/rl-gateway"
    install -D -m 0755 "$GATEWAY_BIN" "$root/usr/bin/rl-gateway"
    install -D -m 0640 gateway/rules.example.toml "$root/etc/rl-gateway/rules.toml"
    install -D -m 0644 packaging/deb/rl-gateway/rl-gateway.service \
        "$root/lib/systemd/system/rl-gateway.service"
    add_docs "$root" rl-gateway
    install -m 0644 gateway/rules.example.toml gateway/nginx.example.conf "$doc/"
    install -D -m 0644 -t "$doc/examples/envoy" packaging/examples/envoy/rules.toml \
        packaging/examples/envoy/envoy.yaml
    install -D -m 0644 -t "$doc/examples/envoy/ratelimit" packaging/examples/envoy/ratelimit/*.yaml
    mkdir -p "$root/DEBIAN"
    install -m 0755 packaging/deb/rl-gateway/{postinst,prerm,postrm} "$root/DEBIAN/"
    finish_package "$root" rl-gateway "$GATEWAY_BIN"
}

module_package
gateway_package
