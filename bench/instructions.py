"""Instructions per request inside the server, counted with callgrind: the figure to compare
across commits, since a count does not move with the machine's load the way throughput does.

For each server (redis-server; valkey-server too when VALKEY_SERVER or .venv has one),
without and with a replica attached (the replica runs outside valgrind: only the primary is
counted), each module given (`--module PATH[=LABEL]`, repeatable: e.g. the build of an earlier commit beside
this one, measured in the same run) and each row, a fresh server starts under
`valgrind --tool=callgrind` with instrumentation off, in its own directory. redis-benchmark
warms the key space up (so that rows on live keys find their keys), then instrumentation is
switched on, the measured requests run, and the server's total instruction count (every
thread, event loop and networking included) is divided by the number of requests.

    python3 bench/instructions.py [--module PATH[=LABEL]]... [--requests N] [--output FILE]
        [--only TEXT] [--redis-only] [--no-replica]

Python 3 standard library only. Writes bench/INSTRUCTIONS-RESULTS.md by default."""

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from benchlib import REPO_DIR, Processes, git_commit, machine_description

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_MODULE = REPO_DIR / "target" / "release" / "libredis_ratelimit.so"
DEFAULT_OUTPUT = BENCH_DIR / "INSTRUCTIONS-RESULTS.md"

KEY = "k:__rand_int__"
KEYSPACE = 100_000
CLIENTS = 50
PIPELINE = 16
# Enough warm-up requests that nearly every key of the space exists before the count starts
# (1 - e^-3: 95%), so the live-key rows overwrite live keys.
WARMUP_REQUESTS = 3 * KEYSPACE
DEFAULT_REQUESTS = 200_000
HOUR_MS = 3_600_000


@dataclass
class Row:
    name: str
    args: List[str]
    module: bool = True  # needs the module's commands


def rows(far_future_ms: int) -> List[Row]:
    return [
        Row("SET k 1 PXAT t (native write with expiry)",
            ["SET", KEY, "1", "PXAT", str(far_future_ms)], module=False),
        Row("RL.HIT fixed, 1000000/1h", ["RL.HIT", KEY, "1000000", "1h"]),
        # 100 per hour: the warm-up and the count give each key a handful of hits, far below
        # the burst, so every call allowed and every key live.
        Row("RL.HIT gcra, 100/1h (live keys)", ["RL.HIT", KEY, "100", "1h", "ALGO", "gcra"]),
        Row("RL.HIT fixed, two tiers (10000/1s + 1000000/1h)",
            ["RL.HIT", KEY, "10000", "1s", "1000000", "1h"]),
        Row("CL.THROTTLE k 100 100 3600 (redis-cell API)",
            ["CL.THROTTLE", KEY, "100", "100", "3600", "1"]),
    ]


def valkey_server() -> Optional[str]:
    candidate = os.environ.get("VALKEY_SERVER") or ""
    if not candidate:
        found = subprocess.run([str(REPO_DIR / "scripts" / "valkey-path.sh")],
                               capture_output=True, text=True)
        candidate = found.stdout.strip()
    return candidate if candidate and Path(candidate).exists() else None


def server_version(binary: str) -> str:
    output = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    match = re.search(r"v=(\S+)", output)
    name = "Valkey" if "valkey" in output.lower() else "Redis"
    return f"{name} {match.group(1) if match else '?'}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as trial:
        trial.bind(("127.0.0.1", 0))
        return trial.getsockname()[1]


def ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def start_under_callgrind(processes: Processes, binary: str, module: Optional[Path],
                          workdir: Path) -> Tuple[subprocess.Popen, int]:
    for _ in range(3):
        port = free_port()
        command = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={workdir}/callgrind.out",
            binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
            "--appendonly", "no", "--dir", str(workdir),
            "--logfile", str(workdir / "server.log"),
        ]
        if module is not None:
            command += ["--loadmodule", str(module)]
        server = processes.start(command, stdout=subprocess.DEVNULL,
                                 stderr=open(workdir / "valgrind.log", "w"))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and server.poll() is None:
            if ping(port):
                return server, port
            time.sleep(0.2)
        processes.stop(server)
    raise RuntimeError(f"{binary} did not start under valgrind: see {workdir}")


def benchmark(port: int, args: List[str], requests: int) -> None:
    command = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(CLIENTS),
               "-P", str(PIPELINE), "-r", str(KEYSPACE), "-n", str(requests), "-q", "--csv"]
    result = subprocess.run(command + args, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0 or "ERR" in result.stdout or "ERR" in result.stderr:
        raise RuntimeError(f"redis-benchmark {args}: {result.stdout}{result.stderr}")


def one_reply(port: int, args: List[str]) -> bytes:
    payload = b"*%d\r\n" % len(args) + b"".join(
        b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()) for a in args)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        connection.sendall(payload)
        return connection.recv(4096)


def callgrind(pid: int, option: str) -> None:
    subprocess.run(["callgrind_control", option, str(pid)], check=True,
                   capture_output=True, timeout=120)


def total_instructions(workdir: Path) -> int:
    total = 0
    for dump in workdir.glob("callgrind.out*"):
        # The header's `summary:` may be 0; `totals:` at the end holds the dump's count.
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith("totals:"):
                total += int(line.split()[1])
    return total


def info_field(port: int, section: str, field: str) -> str:
    reply = one_reply(port, ["INFO", section]).decode(errors="replace")
    for line in reply.splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    return ""


