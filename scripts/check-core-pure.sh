#!/usr/bin/env bash
# Fails if the pure core (crate ratelimit-core) depends on Redis in any way: the module,
# the gateway and the fuzz targets share it, and its purity is what lets them.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=$(cargo tree -p ratelimit-core --edges normal,build,dev --prefix none)
if grep -qiE '^(redis|redis-module|redis-module-macros|linkme)( |$)' <<<"$tree"; then
    echo "ratelimit-core depends on Redis:" >&2
    grep -iE '^(redis|redis-module|redis-module-macros|linkme)( |$)' <<<"$tree" >&2
    exit 1
fi
grep -q '^ratelimit-core ' <<<"$tree" || { echo "cargo tree did not list ratelimit-core" >&2; exit 1; }
echo "ratelimit-core: no Redis dependency"
