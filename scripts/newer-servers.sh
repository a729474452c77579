#!/usr/bin/env bash
# Builds the newer servers the tests also run on - Redis 8.6 (Debian experimental) and
# Valkey 9.1 (Debian unstable) - from Debian's source packages, once per machine, into a
# cache outside the clone:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/redis-ratelimit/servers/<name>-<version>/bin/
# Debian 12 cannot install the binary packages of those suites (they need a newer glibc),
# but their sources build here with the compiler and libraries Debian 12 has.
#
# Usage: scripts/newer-servers.sh            fetch and build what is missing, print the paths
#        scripts/newer-servers.sh --path redis|valkey
#                                            print one server's path if built (exit 1 if not)
#
# The sources come through apt-get with a deb-src list and apt state of this script's own
# (under the cache folder): the machine's apt configuration is neither read for sources nor
# written. apt checks the suites' Release files against Debian's archive keyring, and the
# source files against the checksums of the signed Sources index, as it does for any package.
# The versions wanted are pinned below; when the archive no longer has one, the suite's
# current version is taken and the script says so. Non-interactive (CI has no stdin).
set -euo pipefail

REDIS_WANT=8.6.3
VALKEY_WANT=9.1.2
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/redis-ratelimit/servers
JOBS=$(nproc 2>/dev/null || echo 2)

# Builds from before TLS was built in lack this line in their SOURCE: they are built again.
with_tls() {
    grep -qx "tls yes" "$1/SOURCE" 2>/dev/null
}

# The first installed build of a server (the pinned version if present), or nothing.
installed() {
    local name=$1 want=$2 dir
    if [ -x "$CACHE/$name-$want/bin/$name-server" ] && with_tls "$CACHE/$name-$want"; then
        echo "$CACHE/$name-$want/bin/$name-server"
        return
    fi
    # Another version counts only where it was built in place of this one (the archive
    # had moved on): a new pin builds its own.
    for dir in "$CACHE/$name"-*/; do
        if [ -x "$dir/bin/$name-server" ] && grep -qx "wanted $want" "$dir/SOURCE" 2>/dev/null &&
            with_tls "$dir"; then
            echo "${dir%/}/bin/$name-server"
            return
        fi
    done
}

if [ "${1:-}" = "--path" ]; then
    case "${2:-}" in
    redis) path=$(installed redis "$REDIS_WANT") ;;
    valkey) path=$(installed valkey "$VALKEY_WANT") ;;
    *)
        echo "usage: $0 --path redis|valkey" >&2
        exit 2
        ;;
    esac
    [ -n "$path" ] || {
        echo "newer-servers: not built yet: run scripts/newer-servers.sh" >&2
        exit 1
    }
    echo "$path"
    exit 0
