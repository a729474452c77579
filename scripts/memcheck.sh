#!/usr/bin/env bash
# Memory safety of the module under Valgrind memcheck, on Debian's redis-server 7.0.
#
# 1. Runs a representative part of the integration suite (MEMCHECK_TESTS) with every Redis
#    server it starts under memcheck: REDIS_SERVER points the test harness at a wrapper
#    that execs valgrind. Invalid reads and writes, uses of uninitialised values and bad
#    frees are logged as they happen, so they are caught even though the harness kills
#    its servers at the end of each test.
# 2. Starts one server under memcheck, drives scripts/soak.py's mixed calls at it
#    (MEMCHECK_CALLS), then shuts it down cleanly, so that memcheck reports leaks.
#
# Forked children (BGSAVE, BGREWRITEAOF, full syncs) run under memcheck too, each with its
# own log. Redis links jemalloc dynamically; --soname-synonyms makes memcheck replace its malloc and
# free, so every allocation of the server and of the module (RedisModule_Alloc is the
# server's zmalloc) is a heap block memcheck tracks. Valkey is not covered: its jemalloc is
# linked in statically under prefixed names, which memcheck cannot replace.
#
# Verdict: 0 memcheck errors in every log, and 0 bytes definitely lost in the leak run.
# Test failures caused by valgrind's slowness (timings) are reported but do not decide it.
set -euo pipefail
cd "$(dirname "$0")/.."

TESTS=${MEMCHECK_TESTS:-"commands peek_reset_refund algorithms bad_input throttle policies persistence replication metrics configs panic_guard"}
CALLS=${MEMCHECK_CALLS:-20000}
REDIS=$(command -v "${REDIS_SERVER:-redis-server}")
PYTHON=.venv/bin/python3
[ -x "$PYTHON" ] || PYTHON=python3

LOGS=$(mktemp -d "${TMPDIR:-/tmp}/rl-memcheck.XXXXXX")
echo "memcheck logs: $LOGS"
cargo build --quiet --lib
MODULE=$PWD/target/debug/libredis_ratelimit.so

# lzf_compress (RDB and replication snapshots, in the forked child) reads its hash table
# before writing it, on purpose: Redis's own valgrind.sup suppresses it, and so does ours.
VALGRIND=(valgrind --tool=memcheck --error-limit=no '--soname-synonyms=somalloc=*jemalloc*'
  --suppressions="$PWD/scripts/memcheck.supp"
  --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite
  --num-callers=30)

WRAPPER=$LOGS/redis-under-memcheck
{
  echo '#!/usr/bin/env bash'
  printf 'exec '
  printf '%q ' "${VALGRIND[@]}" "--log-file=$LOGS/suite-%p.log" "$REDIS"
  echo '"$@"'
} >"$WRAPPER"
chmod +x "$WRAPPER"

echo "== 1. integration tests with Redis under memcheck: $TESTS"
failed_tests=()
for test in $TESTS; do
  if ! REDIS_SERVER=$WRAPPER RL_MODULE=$MODULE timeout 1800 cargo test --quiet --test "$test" \
      -- --test-threads=1 >"$LOGS/test-$test.out" 2>&1; then
    failed_tests+=("$test")
  fi
  grep -E '^test result' "$LOGS/test-$test.out" | sed "s/^/  $test: /" || true
done

echo "== 2. leak run: $CALLS mixed calls, then SHUTDOWN"
PORT=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${VALGRIND[@]}" --log-file="$LOGS/leak-run.log" "$REDIS" --port "$PORT" --bind 127.0.0.1 \
  --save "" --appendonly no --dir "$LOGS" --logfile "$LOGS/leak-run-server.log" \
  --loadmodule "$MODULE" policies-in-rdb yes &
SERVER=$!
for _ in $(seq 1 300); do
  redis-cli -p "$PORT" PING >/dev/null 2>&1 && break
  sleep 0.2
done
"$PYTHON" scripts/soak.py --port "$PORT" --calls "$CALLS" --keys 500
redis-cli -p "$PORT" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
wait "$SERVER" || true

echo "== results"
servers=$(ls "$LOGS"/suite-*.log | wc -l)
errors=0
for log in "$LOGS"/suite-*.log "$LOGS/leak-run.log"; do
  # Leaks are judged on the leak run only: a killed server reports none.
  n=$(grep -cE '== (Invalid (read|write|free)|Conditional jump|Use of uninitialised|Syscall param|Mismatched free|Source and destination overlap)' "$log" || true)
  if [ "$n" -gt 0 ]; then
    echo "  $log: $n memcheck errors"
    errors=$((errors + n))
  fi
done
lost=$(grep -E 'definitely lost:' "$LOGS/leak-run.log" | sed -E 's/.*definitely lost: ([0-9,]+) bytes.*/\1/' | tr -d ,)
module_lost=$(grep -A30 'definitely lost in' "$LOGS/leak-run.log" | grep -c 'libredis_ratelimit' || true)
echo "  servers run under memcheck by the tests: $servers"
echo "  memcheck errors (invalid reads/writes, uninitialised values, bad frees): $errors"
echo "  leak run: definitely lost ${lost:-0} bytes; loss records naming the module: $module_lost"
grep -E 'ERROR SUMMARY|definitely lost|indirectly lost|possibly lost|still reachable' "$LOGS/leak-run.log" | sed 's/^/  /'
if [ ${#failed_tests[@]} -gt 0 ]; then
  echo "  tests that failed under valgrind's slowness (see $LOGS/test-*.out): ${failed_tests[*]}"
fi
if [ "$errors" -ne 0 ] || [ "${lost:-0}" -ne 0 ]; then
  echo "memcheck: FAILED"
  exit 1
fi
echo "memcheck: OK"
