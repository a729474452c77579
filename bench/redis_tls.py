#!/usr/bin/env python3
"""What TLS to Redis costs the gateway: the same check-mode requests through two rl-gateway
instances deciding with one redis-server, one over plain TCP and one over TLS, in one run.

Starts its own redis-server (with the module; a plain port and a TLS port, its certificate
made here with the openssl command, clients not asked for one), and two rl-gateway
instances in check mode, one worker thread each (figures per core of the gateway), the same
rule (1,000,000,000 a minute per X-User):

    (plain) [redis] url = "redis://..."                    one RL.HIT per request
    (tls)   [redis] url = "rediss://..." with tls_ca_file   one RL.HIT per request

`grpc-load http` (one thread) keeps N requests in flight, one per keep-alive connection, in
interleaved rounds. The report gives the median over the rounds of requests/s, p50 and p99,
the gateway's CPU (utime + stime from /proc) per request and redis-server's, each as a ratio
to (plain). It prints Markdown and writes bench/REDIS-TLS-RESULTS.md.

    python3 bench/redis_tls.py            # part of `make bench-gateway`, after `make build`
    python3 bench/redis_tls.py --quick    # a smoke run of the script itself (not a result)

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
OUTPUT = BENCH_DIR / "REDIS-TLS-RESULTS.md"
SCENARIOS = ["plain", "tls"]


def openssl(work: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=work, check=True, capture_output=True)


def make_certificates(work: Path) -> None:
    """ca.pem, and server.pem / server.key for 127.0.0.1, signed by it."""
    openssl(work, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=rl-bench ca", "-keyout", "ca.key", "-out", "ca.pem")
    (work / "server.ext").write_text("basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\n")
    openssl(work, "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=rl-bench server",
            "-keyout", "server.key", "-out", "server.csr")
    openssl(work, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "server.ext", "-out", "server.pem")


def gateway_config(listen: int, admin: int, redis_lines: str) -> str:
    return f"""# Written by bench/redis_tls.py for one run.
[server]
listen = "127.0.0.1:{listen}"
admin_listen = "127.0.0.1:{admin}"
mode = "check"
worker_threads = 1

[redis]
{redis_lines}
deadline_ms = 50