fi

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# Building these sources needs a C and C++ toolchain (Redis 8 vendors fast_float, in C++)
# and dpkg-source (to unpack), and OpenSSL's headers (TLS is built in: the gateway's TLS
# tests run on these servers too).
need=()
command -v cc >/dev/null || need+=(gcc libc6-dev)
command -v c++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
command -v dpkg-source >/dev/null || need+=(dpkg-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
[ -r "$KEYRING" ] || need+=(debian-archive-keyring)
dpkg -s libssl-dev >/dev/null 2>&1 || need+=(libssl-dev)
if [ ${#need[@]} -gt 0 ]; then
    echo "newer-servers: installing ${need[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${need[@]}" >/dev/null
fi

APT_DIR=$CACHE/apt
mkdir -p "$APT_DIR"/{lists/partial,cache/archives/partial,sources.list.d,preferences.d}
cat >"$APT_DIR/sources.sources" <<EOF
# redis-ratelimit: scripts/newer-servers.sh's own source list (no binary packages)
Types: deb-src
URIs: $MIRROR
Suites: unstable experimental
Components: main
Signed-By: $KEYRING
EOF
apt_opts=(
    -o "Dir::Etc::sourcelist=$APT_DIR/sources.sources"
    -o "Dir::Etc::sourceparts=$APT_DIR/sources.list.d"
    -o "Dir::Etc::preferencesparts=$APT_DIR/preferences.d"
    -o "Dir::State::Lists=$APT_DIR/lists"
    -o "Dir::Cache=$APT_DIR/cache"
    # The lists are this script's user's own files, which apt's _apt sandbox user cannot
    # write; apt checks the signatures all the same.
    -o "APT::Sandbox::User=$(id -un)"
)
updated=no
apt_update() {
    [ "$updated" = yes ] && return
    echo "newer-servers: apt-get update (deb-src unstable, experimental)"
    apt-get "${apt_opts[@]}" -qq update
    updated=yes
}

# Every version of a source package the two suites have, oldest first, e.g. 5:8.6.3-1.
versions_of() {
    apt-cache "${apt_opts[@]}" showsrc "$1" 2>/dev/null |
        awk '/^Version:/ { print $2 }' | sort -uV
}

# Fetches, builds and installs one server: build <srcpkg> <name> <wanted upstream version>.
build() {
    local pkg=$1 name=$2 want=$3 versions debver upstream work src prefix
    if [ -n "$(installed "$name" "$want")" ]; then
        return
    fi
    apt_update
    versions=$(versions_of "$pkg")
    debver=$(grep -E "^([0-9]+:)?${want//./\\.}-" <<<"$versions" | tail -n1 || true)
    if [ -z "$debver" ]; then
        debver=$(tail -n1 <<<"$versions")
        [ -n "$debver" ] || {
            echo "newer-servers: no source package $pkg in unstable or experimental" >&2
            exit 1
        }
        echo "newer-servers: $pkg $want is no longer in the archive; building $debver instead" >&2
    fi
    upstream=${debver#*:}
    upstream=${upstream%-*}
    upstream=${upstream%%+*}
    prefix=$CACHE/$name-$upstream
    work=$(mktemp -d "$CACHE/build.XXXXXX")
    cleanup+=("$work")
    echo "newer-servers: fetching $pkg $debver"
    # --download-only then dpkg-source: apt checks the files' checksums against the signed
    # index; unpacking is dpkg-source's (it warns that it cannot check the uploader's own
    # signature without debian-keyring: the archive's signature already covers the files).
    (cd "$work" && apt-get "${apt_opts[@]}" -qq source --download-only "$pkg=$debver")
    (cd "$work" && dpkg-source --no-check -x ./*.dsc src >unpack.log 2>&1) || {
        cat "$work/unpack.log" >&2
        exit 1
    }
    src=$work/src
    echo "newer-servers: building $name-server $upstream (make -j$JOBS, with TLS; a few minutes)"
    # Upstream's own makefile with its vendored dependencies (jemalloc, Lua, hiredis), as
    # upstream ships it; Debian's packaging would link Debian 13's libraries instead.
    make -C "$src/src" -j"$JOBS" BUILD_TLS=yes >"$work/build.log" 2>&1 || {
        tail -n 40 "$work/build.log" >&2
        echo "newer-servers: building $name $upstream failed (log above)" >&2
        exit 1
    }
    mkdir -p "$prefix.tmp/bin"
    for bin in server cli sentinel benchmark; do
        [ -e "$src/src/$name-$bin" ] && cp -L "$src/src/$name-$bin" "$prefix.tmp/bin/"
    done
    printf '%s\n' "$pkg $debver from Debian's $MIRROR (deb-src unstable/experimental)" \
        "wanted $want" "tls yes" >"$prefix.tmp/SOURCE"
    rm -rf "$prefix"
    mv "$prefix.tmp" "$prefix"
    rm -rf "$work"
}

mkdir -p "$CACHE"
cleanup=()
trap 'rm -rf "${cleanup[@]}"' EXIT
build redis redis "$REDIS_WANT"
build valkey valkey "$VALKEY_WANT"
redis=$(installed redis "$REDIS_WANT")
valkey=$(installed valkey "$VALKEY_WANT")
"$redis" --version
"$valkey" --version
echo "REDIS_SERVER=$redis"
echo "VALKEY_SERVER=$valkey"
