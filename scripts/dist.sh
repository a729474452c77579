#!/usr/bin/env bash
# Builds the release archive users install without Rust:
#   dist/redis-ratelimit-<version>-x86_64-linux-gnu.tar.gz  and  dist/SHA256SUMS
# The archive holds what users run (the module, rl-gateway), the example configs, the
# README, LICENSE, CHANGELOG and the book, with a SHA256SUMS of its own files inside.
#
# Usage: scripts/dist.sh [--no-build]
#   --no-build  package what target/release already holds, without calling cargo
# CARGO (the cargo running the tests, when they call this) and CARGO_TARGET_DIR are
# honoured. The archive is reproducible: files sorted, owned by root, dated by the last
# commit (SOURCE_DATE_EPOCH overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/dist-common.sh


build_release "$(basename "$0")" "$@"

name="redis-ratelimit-${VERSION}-${TRIPLE}"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
root="$stage/$name"
mkdir -p "$root/examples/envoy/ratelimit"

install -m 0755 "$MODULE_SO" "$root/libredis_ratelimit.so"
install -m 0755 "$GATEWAY_BIN" "$root/rl-gateway"
install -m 0644 README.md LICENSE CHANGELOG.md SECURITY.md "$root/"
install -m 0644 gateway/rules.example.toml gateway/nginx.example.conf "$root/examples/"
install -m 0644 packaging/examples/envoy/rules.toml packaging/examples/envoy/envoy.yaml \
    "$root/examples/envoy/"
install -m 0644 packaging/examples/envoy/ratelimit/*.yaml "$root/examples/envoy/ratelimit/"

# The book's markdown where the README's links expect it (docs/src/), and built into
# docs/html/ when mdBook is there.
mkdir -p "$root/docs/src"
cp -r docs/src/. "$root/docs/src/"
if command -v mdbook >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/mdbook" ]; then
    RUST_LOG=warn PATH="$HOME/.cargo/bin:$PATH" mdbook build docs --dest-dir "$root/docs/html" >/dev/null
fi

# Checked after unpacking with `sha256sum -c SHA256SUMS` from inside the folder.
(cd "$root" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort \
    | xargs -d '\n' sha256sum > SHA256SUMS)

mkdir -p dist
archive="dist/$name.tar.gz"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$EPOCH" \
    -C "$stage" -cf - "$name" | gzip -n -9 > "$archive"
update_sums "$archive"
echo "$archive"
