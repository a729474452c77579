#!/usr/bin/env bash
# Serves the release build of the module on 127.0.0.1:6379 in the foreground; Ctrl-C stops
# it (the server saves its RDB then, and loads it at the next start).
#
# The module is loaded with what named policies need: `policies-in-rdb yes`, without which
# Redis 7.0 refuses RL.POLICY SET (see docs/src/concepts/policies.md); newer servers and Valkey
# ignore it. Every RDB this server writes then needs the module to load, which it always
# has here.
#
# Overrides: PORT (default 6379), RUN_DIR (the data directory, default target/run) and
# REDIS_SERVER (the server binary, default redis-server; a valkey-server works too).
# tests/make_run_policies.rs starts the server through this script with them.
set -euo pipefail
cd "$(dirname "$0")/.."
module="$PWD/target/release/libredis_ratelimit.so"
port="${PORT:-6379}"
dir="${RUN_DIR:-$PWD/target/run}"
server="${REDIS_SERVER:-redis-server}"
if redis-cli -p "$port" PING >/dev/null 2>&1; then
    echo "run: something already answers on port $port; stop it (e.g. 'systemctl stop redis-server') or use PORT=..." >&2
    exit 1
fi
mkdir -p "$dir"
echo "run: $server on 127.0.0.1:$port with $module (Ctrl-C stops it)"
exec "$server" --bind 127.0.0.1 --port "$port" --dir "$dir" \
    --loadmodule "$module" policies-in-rdb yes