[[rule]]
name = "bench"
path = "/bench"
key = "header:X-User"
limits = ["1000000000/1m"]
"""


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
    work = Path(tempfile.mkdtemp(prefix="rl-tls-bench-"))
    try:
        make_certificates(work)
        plain_port, tls_port, *ports = free_ports(6)
        redis = processes.start(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(plain_port),
             "--tls-port", str(tls_port), "--tls-cert-file", str(work / "server.pem"),
             "--tls-key-file", str(work / "server.key"), "--tls-ca-cert-file",
             str(work / "ca.pem"), "--tls-auth-clients", "no", "--save", "",
             "--appendonly", "no", "--dir", str(work), "--loadmodule", str(MODULE)],
            stdout=subprocess.DEVNULL)
        wait_port(plain_port, "redis-server")
        wait_port(tls_port, "redis-server (TLS)")
        redis_lines = {
            "plain": f'url = "redis://127.0.0.1:{plain_port}"',
            "tls": f'url = "rediss://127.0.0.1:{tls_port}"\ntls_ca_file = "{work / "ca.pem"}"',
        }
        gateways = {}
        for scenario, (listen, admin) in zip(SCENARIOS, [ports[0:2], ports[2:4]]):
            config = work / f"{scenario}.toml"
            config.write_text(gateway_config(listen, admin, redis_lines[scenario]))
            process = processes.start([str(GATEWAY), "--config", str(config)],
                                      stdout=subprocess.DEVNULL,
                                      stderr=open(work / f"{scenario}.log", "w"))
            wait_port(listen, f"rl-gateway ({scenario})")
            gateways[scenario] = (process, listen)

        def args(scenario: str, n: int, seconds: float) -> List[str]:
            return ["http", f"127.0.0.1:{gateways[scenario][1]}", str(n), str(seconds),
                    "/bench", "X-User", "bench"]

        for scenario in SCENARIOS:  # warm up, and fail early if a path does not answer
            warm = run_load(LOAD, args(scenario, 1, 0.3))
            if warm["errors"] or not warm["calls"]:
                raise SystemExit(f"{scenario}: {warm}; see {work / (scenario + '.log')}")
        results: Dict[Tuple[str, int], List[Dict[str, float]]] = {}
        for r in range(options.rounds):
            order = rotated(SCENARIOS, r)
            for n in conns:
                for scenario in order:
                    pid = gateways[scenario][0].pid
                    before = (process_cpu_seconds(pid), process_cpu_seconds(redis.pid))
                    got = run_load(LOAD, args(scenario, n, options.seconds))
                    calls = max(got["calls"], 1)
                    got["gateway_us"] = (process_cpu_seconds(pid) - before[0]) * 1e6 / calls
                    got["redis_us"] = (process_cpu_seconds(redis.pid) - before[1]) * 1e6 / calls
                    got["rps"] = got["calls"] / got["seconds"]
                    if got["errors"]:
                        raise SystemExit(f"{scenario} x{n}: {got['errors']:.0f} errors")
                    results.setdefault((scenario, n), []).append(got)
            log(f"round {r + 1}/{options.rounds} done")
        median = {key: {f: statistics.median(g[f] for g in runs) for f in runs[0]}
                  for key, runs in results.items()}
        print_report(median, conns, options)
        return 0
    finally:
        processes.stop_all()


def print_report(median: Dict[Tuple[str, int], Dict[str, float]], conns: List[int],
                 options: argparse.Namespace) -> None:
    lines = [
        "# rl-gateway with TLS to Redis, against plain TCP",
        "",
        README_LINK,
        "",
        f"Run by `bench/redis_tls.py` (`make bench-gateway`) on {datetime.date.today()}, "
        f"commit {git_commit()}, {machine_description()}; {options.rounds} rounds of "
        f"{options.seconds} s per scenario and connection count, interleaved, medians.",
        "",
        "- plain: check-mode GET /bench (X-User: bench, 1,000,000,000 a minute, all allowed) "
        "through rl-gateway deciding with `redis://`: one RL.HIT per request.",
        "- tls: the same through a second rl-gateway deciding with the same redis-server over "
        "`rediss://` (rustls; the server's certificate checked against `tls_ca_file`).",
        "- Each gateway runs one worker thread; the load generator (`grpc-load http`, one "
        "thread, one request in flight per keep-alive connection), redis-server and the "
        "gateways share the machine's 2 cores, unpinned. CPU: utime + stime from /proc over "
        "the run, per request.",
        "",
        "| scenario | conns | requests/s | × plain | p50 µs | × plain | p99 µs | × plain | "
        "gateway CPU µs/req | × plain | redis-server CPU µs/req | × plain |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in conns:
        base = median[("plain", n)]
        for scenario in SCENARIOS:
            m = median[(scenario, n)]
            lines.append(
                f"| {scenario} | {n} | {m['rps']:,.0f} | {m['rps'] / base['rps']:.2f} | "
                f"{m['p50_us']:.0f} | {m['p50_us'] / max(base['p50_us'], 1):.2f} | "
                f"{m['p99_us']:.0f} | {m['p99_us'] / max(base['p99_us'], 1):.2f} | "
                f"{m['gateway_us']:.1f} | {m['gateway_us'] / max(base['gateway_us'], 1e-9):.2f} | "
                f"{m['redis_us']:.1f} | {m['redis_us'] / max(base['redis_us'], 1e-9):.2f} |")
    report = "\n".join(lines) + "\n"
    print(report)
    if not options.quick:
        Path(options.output).write_text(report)


if __name__ == "__main__":
    sys.exit(main())
