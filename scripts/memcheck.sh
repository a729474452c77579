#!/usr/bin/env bash
# Memory safety of the module under Valgrind memcheck, on Debian's redis-server 7.0 and on
# the valkey-server 8.1 of .venv (scripts/valkey-path.sh).
#
# 1. Runs a representative part of the integration suite (MEMCHECK_TESTS) with every server
#    it starts, of both flavors, under memcheck: REDIS_SERVER and VALKEY_SERVER point the
#    test harness at wrappers that exec valgrind. Invalid reads and writes, uses of
#    uninitialised values and bad frees are logged as they happen, so they are caught even
#    though the harness kills its servers at the end of each test.
# 2. For each flavor, starts one server under memcheck, drives scripts/soak.py's mixed calls
#    at it (MEMCHECK_CALLS), then shuts it down cleanly, so that memcheck reports leaks.
#
# Forked children (BGSAVE, BGREWRITEAOF, full syncs) run under memcheck too, each with its
# own log. Every allocation of the server and of the module (RedisModule_Alloc is the
# server's zmalloc) must be a heap block memcheck tracks:
# - Redis links jemalloc dynamically; --soname-synonyms makes memcheck replace its malloc
#   and free.
# - The Valkey of .venv is built with malloc=libc (`valkey-server --version`) and links
#   libc dynamically, so memcheck replaces malloc and free without a synonym. The leak run
#   checks that this held: its "total heap usage" must count at least MEMCHECK_MIN_ALLOCS
#   allocations, or the heap went past memcheck and a clean log would prove nothing.
#
# Verdict: 0 memcheck errors in every log, 0 bytes definitely lost in both leak runs, and
# both leak runs' heaps tracked. Test failures caused by valgrind's slowness (timings) are
# reported but do not decide it.
set -euo pipefail
cd "$(dirname "$0")/.."

TESTS=${MEMCHECK_TESTS:-"commands peek_reset_refund algorithms bad_input throttle policies persistence replication metrics configs panic_guard"}
CALLS=${MEMCHECK_CALLS:-20000}
# 20,000 mixed calls allocate millions of blocks; a heap memcheck cannot see shows a few
# hundred (the loader's and libc's own).
MIN_ALLOCS=${MEMCHECK_MIN_ALLOCS:-100000}
REDIS=$(command -v "${REDIS_SERVER:-redis-server}")
VALKEY=${VALKEY_SERVER:-$(scripts/valkey-path.sh)}
[ -x "$VALKEY" ] || { echo "valkey-server not found: run make setup or set VALKEY_SERVER" >&2; exit 2; }
PYTHON=.venv/bin/python3
[ -x "$PYTHON" ] || PYTHON=python3

LOGS=$(mktemp -d "${TMPDIR:-/tmp}/rl-memcheck.XXXXXX")
echo "memcheck logs: $LOGS"
cargo build --quiet --lib
MODULE=$PWD/target/debug/libredis_ratelimit.so

# lzf_compress (RDB and replication snapshots, in the forked child) reads its hash table
# before writing it, on purpose: Redis's own valgrind.sup suppresses it, and so does ours
# (Valkey kept the same lzf code).
VALGRIND=(valgrind --tool=memcheck --error-limit=no
  --suppressions="$PWD/scripts/memcheck.supp"
  --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite
  --num-callers=30)
# The options one flavor needs on top of VALGRIND.
valgrind_for() {
  case $1 in
    redis) echo '--soname-synonyms=somalloc=*jemalloc*' ;;
    valkey) ;;
  esac
}
binary_for() {
  case $1 in
    redis) echo "$REDIS" ;;
    valkey) echo "$VALKEY" ;;
  esac
}

for flavor in redis valkey; do
  wrapper=$LOGS/$flavor-under-memcheck
  {
    echo '#!/usr/bin/env bash'
    printf 'exec '
    # shellcheck disable=SC2046 # valgrind_for prints zero or one word
    printf '%q ' "${VALGRIND[@]}" $(valgrind_for "$flavor") \
      "--log-file=$LOGS/suite-$flavor-%p.log" "$(binary_for "$flavor")"
    echo '"$@"'
  } >"$wrapper"
  chmod +x "$wrapper"
done

