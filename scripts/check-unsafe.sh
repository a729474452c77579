#!/usr/bin/env bash
# Fails if `unsafe` appears in the module crate (src/) outside src/server/, the one module
# that holds the crate's unsafe code behind safe types. A justified exception is a line
# `path:reason` in ALLOWED below (there is none). Lines that are only a comment (docs that
# name the word) do not count.
set -euo pipefail
cd "$(dirname "$0")/.."
ALLOWED=()
found=$(grep -rnw --include='*.rs' 'unsafe' src | grep -v '^src/server/' \
    | grep -vE '^[^:]+:[0-9]+:[[:space:]]*//' || true)
for allowed in "${ALLOWED[@]+"${ALLOWED[@]}"}"; do
    found=$(grep -vF "${allowed%%:*}:" <<<"$found" || true)
done
if [[ -n "$found" ]]; then
    echo "unsafe outside src/server/ (move it behind a safe function there):" >&2
    echo "$found" >&2
    exit 1
fi
echo "redis-ratelimit: unsafe only in src/server/"
