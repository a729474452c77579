"""Instructions per allowed request inside rl-gateway, counted with callgrind: the figure to
compare across commits, since it does not move with the machine's load the way CPU time does.

For each gateway binary (this checkout's release build, and with --baseline-gateway PATH one
built from another commit, in the same run): redis-server with the module, the demo upstream,
and the gateway under `valgrind --tool=callgrind --instr-atstart=no` in proxy mode with one
rule. WARMUP requests go uncounted; then --requests requests, one after another on one
keep-alive connection, run with instrumentation on, each checked to be a 200 and each counted
by Redis as one RL.HIT. An idle interval as long as the requests took is counted too and
subtracted: the heartbeat and the timers run whatever the load.

    python3 bench/gateway_instructions.py [--baseline-gateway PATH] [--requests N]
        [--local-quota] [--output FILE] [--keep-profiles DIR]

--local-quota measures a rule with local_quota = true on one hot key instead (the rules
and [local_quota] settings of bench/gateway_quota.py): most requests are decided in the
gateway's memory, and the Redis calls per request (RL.TAKE, RL.HIT, RL.REFUND) are
reported beside the instructions; they follow the requests' rate, which valgrind slows,
so they are more than at full speed. Writes bench/GATEWAY-INSTRUCTIONS-LOCAL-QUOTA-RESULTS.md.

--keep-profiles DIR copies each gateway's callgrind dumps (the requests' and the idle
interval's) into DIR before they are removed, for `callgrind_annotate --inclusive=yes`.

Python 3 standard library only. Writes bench/GATEWAY-INSTRUCTIONS-RESULTS.md by default."""

import argparse
import http.client
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import gateway_quota as quota
from lib import REPO_DIR
from lib.net import free_ports, wait_port
from lib.processes import Processes
from lib.report import README_LINK, git_commit, log, machine_description
from lib.resp import call_once, parse_info

BENCH_DIR = Path(__file__).resolve().parent
RELEASE = REPO_DIR / "target" / "release"
DEFAULT_OUTPUT = BENCH_DIR / "GATEWAY-INSTRUCTIONS-RESULTS.md"
LOCAL_QUOTA_OUTPUT = BENCH_DIR / "GATEWAY-INSTRUCTIONS-LOCAL-QUOTA-RESULTS.md"
WARMUP = 300
DEFAULT_REQUESTS = 3000

CONFIG = """[server]
listen = "127.0.0.1:{http}"
admin_listen = "127.0.0.1:{admin}"
mode = "proxy"
upstream = "http://127.0.0.1:{upstream}"

[redis]
url = "redis://127.0.0.1:{redis}"
deadline_ms = 1000
key_prefix = "bench:"

{rules}"""

# A limit every request passes, as bench/gateway.py's.
ALLOW_LIMIT = "1000000000/1m"
RLHIT_RULES = f"""[default]
key = "ip"
limits = ["{ALLOW_LIMIT}"]
"""
# The commands a gateway with local quota sends for its decisions.
QUOTA_COMMANDS = ("RL.HIT", "RL.TAKE", "RL.REFUND")


def callgrind(pid: int, option: str) -> None:
    subprocess.run(["callgrind_control", option, str(pid)], check=True,
                   capture_output=True, timeout=300)


def total_instructions(workdir: Path, keep: Optional[Path] = None) -> int:
    """The sum of the `totals:` lines of every dump, each dump removed once read (copied
    into `keep` first, when given, named by the dump's own name)."""
    total = 0
    for dump in sorted(workdir.glob("callgrind.out*")):
        if keep is not None:
            keep.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(dump, keep.parent / f"{keep.name}.{dump.name}")
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith("totals:"):
                total += int(line.split()[1])
        dump.unlink()
    return total


def calls(port: int, command: str) -> int:
    stats = parse_info(call_once(port, "INFO", "commandstats"))
    fields = stats.get(f"cmdstat_{command}", "")
    return int(dict(part.split("=", 1) for part in fields.split(",") if "=" in part)
               .get("calls", 0))


def decision_calls(port: int) -> int:
    return sum(calls(port, command) for command in QUOTA_COMMANDS)


def send(connection: http.client.HTTPConnection, count: int, path: str) -> None:
    for _ in range(count):
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"the gateway answered {response.status}, not 200")


