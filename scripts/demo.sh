#!/usr/bin/env bash
# The gateway demo: Redis with the module on 127.0.0.1:6379, the demo upstream on :9000 and
# rl-gateway on :8080 (admin :9090) with gateway/rules.example.toml. Ctrl-C stops all three.
set -euo pipefail
cd "$(dirname "$0")/.."
for port in 6379 8080 9000 9090; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "demo: port $port is taken; stop what listens there first" >&2
        exit 1
    fi
done
mkdir -p target/demo
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM
redis-server --bind 127.0.0.1 --port 6379 --dir "$PWD/target/demo" --save '' \
    --loadmodule "$PWD/target/release/libredis_ratelimit.so" --logfile "$PWD/target/demo/redis.log" &
pids+=($!)
target/release/demo-upstream --listen 127.0.0.1:9000 &
pids+=($!)
target/release/rl-gateway --config gateway/rules.example.toml &
pids+=($!)
sleep 1
cat <<'TEXT'
demo: try
  curl -i localhost:8080/home                               # 5 per minute, then 429
  curl -i -X POST 'localhost:8080/auth/login?status=401'     # failed logins: 5 per 15 min
  curl -i -X POST 'localhost:8080/auth/login?status=200'     # successful ones never count
  curl -s localhost:9090/metrics | grep rl_gateway_decisions
Ctrl-C stops Redis, the upstream and the gateway.
TEXT
wait