echo "== 1. integration tests with Redis and Valkey under memcheck: $TESTS"
failed_tests=()
for test in $TESTS; do
  if ! REDIS_SERVER=$LOGS/redis-under-memcheck VALKEY_SERVER=$LOGS/valkey-under-memcheck \
      RL_MODULE=$MODULE timeout 3600 cargo test --quiet --test "$test" \
      -- --test-threads=1 >"$LOGS/test-$test.out" 2>&1; then
    failed_tests+=("$test")
  fi
  grep -E '^test result' "$LOGS/test-$test.out" | sed "s/^/  $test: /" || true
done

free_port() {
  "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

for flavor in redis valkey; do
  echo "== 2. $flavor leak run: $CALLS mixed calls, then SHUTDOWN"
  port=$(free_port)
  module_args=("$MODULE")
  # Redis 7.0 only: Valkey has no use for (and no such) load-time option.
  [ "$flavor" = redis ] && module_args+=(policies-in-rdb yes)
  # shellcheck disable=SC2046
  "${VALGRIND[@]}" $(valgrind_for "$flavor") --log-file="$LOGS/leak-$flavor.log" \
    "$(binary_for "$flavor")" --port "$port" --bind 127.0.0.1 \
    --save "" --appendonly no --dir "$LOGS" --logfile "$LOGS/leak-$flavor-server.log" \
    --loadmodule "${module_args[@]}" &
  server=$!
  for _ in $(seq 1 300); do
    redis-cli -p "$port" PING >/dev/null 2>&1 && break
    sleep 0.2
  done
  "$PYTHON" scripts/soak.py --port "$port" --calls "$CALLS" --keys 500
  redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  wait "$server" || true
done

echo "== results"
errors=0
for log in "$LOGS"/suite-*.log "$LOGS"/leak-redis.log "$LOGS"/leak-valkey.log; do
  # Leaks are judged on the leak runs only: a killed server reports none.
  n=$(grep -cE '== (Invalid (read|write|free)|Conditional jump|Use of uninitialised|Syscall param|Mismatched free|Source and destination overlap)' "$log" || true)
  if [ "$n" -gt 0 ]; then
    echo "  $log: $n memcheck errors"
    errors=$((errors + n))
  fi
done
for flavor in redis valkey; do
  n=$(find "$LOGS" -name "suite-$flavor-*.log" | wc -l)
  echo "  $flavor processes run under memcheck by the tests: $n"
done
echo "  memcheck errors (invalid reads/writes, uninitialised values, bad frees): $errors"
lost_total=0
untracked=()
for flavor in redis valkey; do
  log=$LOGS/leak-$flavor.log
  lost=$(grep -E 'definitely lost:' "$log" | sed -E 's/.*definitely lost: ([0-9,]+) bytes.*/\1/' | tr -d , || true)
  # No summary at all (the server crashed or hung) must not read as "nothing lost".
  grep -q 'ERROR SUMMARY' "$log" || lost=${lost:-missing}
  allocs=$(grep -E 'total heap usage:' "$log" | sed -E 's/.*total heap usage: ([0-9,]+) allocs.*/\1/' | tr -d , || true)
  module_lost=$(grep -A30 'definitely lost in' "$log" | grep -c 'libredis_ratelimit' || true)
  echo "  $flavor leak run: definitely lost ${lost:-0} bytes; loss records naming the module: $module_lost; heap allocations tracked: ${allocs:-none}"
  grep -E 'total heap usage|ERROR SUMMARY|definitely lost|indirectly lost|possibly lost|still reachable' "$log" | sed 's/^/    /'
  if [ "${lost:-0}" = missing ]; then
    lost_total=missing
  elif [ "$lost_total" != missing ]; then
    lost_total=$((lost_total + ${lost:-0}))
  fi
  if [ "${allocs:-0}" -lt "$MIN_ALLOCS" ]; then
    untracked+=("$flavor")
  fi
done
if [ ${#failed_tests[@]} -gt 0 ]; then
  echo "  tests that failed under valgrind's slowness (see $LOGS/test-*.out): ${failed_tests[*]}"
fi
if [ ${#untracked[@]} -gt 0 ]; then
  echo "  heap not tracked by memcheck (fewer than $MIN_ALLOCS allocations): ${untracked[*]}"
fi
if [ "$errors" -ne 0 ] || [ "$lost_total" != 0 ] || [ ${#untracked[@]} -gt 0 ]; then
  echo "memcheck: FAILED"
  exit 1
fi
echo "memcheck: OK"
