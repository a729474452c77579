#!/usr/bin/env bash
# Builds the container images from release binaries built on the host (there is no Rust
# image to build in): the base image first (scripts/base-image.sh, when its tag is
# missing), then each image from a build context staged under <target>/docker/<image>: the
# files of docker/<image>/ and the binaries it copies.
#
#   docker/build.sh [RELEASE_DIR]   # default: $CARGO_TARGET_DIR/release, else target/release
#   IMAGE_TAG=latest                # tag of the four images
#
# Images: redis-ratelimit (Redis with the module), valkey-ratelimit (Valkey with the module),
# rl-gateway (shell-less), rl-gateway-demo-upstream.
set -euo pipefail
cd "$(dirname "$0")/.."

release="${1:-${CARGO_TARGET_DIR:-target}/release}"
tag="${IMAGE_TAG:-latest}"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
staging="$(dirname "$release")/docker"

for binary in libredis_ratelimit.so rl-gateway demo-upstream; do
    [ -f "$release/$binary" ] || {
        echo "docker/build.sh: $release/$binary is missing: run \`make build\` first" >&2
        exit 1
    }
done

scripts/base-image.sh
# Valkey's image starts from Debian 13, the first with a security-supported valkey-server.
DEBIAN_SUITE=trixie BASE_IMAGE=debian:trixie-slim scripts/base-image.sh

# Stages docker/<image>/ plus the named binaries into a fresh context folder, with the modes
# the images need whatever the umask of the clone (the Dockerfiles' COPY keeps them).
stage() {
    local image="$1" context="$staging/$1"
    shift
    rm -rf "$context"
    mkdir -p "$context"
    cp -R "docker/$image/." "$context/"
    for binary in "$@"; do
        cp "$release/$binary" "$context/$binary"
    done
    find "$context" -type d -exec chmod 0755 {} +
    find "$context" -type f -exec chmod 0644 {} +
    for executable in "$@"; do
        [ ! -f "$context/$executable" ] || chmod 0755 "$context/$executable"
    done
    echo "$context"
}

build() {
    local image="$1" context
    shift
    context="$(stage "$image" "$@")"
    if ! docker build --build-arg "VERSION=$version" -t "$image:$tag" "$context" \
        >"$context.log" 2>&1; then
        tail -n 30 "$context.log" >&2
        echo "docker/build.sh: building $image failed (log: $context.log)" >&2
        exit 1
    fi
    echo "docker/build.sh: built $image:$tag"
}

build redis-ratelimit libredis_ratelimit.so
build valkey-ratelimit libredis_ratelimit.so
build rl-gateway rl-gateway
build rl-gateway-demo-upstream demo-upstream
docker image ls --filter "reference=redis-ratelimit:$tag" --filter "reference=valkey-ratelimit:$tag" \
    --filter "reference=rl-gateway:$tag" --filter "reference=rl-gateway-demo-upstream:$tag"