def measure(gateway: Path, requests: int, local_quota: bool,
            keep: Optional[Path] = None) -> Tuple[float, float]:
    """Instructions per allowed request of `gateway`, the idle interval's subtracted, and
    Redis calls per request; with `keep` (a directory and a file name prefix), its dumps
    are copied there. Without local quota every request must be one RL.HIT."""
    processes = Processes()
    workdir = Path(tempfile.mkdtemp(prefix="rl-gw-instr-"))
    try:
        redis, upstream, http, admin = free_ports(4)
        processes.start(["redis-server", "--bind", "127.0.0.1", "--port", str(redis),
                         "--save", "", "--appendonly", "no", "--dir", str(workdir),
                         "--loadmodule", str(RELEASE / "libredis_ratelimit.so")],
                        stdout=subprocess.DEVNULL)
        processes.start([str(RELEASE / "demo-upstream"), "--listen", f"127.0.0.1:{upstream}"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(redis, "redis-server")
        wait_port(upstream, "the demo upstream")
        config = workdir / "gateway.toml"
        rules = quota.rules_toml(ALLOW_LIMIT, True) if local_quota else RLHIT_RULES
        path = quota.HOT_PATH + "x" if local_quota else "/api/x"
        config.write_text(CONFIG.format(http=http, admin=admin, upstream=upstream, redis=redis,
                                        rules=rules))
        server = processes.start(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no",
             f"--callgrind-out-file={workdir}/callgrind.out", str(gateway),
             "--config", str(config)],
            stdout=subprocess.DEVNULL, stderr=open(workdir / "valgrind.log", "w"))
        wait_port(http, "rl-gateway under valgrind", limit=120)
        connection = http_connection(http)
        send(connection, WARMUP, path)
        before = decision_calls(redis)
        callgrind(server.pid, "--instr=on")
        started = time.monotonic()
        send(connection, requests, path)
        busy = time.monotonic() - started
        callgrind(server.pid, "--instr=off")
        redis_calls = decision_calls(redis) - before
        if not local_quota and redis_calls != requests:
            raise RuntimeError("a request was not decided by one RL.HIT")
        callgrind(server.pid, "--dump")
        loaded = total_instructions(workdir, keep and keep.with_name(keep.name + "-requests"))
        callgrind(server.pid, "--instr=on")
        time.sleep(busy)
        callgrind(server.pid, "--instr=off")
        callgrind(server.pid, "--dump")
        idle = total_instructions(workdir, keep and keep.with_name(keep.name + "-idle"))
        return (loaded - idle) / requests, redis_calls / requests
    finally:
        processes.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)


def http_connection(port: int) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", port, timeout=60)


def report(results: Dict[str, Tuple[float, float]], requests: int,
           local_quota: bool) -> List[str]:
    decided = ("a rule with local_quota = true on one key (bench/gateway_quota.py's hot rule "
               "and settings), each a 200, most decided in memory" if local_quota
               else "one rule, each a 200 decided by one RL.HIT")
    lines = [
        "# rl-gateway: instructions per allowed request (callgrind)",
        "",
        f"Commit {git_commit()}; {machine_description()}. Generated by "
        f"`python3 bench/gateway_instructions.py`. {README_LINK}",
        "",
        f"Proxy mode, {requests:,} requests one after another on one keep-alive connection, "
        f"{decided}; the gateway's own instructions (every thread), an idle interval of the "
        "same length subtracted. Redis calls: RL.HIT, RL.TAKE and RL.REFUND per request.",
        "",
        "| gateway | instructions per request | this checkout over it | Redis calls per request |",
        "|---|---:|---:|---:|",
    ]
    first = next(iter(results.values()))[0]
    for name, (value, redis_calls) in results.items():
        lines.append(f"| {name} | {value:,.0f} | {first / value:.3f} | {redis_calls:.4f} |")
    return lines + [""]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-gateway", type=Path,
                        help="an rl-gateway release binary of another commit")
    parser.add_argument("--requests", type=int, default=DEFAULT_REQUESTS)
    parser.add_argument("--local-quota", action="store_true",
                        help="a rule with local_quota = true on one hot key")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--keep-profiles", type=Path, metavar="DIR",
                        help="copy the callgrind dumps into DIR (for callgrind_annotate)")
    options = parser.parse_args()
    gateways = {"this checkout": RELEASE / "rl-gateway"}
    if options.baseline_gateway is not None:
        gateways["baseline (--baseline-gateway)"] = options.baseline_gateway.resolve()
    output = options.output or (LOCAL_QUOTA_OUTPUT if options.local_quota else DEFAULT_OUTPUT)
    results: Dict[str, Tuple[float, float]] = {}
    for name, binary in gateways.items():
        if not binary.is_file():
            log(f"{binary} is missing: run `make build` first")
            return 1
        keep = None
        if options.keep_profiles is not None:
            keep = options.keep_profiles / ("baseline" if "baseline" in name else "this")
        results[name] = measure(binary, options.requests, options.local_quota, keep)
        log(f"{name}: {results[name][0]:,.0f} instructions per request, "
            f"{results[name][1]:.4f} Redis calls per request")
    output.write_text("\n".join(report(results, options.requests, options.local_quota)))
    log(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
