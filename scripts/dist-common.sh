# Sourced by scripts/dist.sh and scripts/dist-deb.sh: what both need to know about a release.
# Run from the repository's root.

# The workspace's semantic version, from the root crate's [package] (one place to bump it;
# the module's MODULE LIST version is derived from the same number at compile time).
VERSION="$(awk '/^\[package\]/ { p = 1; next } /^\[/ { p = 0 }
    p && /^version *=/ { gsub(/[" ]/, "", $0); sub(/^version=/, "", $0); print; exit }' Cargo.toml)"
if ! [[ "$VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    echo "dist: cannot read the version from Cargo.toml (got '$VERSION')" >&2
    exit 1
fi

# The only target built and tested today: x86_64 Linux with glibc.
TRIPLE="x86_64-linux-gnu"
if [ "$(uname -m)" != x86_64 ]; then
    echo "dist: builds for $TRIPLE only, and this machine is $(uname -m)" >&2
    exit 1
fi

TARGET_DIR="${CARGO_TARGET_DIR:-target}"
MODULE_SO="$TARGET_DIR/release/libredis_ratelimit.so"
GATEWAY_BIN="$TARGET_DIR/release/rl-gateway"

# One date for every file of every artefact, so that two builds of a commit compare equal.
# Not exported: redis-module's build script reruns (minutes) when SOURCE_DATE_EPOCH
# changes, so only the packing commands are given it.
EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}"

require_release_artefacts() {
    local f
    for f in "$MODULE_SO" "$GATEWAY_BIN"; do
        if [ ! -f "$f" ]; then
            echo "dist: $f is missing; run without --no-build" >&2
            exit 1
        fi
    done
}

# Adds (or refreshes) one artefact's line in dist/SHA256SUMS, keeping the others' lines,
# so that `make dist` and `make deb` in either order leave one file that checks them all.
update_sums() {
    local artefact="$1" base sums="dist/SHA256SUMS"
    base="$(basename "$artefact")"
    touch "$sums"
    {
        # Lines of artefacts since deleted go, so that `sha256sum -c` checks what is there.
        local line file
        while read -r line; do
            file="${line#*  }"
            if [ "$file" != "$base" ] && [ -f "dist/$file" ]; then echo "$line"; fi
        done < "$sums"
        (cd dist && sha256sum "$base")
    } | LC_ALL=C sort -k2 > "$sums.new"
    mv "$sums.new" "$sums"
}

# Builds the release module and gateway (unless the first argument after the script's name
# is --no-build), then checks that both are there.
build_release() {
    local script="$1"
    shift
    case "${1:-}" in
        --no-build) ;;
        "")
            "${CARGO:-cargo}" build --release --locked --lib
            "${CARGO:-cargo}" build --release --locked -p rl-gateway --bin rl-gateway
            ;;
        *) echo "usage: scripts/$script [--no-build]" >&2; exit 2 ;;
    esac
    require_release_artefacts
}
