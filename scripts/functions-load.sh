#!/usr/bin/env bash
# Installs the Functions library (functions/ratelimit.lua) into the Redis or Valkey given
# by URL (redis://[user:password@]host:port, rediss:// for TLS), replacing any version
# already loaded, then prints the version the server now answers.
#
#   scripts/functions-load.sh redis://127.0.0.1:6379
set -euo pipefail
cd "$(dirname "$0")/.."
url=${1:-${REDIS_URL:-}}
if [[ -z "$url" ]]; then
    echo "usage: $0 <redis://host:port>  (or REDIS_URL=...)" >&2
    exit 2
fi
tls=()
[[ "$url" == rediss://* ]] && tls=(--tls)
name=$(redis-cli "${tls[@]}" -u "$url" -x FUNCTION LOAD REPLACE < functions/ratelimit.lua)
if [[ "$name" != "ratelimit" ]]; then
    echo "FUNCTION LOAD answered: $name" >&2
    exit 1
fi
echo "ratelimit $(redis-cli "${tls[@]}" -u "$url" FCALL_RO rl_version 0) loaded"
