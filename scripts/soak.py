#!/usr/bin/env python3
"""Soak: a million mixed calls of the module, watching the server's memory.

Starts a server (Redis, Valkey or both, one after the other) with the module, sends
`--calls` calls in pipelined batches (every command of the module, every algorithm, one to
three tiers, named policies, refunds and resets, and calls that fail), over a fixed set of
keys whose windows keep expiring and coming back, and samples `used_memory` (INFO, without
the clients' buffers, which follow the size of the last pipeline's replies) and the
process's RSS (/proc/<pid>/status) every `--calls / --samples` calls.

At each sample the server is also emptied (FLUSHALL, the policies deleted, then defined
again) and used_memory read once more: with no key and no policy left, whatever the module
leaked stays there (it allocates through the server, whose used_memory counts it).

Over the second half of the samples, by least-squares slope: RSS grows less than
`--max-growth` of its mean, used_memory less than `--max-live-growth` (looser: how many keys
are live at a sample follows the machine's speed, since windows are time), and the emptied
used_memory less than `--max-residue` bytes, and ends within that of the baseline taken
after a warm-up of a tenth of the calls. Exits 1 otherwise. `--port` drives a server that
is already running (for `scripts/memcheck.sh`) and checks nothing.

Needs redis-py (in .venv after `make setup`). `make soak` runs it on both servers.
"""

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

REPO = Path(__file__).resolve().parent.parent
# Windows of 10 s at most: the data set (keys and their states) settles within the first
# seconds, long before the second half of the run, whose memory is judged.
WINDOWS = ["1s", "2s", "5s", "250ms", "10s"]
ALGOS = ["fixed", "sliding", "log", "token", "gcra"]


def mixed_call(rng: random.Random, keys: int) -> list:
    """One call of the module: mostly well-formed, some failing on purpose."""
    key = f"soak:{rng.randrange(keys)}"
    roll = rng.randrange(100)
    if roll < 50:
        tiers = []
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            tiers += [str(rng.choice([1, 5, 10, 100, 1000])), rng.choice(WINDOWS)]
        algo = ALGOS[int(key.rsplit(":", 1)[1]) % len(ALGOS)]
        command = rng.choice(["RL.HIT", "RL.HIT", "RL.HIT", "RL.PEEK", "RL.REFUND"])
        call = [command, key, *tiers, "ALGO", algo]
        if rng.randrange(4) == 0:
            call += ["COST", str(rng.choice([1, 2, 7]))]
        return call
    if roll < 62:
        return ["RL.HIT", key, "POLICY", rng.choice(["soak-api", "soak-login"])]
    if roll < 72:
        return ["CL.THROTTLE", key, "15", "30", "60", str(rng.choice([0, 1, 2]))]
    if roll < 76:
        return ["RL.RESET", key]
    if roll < 80:
        return ["RL.STATS", rng.choice(["soak-api", "soak-login"])]
    if roll < 82:
        return ["RL.POLICY", "GET", "soak-api"]
    # Failing calls: their error paths must not leak either.
    return rng.choice(
        [
            ["RL.HIT", key, "0", "1s"],
            ["RL.HIT", key, "5", "400d"],
            ["RL.HIT", key, "5", "1s", "ALGO", "nope"],
            ["RL.HIT", key, *(["5", "1s"] * 9)],
            ["RL.HIT", key, "5", "1s", "COST"],
            ["RL.PEEK", key, "POLICY", "missing"],
            ["CL.THROTTLE", key, "-1", "30", "60"],
            ["RL.HIT", key, "9223372036854775808", "1s"],
        ]
    )


def server_binary(flavor: str) -> str:
    if flavor == "redis":
        return os.environ.get("REDIS_SERVER") or "redis-server"
    found = os.environ.get("VALKEY_SERVER") or subprocess.run(
        [str(REPO / "scripts/valkey-path.sh")], capture_output=True, text=True
    ).stdout.strip()
    if not found:
        sys.exit("valkey-server not found: run `make setup` or set VALKEY_SERVER")
    return found


def start_server(flavor: str, module: Path, workdir: Path) -> subprocess.Popen:
    socket = workdir / "server.sock"
    command = [
        server_binary(flavor),
        "--port", "0",
        "--unixsocket", str(socket),
        "--dir", str(workdir),
        "--logfile", str(workdir / "server.log"),
        "--save", "",
        "--appendonly", "no",
        # The slow log would fill up to its length during the run: memory that is not ours.
        "--slowlog-log-slower-than", "-1",
        "--loadmodule", str(module),
    ]
    if flavor == "redis":
        command += ["policies-in-rdb", "yes"]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            if redis.Redis(unix_socket_path=str(socket)).ping():
                return process
        except (redis.ConnectionError, FileNotFoundError):
            time.sleep(0.05)
    process.kill()
    sys.exit(f"{flavor} did not start; see {workdir / 'server.log'}")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def slope_per_call(xs: list, ys: list) -> float:
    """The least-squares slope of ys over xs."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    var = sum((x - mean_x) ** 2 for x in xs)
    cov = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys))
    return cov / var if var else 0.0


def set_policies(client: redis.Redis) -> None:
    client.execute_command("RL.POLICY", "SET", "soak-api", "5", "1s", "ALGO", "sliding")
    client.execute_command("RL.POLICY", "SET", "soak-login", "3", "2s", "ALGO", "gcra")


def drive(client: redis.Redis, calls: int, samples: int, keys: int, seed: int, pid) -> list:
    """Sends the calls. With a `pid` (a server of our own), takes `samples` samples: the
    calls so far, used_memory, RSS and keys live, then empties the server and takes
    used_memory once more (what the server holds with no key and no policy). Returns the
    samples and how many calls were answered with an error."""
    set_policies(client)
    rng = random.Random(seed)
    every = max(1, calls // samples)
    batch = 1000
    taken = []
    sent = errors = 0
    while sent < calls:
        pipe = client.pipeline(transaction=False)
        size = min(batch, calls - sent, every - sent % every)
        for _ in range(size):
            pipe.execute_command(*mixed_call(rng, keys))
        replies = pipe.execute(raise_on_error=False)
        errors += sum(isinstance(reply, redis.ResponseError) for reply in replies)
        sent += size
        if pid and sent % every == 0:
            live, keys_live = used_memory(client), client.dbsize()
            rss = rss_bytes(pid)
            emptied = remove_everything(client)
            set_policies(client)
            taken.append((sent, live, rss, keys_live, emptied))
    return taken, errors


def used_memory(client: redis.Redis) -> int:
    """used_memory without the clients' buffers, whose size follows the last pipeline."""
    memory = client.info("memory")
    return memory["used_memory"] - memory["mem_clients_normal"]


