#!/usr/bin/env python3
"""rl-gateway as Envoy's rate limit service: ShouldRateLimit over gRPC against the HTTP check
mode, for the same limit, in one run, both as ratios to a gRPC call that does nothing.

Starts its own redis-server (with the module), one rl-gateway (one worker thread: the figures
are per core of the gateway) serving both the check mode and [envoy], and `grpc-load null`
(a ShouldRateLimit that answers OK at once, also on one thread). `grpc-load` (one thread)
keeps N calls in flight, one per connection, in interleaved rounds:

    (null)  gRPC ShouldRateLimit to grpc-load null: the protocol's own cost
    (grpc)  ShouldRateLimit to rl-gateway: descriptor (user, bench), 1,000,000,000 a minute;
            one RL.HIT per call, every call allowed
    (grpc3) the same with three descriptors, (user, bench), (path, /bench), (plan, free),
            each of 1,000,000,000 a minute: decided all or nothing in one call
    (http)  GET /bench to rl-gateway's check mode with X-User: bench, the same limit: one
            RL.HIT per request, every request allowed

The report gives the median over the rounds of calls/s, p50 and p99, each as a ratio to
(null) at the same connection count, the server's CPU (utime + stime from /proc) per call,
and the Redis commands per call (INFO commandstats over the run). It prints Markdown and
writes bench/ENVOY-RESULTS.md.

    python3 bench/envoy.py            # part of `make bench-gateway`, after `make build`
    python3 bench/envoy.py --quick    # a smoke run of the script itself (not a result)

It builds nothing: target/release/{libredis_ratelimit.so,rl-gateway,grpc-load} must exist.
Python 3 standard library only; every process it starts is stopped by its pid.
"""

import argparse
import datetime
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

from lib.cpu import process_cpu_seconds
from lib.grpc_load import run_load
from lib.net import free_ports, wait_port
from lib.processes import Processes, stop_on_signals
from lib.report import README_LINK, git_commit, log, machine_description
from lib.rounds import rotated

BENCH_DIR = Path(__file__).resolve().parent
RELEASE_DIR = BENCH_DIR.parent / "target" / "release"
MODULE = RELEASE_DIR / "libredis_ratelimit.so"
GATEWAY = RELEASE_DIR / "rl-gateway"
LOAD = RELEASE_DIR / "grpc-load"
OUTPUT = BENCH_DIR / "ENVOY-RESULTS.md"
SCENARIOS = ["null", "grpc", "grpc3", "http"]
# Each of (grpc3)'s descriptors: key, value.
THREE = [("user", "bench"), ("path", "/bench"), ("plan", "free")]