def attach_replica(processes: Processes, binary: str, primary_port: int, workdir: Path) -> None:
    """A replica of the server on `primary_port`, not under valgrind (only the primary is
    counted) and without the module: it applies the SET and DEL the module propagates."""
    replica_dir = workdir / "replica"
    replica_dir.mkdir()
    port = free_port()
    processes.start([binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                     "--appendonly", "no", "--dir", str(replica_dir),
                     "--logfile", str(replica_dir / "server.log"),
                     "--replicaof", "127.0.0.1", str(primary_port)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if ping(port) and info_field(port, "replication", "master_link_status") == "up":
            return
        time.sleep(0.2)
    raise RuntimeError(f"the replica of {binary} did not link: see {replica_dir}")


def measure(binary: str, module: Optional[Path], row: Row, requests: int,
            replica: bool) -> float:
    """Instructions per request of `row` on a fresh server (with a replica attached)."""
    processes = Processes()
    workdir = Path(tempfile.mkdtemp(prefix="rl-instr-"))
    try:
        server, port = start_under_callgrind(processes, binary, module, workdir)
        if replica:
            attach_replica(processes, binary, port, workdir)
        # A wrong row must fail loudly, not count the cost of an error reply.
        first = one_reply(port, [a.replace("__rand_int__", "probe") for a in row.args])
        if first.startswith(b"-"):
            raise RuntimeError(f"{row.args}: {first!r}")
        benchmark(port, row.args, WARMUP_REQUESTS)
        callgrind(server.pid, "--instr=on")
        benchmark(port, row.args, requests)
        callgrind(server.pid, "--instr=off")
        callgrind(server.pid, "--dump")
        processes.stop(server)
        return total_instructions(workdir) / requests
    finally:
        processes.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)


def parse_module(text: str) -> Tuple[Path, str]:
    path, _, label = text.partition("=")
    return Path(path).resolve(), label or Path(path).name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", action="append", default=[],
                        help="PATH[=LABEL] of a module build (repeatable); default: this "
                             "checkout's release build")
    parser.add_argument("--requests", type=int, default=DEFAULT_REQUESTS)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--redis-only", action="store_true")
    parser.add_argument("--no-replica", action="store_true",
                        help="skip the rows with a replica attached")
    parser.add_argument("--only", default="",
                        help="measure only the rows whose name contains this text (SET always)")
    options = parser.parse_args()
    modules = [parse_module(m) for m in options.module] or [(DEFAULT_MODULE, "this commit")]
    for path, _ in modules:
        if not path.exists():
            print(f"no module at {path}: run `make build` first", file=sys.stderr)
            return 2
    servers = [shutil.which("redis-server") or "redis-server"]
    valkey = None if options.redis_only else valkey_server()
    if valkey:
        servers.append(valkey)
    far_future_ms = int(time.time() * 1000) + 24 * HOUR_MS

    # results[server][row][label] = instructions per request
    results: Dict[str, Dict[str, Dict[str, float]]] = {}
    variants = [False] if options.no_replica else [False, True]
    for binary in servers:
        for replica in variants:
            version = server_version(binary) + (", with a replica" if replica else "")
            results[version] = {}
            for row in rows(far_future_ms):
                if row.module and options.only not in row.name:
                    continue
                per_module = results[version].setdefault(row.name, {})
                targets = modules if row.module else [(None, "server")]
                for path, label in targets:
                    value = measure(binary, path, row, options.requests, replica)
                    per_module[label] = value
                    print(f"{version:30} {label:14} {row.name:50} {value:10,.0f}", flush=True)

    labels = [label for _, label in modules]
    lines = [
        "# Instructions per request inside the server (callgrind)",
        "",
        f"Commit {git_commit()}, {time.strftime('%Y-%m-%d')}, `python3 bench/instructions.py"
        + "".join(f" --module {p.name}={l}" for p, l in modules if options.module) + "`.",
        f"{machine_description()}. Counts move about 1 to 2% between runs, whatever the machine's load (the rows with a moving expiry a little with how many calls share a millisecond).",
        "",
        f"redis-benchmark -c {CLIENTS} -P {PIPELINE} -r {KEYSPACE}: {WARMUP_REQUESTS:,} "
        f"requests to warm up with instrumentation off, then {options.requests:,} counted. "
        "Each cell is a fresh server in a fresh directory; the count is the whole server's "
        "(event loop, networking, every thread) divided by the requests. In brackets: the "
        "ratio of `SET ... PXAT`'s count to the row's (higher is cheaper; 1.00 x costs what "
        "SET costs).",
        "",
    ]
    for version, table in results.items():
        set_cost = next(iter(table.values()))["server"]
        header = "| " + version + " | " + " | ".join(labels) + " |"
        if len(labels) > 1:
            header += f" {labels[-1]} / {labels[0]} |"
        lines += [header, "|---" + "|---:" * (len(labels) + (len(labels) > 1)) + "|"]
        for name, per_module in table.items():
            if "server" in per_module:
                cells = [f"{per_module['server']:,.0f}"] * len(labels)
                ratio = ""
            else:
                cells = [f"{per_module[l]:,.0f} ({set_cost / per_module[l]:.2f} x)" for l in labels]
                ratio = f"{per_module[labels[-1]] / per_module[labels[0]]:.3f}"
            line = f"| {name} | " + " | ".join(cells) + " |"
            if len(labels) > 1:
                line += f" {ratio} |"
            lines.append(line)
        lines.append("")
    options.output.write_text("\n".join(lines))
    print(f"wrote {options.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