def remove_everything(client: redis.Redis) -> int:
    """Removes every key and policy; returns used_memory then."""
    # SYNC spelt out: Valkey 8 flushes in the background by default (lazyfree-lazy-user-flush).
    client.execute_command("FLUSHALL", "SYNC")
    for name in ("soak-api", "soak-login"):
        client.execute_command("RL.POLICY", "DEL", name)
    client.execute_command("RL.STATS", "RESET")
    return used_memory(client)


def growth(xs: list, ys: list) -> float:
    """How much ys grows over the span of xs, by the least-squares slope."""
    return slope_per_call(xs, ys) * (xs[-1] - xs[0])


def report(flavor: str, taken: list, baseline: int, args, elapsed: float, errors: int) -> bool:
    print(f"\n{flavor}: {taken[-1][0]} calls in {elapsed:.1f} s, {errors} errors answered; "
          f"used_memory emptied after the warm-up: {baseline} bytes")
    print(f"{'calls':>9} {'used_memory':>12} {'rss':>12} {'keys':>6} {'emptied':>9}")
    for calls, live, rss, keys, emptied in taken:
        print(f"{calls:>9} {live:>12} {rss:>12} {keys:>6} {emptied - baseline:>+9}")
    half = taken[len(taken) // 2:]
    xs = [s[0] for s in half]
    checks = [
        # (what, column, largest growth allowed over the second half, as a share or bytes)
        ("used_memory", 1, args.max_live_growth * mean([s[1] for s in half])),
        ("rss", 2, args.max_growth * mean([s[2] for s in half])),
        ("used_memory emptied", 4, args.max_residue),
    ]
    ok = True
    for name, column, allowed in checks:
        ys = [s[column] for s in half]
        grown = growth(xs, ys)
        verdict = "flat" if abs(grown) <= allowed else "NOT FLAT"
        ok &= verdict == "flat"
        print(f"{flavor} {name}: second half {min(ys)}..{max(ys)} bytes, slope "
              f"{grown / (xs[-1] - xs[0]) * 100_000:+.1f} bytes per 100k calls, {grown:+.0f} "
              f"bytes over {xs[-1] - xs[0]} calls (allowed {allowed:.0f}): {verdict}")
    residue = taken[-1][4] - baseline
    verdict = "ok" if residue <= args.max_residue else "TOO MUCH"
    ok &= verdict == "ok"
    print(f"{flavor} emptied at the end: {residue:+} bytes from the baseline: {verdict}")
    return ok


def mean(values: list) -> float:
    return sum(values) / len(values)


def soak(flavor: str, args) -> bool:
    workdir = Path(tempfile.mkdtemp(prefix=f"rl-soak-{flavor}-"))
    process = start_server(flavor, args.module, workdir)
    try:
        client = redis.Redis(unix_socket_path=str(workdir / "server.sock"), protocol=2)
        # A warm-up first, then everything removed: what the server and the module keep
        # once they ran (buffers, cached strings, hash tables) is in the baseline.
        drive(client, max(1, args.calls // 10), 1, args.keys, args.seed + 1, None)
        baseline = remove_everything(client)
        started = time.time()
        taken, errors = drive(client, args.calls, args.samples, args.keys, args.seed, process.pid)
        elapsed = time.time() - started
        return report(flavor, taken, baseline, args, elapsed, errors)
    finally:
        process.terminate()
        process.wait(timeout=20)
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=["redis", "valkey", "both"], default="both")
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--keys", type=int, default=5_000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--max-growth", type=float, default=0.02,
                        help="largest RSS growth over the second half, a share of its mean")
    parser.add_argument("--max-live-growth", type=float, default=0.10,
                        help="largest used_memory growth over the second half, a share of its "
                             "mean (the data set's size follows the machine's speed)")
    parser.add_argument("--max-residue", type=int, default=64 * 1024,
                        help="most bytes the emptied used_memory may grow above the baseline")
    parser.add_argument("--module", type=Path,
                        default=REPO / "target/release/libredis_ratelimit.so")
    parser.add_argument("--port", type=int, help="drive this running server, check nothing")
    args = parser.parse_args()
    if args.port:
        client = redis.Redis(port=args.port, protocol=2)
        drive(client, args.calls, args.samples, args.keys, args.seed, None)
        return
    args.module = args.module.resolve()  # the server changes to its own directory
    if not args.module.exists():
        sys.exit(f"{args.module} missing: cargo build --release --lib")
    flavors = ["redis", "valkey"] if args.server == "both" else [args.server]
    results = [soak(flavor, args) for flavor in flavors]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