def redis_commands(port: int) -> int:
    """Commands the server has run, but the INFO that asks."""
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "commandstats"],
                         capture_output=True, text=True, check=True).stdout
    total = 0
    for line in out.splitlines():
        if line.startswith("cmdstat_") and not line.startswith("cmdstat_info:"):
            total += int(line.split("calls=")[1].split(",")[0])
    return total


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--conns", default="1,16")
    parser.add_argument("--output", default=str(OUTPUT))
    options = parser.parse_args()
    if options.quick:
        options.rounds, options.seconds = 1, 0.5
    conns = [int(c) for c in options.conns.split(",")]
    for path in (MODULE, GATEWAY, LOAD):
        if not path.exists():
            raise SystemExit(f"{path} is missing: run `make build` first")
    stop_on_signals()
    processes = Processes()
    work = Path(tempfile.mkdtemp(prefix="rl-envoy-bench-"))
    try:
        redis_port, http_port, admin_port, grpc_port, null_port = free_ports(5)
        redis = processes.start(["redis-server", "--bind", "127.0.0.1", "--port", str(redis_port),
                                 "--save", "", "--appendonly", "no", "--dir", str(work),
                                 "--loadmodule", str(MODULE)], stdout=subprocess.DEVNULL)
        wait_port(redis_port, "redis-server")
        (work / "descriptors").mkdir()
        (work / "descriptors" / "bench.yaml").write_text("domain: bench\ndescriptors:\n" + "".join(
            f"  - key: {key}\n    rate_limit:\n      unit: minute\n"
            "      requests_per_unit: 1000000000\n" for key, _ in THREE))
        (work / "gateway.toml").write_text(f"""# Written by bench/envoy.py for one run.
[server]
listen = "127.0.0.1:{http_port}"
admin_listen = "127.0.0.1:{admin_port}"
mode = "check"
worker_threads = 1

[redis]
url = "redis://127.0.0.1:{redis_port}"
deadline_ms = 5

[[rule]]
name = "bench"
path = "/bench"
key = "header:X-User"
limits = ["1000000000/1m"]

[envoy]
listen = "127.0.0.1:{grpc_port}"
descriptors = "descriptors"
response_headers = true
""")
        gateway = processes.start([str(GATEWAY), "--config", str(work / "gateway.toml")],
                                  stdout=subprocess.DEVNULL, stderr=open(work / "gateway.log", "w"))
        null = processes.start([str(LOAD), "null", f"127.0.0.1:{null_port}"])
        for port, what in ((http_port, "rl-gateway"), (grpc_port, "rl-gateway [envoy]"),
                           (null_port, "grpc-load null")):
            wait_port(port, what)
        servers = {"null": null.pid, "grpc": gateway.pid, "grpc3": gateway.pid,
                   "http": gateway.pid}

        def args(scenario: str, n: int) -> List[str]:
            seconds = str(options.seconds)
            if scenario == "null":
                return ["grpc", f"127.0.0.1:{null_port}", str(n), seconds, "bench", "user", "bench"]
            if scenario == "grpc":
                return ["grpc", f"127.0.0.1:{grpc_port}", str(n), seconds, "bench", "user", "bench"]
            if scenario == "grpc3":
                pairs = [part for pair in THREE for part in pair]
                return ["grpc", f"127.0.0.1:{grpc_port}", str(n), seconds, "bench"] + pairs
            return ["http", f"127.0.0.1:{http_port}", str(n), seconds, "/bench", "X-User", "bench"]

        # Warm up every path once.
        for scenario in SCENARIOS:
            run_load(LOAD, args(scenario, 1)[:3] + ["0.3"] + args(scenario, 1)[4:])
        results: Dict[Tuple[str, int], List[Dict[str, float]]] = {}
        for r in range(options.rounds):
            # One step further each round: every scenario runs first, second and last in turn.
            order = rotated(SCENARIOS, r)
            for n in conns:
                for scenario in order:
                    before = process_cpu_seconds(servers[scenario])
                    commands_before = redis_commands(redis_port)
                    got = run_load(LOAD, args(scenario, n))
                    got["cpu_us"] = (process_cpu_seconds(servers[scenario]) - before) * 1e6 / max(got["calls"], 1)
                    got["commands"] = (redis_commands(redis_port) - commands_before) / max(got["calls"], 1)
                    got["rps"] = got["calls"] / got["seconds"]
                    if got["errors"]:
                        raise SystemExit(f"{scenario} x{n}: {got['errors']:.0f} errors")
                    results.setdefault((scenario, n), []).append(got)
            log(f"round {r + 1}/{options.rounds} done")
        median = {key: {f: statistics.median(g[f] for g in runs) for f in runs[0]}
                  for key, runs in results.items()}
        lines = [
            "# rl-gateway as Envoy's rate limit service: gRPC against the HTTP check mode",
            "",
            README_LINK,
            "",
            f"Run by `bench/envoy.py` (`make bench-gateway`) on {datetime.date.today()}, "
            f"commit {git_commit()}, {machine_description()}; {options.rounds} rounds of "
            f"{options.seconds} s per scenario and connection count, interleaved, medians.",
            "",
            "- null: ShouldRateLimit to `grpc-load null`, which answers OK at once (one thread):"
            " the protocol's own cost, the baseline of every ratio.",
            "- grpc: ShouldRateLimit to rl-gateway `[envoy]`, one descriptor (user, bench) of "
            "1,000,000,000 a minute: one RL.HIT per call, all allowed.",
            "- grpc3: the same call with three descriptors, (user, bench), (path, /bench) and "
            "(plan, free), each of the same limit: decided all or nothing.",
            "- http: GET /bench to the same rl-gateway's check mode, X-User: bench, the same "
            "limit: one RL.HIT per request, all allowed.",
            "- rl-gateway runs one worker thread (figures per core of the gateway); the load "
            "generator (`grpc-load`, one thread, one call in flight per connection), "
            "redis-server and the servers share the machine's 2 cores, unpinned.",
            "- server CPU µs/call: the server's utime + stime over the run (rl-gateway for grpc "
            "and http, grpc-load null for null) per call; Redis commands/call: every command "
            "redis-server ran over the run (INFO commandstats) per call.",
            "",
            "| scenario | conns | calls/s | × null | p50 µs | × null | p99 µs | × null | server CPU µs/call | Redis commands/call |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for n in conns:
            base = median[("null", n)]
            for scenario in SCENARIOS:
                m = median[(scenario, n)]
                lines.append(
                    f"| {scenario} | {n} | {m['rps']:,.0f} | {m['rps'] / base['rps']:.2f} | "
                    f"{m['p50_us']:.0f} | {m['p50_us'] / max(base['p50_us'], 1):.2f} | "
                    f"{m['p99_us']:.0f} | {m['p99_us'] / max(base['p99_us'], 1):.2f} | "
                    f"{m['cpu_us']:.1f} | {m['commands']:.2f} |")
        report = "\n".join(lines) + "\n"
        print(report)
        if not options.quick:
            Path(options.output).write_text(report)
        return 0
    finally:
        processes.stop_all()


if __name__ == "__main__":
    sys.exit(main())
