#!/usr/bin/env bash
# Serves the release build of the module on 127.0.0.1:6379 in the foreground; Ctrl-C stops.
set -euo pipefail
cd "$(dirname "$0")/.."
module="$PWD/target/release/libredis_ratelimit.so"
port="${PORT:-6379}"
if redis-cli -p "$port" PING >/dev/null 2>&1; then
    echo "run: something already answers on port $port; stop it (e.g. 'systemctl stop redis-server') or use PORT=..." >&2
    exit 1
fi
mkdir -p target/run
echo "run: redis-server on 127.0.0.1:$port with $module (Ctrl-C stops it)"
exec redis-server --bind 127.0.0.1 --port "$port" --dir "$PWD/target/run" \
    --loadmodule "$module"
