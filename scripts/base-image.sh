#!/usr/bin/env bash
# Makes the Debian base image the Dockerfiles under docker/ start from, without pulling
# anything: debootstrap a bookworm minbase system from Debian's mirror into a cache folder
# outside the clone, pack it once, and `docker import` it under the tag the Dockerfiles name
# (debian:bookworm-slim), so that the Dockerfiles users build with Docker Hub's image are the
# very ones built here. Idempotent: nothing happens when the tag exists, and the packed
# root file system is reused when only the image is missing (a pruned or fresh engine).
#
#   scripts/base-image.sh            # ensure the tag exists
#   BASE_IMAGE=debian:bookworm-slim  DEBIAN_MIRROR=http://deb.debian.org/debian
#   RL_CACHE_DIR=~/.cache/redis-ratelimit  (where the packed root file system is kept)
set -euo pipefail

tag="${BASE_IMAGE:-debian:bookworm-slim}"
suite="${DEBIAN_SUITE:-bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
cache="${RL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/redis-ratelimit}"
packed="$cache/debian-$suite-minbase.tar.gz"

if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "base-image: $tag exists"
    exit 0
fi

# debootstrap creates device nodes and chroots: it needs root.
as_root=()
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "base-image: debootstrap needs root (or sudo)" >&2; exit 1; }
    as_root=(sudo)
fi

if [ ! -s "$packed" ]; then
    # In /usr/sbin, which a user's PATH may lack.
    debootstrap="$(command -v debootstrap || echo /usr/sbin/debootstrap)"
    [ -x "$debootstrap" ] || {
        echo "base-image: debootstrap is missing: apt-get install debootstrap" >&2
        exit 1
    }
    mkdir -p "$cache"
    root="$cache/rootfs.$$"
    trap '"${as_root[@]}" rm -rf "$root"' EXIT
    echo "base-image: debootstrap $suite (minbase) from $mirror into $root"
    "${as_root[@]}" "$debootstrap" --variant=minbase "$suite" "$root" "$mirror" >"$cache/debootstrap.log" 2>&1 || {
        tail -n 20 "$cache/debootstrap.log" >&2
        exit 1
    }
    # What Docker's official slim image does too: the same apt sources (with updates and
    # security), no documentation installed by later packages, no .deb files or package
    # lists kept in layers; and no files that the engine provides at run time.
    "${as_root[@]}" bash -s "$root" "$suite" <<'SLIM'
set -euo pipefail
root="$1" suite="$2"
rm -f "$root/etc/apt/sources.list"
cat >"$root/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: http://deb.debian.org/debian
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
cat >"$root/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EXCLUDE'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EXCLUDE
cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'CLEAN'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CLEAN
echo 'APT::Install-Recommends "false";' >"$root/etc/apt/apt.conf.d/docker-no-recommends"
find "$root/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$root"/usr/share/{man,info,locale}/* "$root"/var/lib/apt/lists/* \
    "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb "$root"/var/log/*.log \
    "$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old
: >"$root/etc/hostname"
: >"$root/etc/resolv.conf"
SLIM
    "${as_root[@]}" tar --numeric-owner -C "$root" -czf "$packed.tmp" .
    mv "$packed.tmp" "$packed"
fi

echo "base-image: docker import $packed as $tag"
docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' \
    "$packed" "$tag" >/dev/null
docker image ls "$tag"
