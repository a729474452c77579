"""Instructions per request inside the server, counted with callgrind: the figure to compare
across commits, since a count does not move with the machine's load the way throughput does.

For each server (redis-server; valkey-server too when VALKEY_SERVER or .venv has one; and
Redis 8.6 and Valkey 9.1 where scripts/newer-servers.sh built them, unless --no-newer),
without and with a replica attached (the replica runs outside valgrind: only the primary is
counted), each module given (`--module PATH[=LABEL]`, repeatable: e.g. the build of an earlier commit beside
this one, measured in the same run) and each row, a fresh server starts under
`valgrind --tool=callgrind` with instrumentation off, in its own directory. redis-benchmark
warms the key space up (so that rows on live keys find their keys), then instrumentation is
switched on, the measured requests run, and the server's total instruction count (every
thread, event loop and networking included) is divided by the number of calls. The sliding
log's rows run on keys filled beforehand (10 and 10,000 entries, see `Prefill`).

    python3 bench/instructions.py [--module PATH[=LABEL]]... [--requests N] [--output FILE]
        [--only TEXT] [--redis-only] [--no-replica] [--no-newer] [--server TEXT] [--jobs N]

Python 3 standard library only. Writes bench/INSTRUCTIONS-RESULTS.md by default: with one
module build, one table with a column per server; with several, a table per server with a
column per build."""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from lib import REPO_DIR
from lib.net import free_port
from lib.processes import Processes
from lib.report import README_LINK, git_commit, machine_description
from lib.resp import Connection, ReplyError, call_once, parse_info, ping

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


# The sliding log's rows use a window of a day, so that no entry leaves the window during
# the run: every call sees the log at the size it was filled to.
LOG_WINDOW = "1d"
# Full logs are few, large keys (20 to 40 KB each).
FULL_LOG_KEYS = 100
# The row allowed on a nearly full log: each of its keys gets about LOG_HITS_PER_KEY of the
# counted hits (the key space grows with --requests), so a key filled to LOG_NEARLY_FULL
# entries stays below the limit of 10,000 to the end of the run (the odds of a key getting
# 150 of them, 5 standard deviations above the mean, are below one in a million).
LOG_HITS_PER_KEY = 100
LOG_NEARLY_FULL = 9_850


@dataclass(frozen=True)
class Prefill:
    """Every key of a row's key space holds, before the count, the value that `entries`
    calls of `RL.HIT key <limit> LOG_WINDOW ALGO log`, each in its own ms, leave."""
    limit: int
    entries: int

    def args(self, key: str) -> List[str]:
        return log_args("RL.HIT", key, self.limit)


@dataclass(frozen=True)
class LeaseFill:
    """Every key of a row's key space holds, before the count, `leases` leases ending a day
    from the run's start, written in the module's layout (core/src/lease/layout.rs): with
    generated (distinct, random) ids, or all with the id `job` when `same_id`, so that every
    RL.RELEASE / RL.RENEW of `job` finds one held (redis-benchmark cannot send a key's own
    id; a value of equal ids costs what one of distinct ids of the same length does)."""
    leases: int
    same_id: bool = False

    def value(self, ends_at_ms: int) -> bytes:
        count, varint = self.leases, b""
        while True:
            byte, count = count & 0x7F, count >> 7
            if count == 0:
                varint += bytes([byte])
                break
            varint += bytes([byte | 0x80])
        records = []
        for n in range(self.leases):
            ident = bytes([3]) + b"job" if self.same_id else b"\x80" + os.urandom(16)
            records.append(ident + ends_at_ms.to_bytes(8, "little", signed=True))
        return b"\x02\x00" + varint + b"".join(records)


@dataclass
class Row:
    name: str
    args: List[str]
    module: bool = True  # needs the module's commands
    # The decision every counted hit must get ("allowed" or "denied", from INFO ratelimit),
    # or None for a command that decides nothing (RL.PEEK).
    expect: Optional[str] = "allowed"
    keyspace: int = KEYSPACE
    # The warm-up's command (default: the row's own). A row on pre-filled keys warms up
    # with a command that leaves them as they are.
    warmup: Optional[List[str]] = None
    prefill: Optional[Prefill] = None
    # Measured with redis-cell's module instead of ours (only when the caller gives a build
    # of it: nothing is fetched or built here).
    redis_cell: bool = False
    lease_fill: Optional[LeaseFill] = None
    # At most this many counted requests (a row whose calls cost ~100 SETs each would take
    # hours under callgrind at the default count).
    requests: Optional[int] = None
    # Loaded into the server before the row runs, on a server without the module: the
    # Functions library (functions/ratelimit.lua; the row calls FCALL), or a hand-written
    # Lua baseline of bench/lua/ (the row's args hold SHA where EVALSHA wants its sha).
    library: bool = False
    script: Optional[str] = None


LIBRARY = REPO_DIR / "functions" / "ratelimit.lua"
SHA = "__sha__"


def library_row(name: str, function: str, args: List[str]) -> Row:
    """A row of the Functions library: `FCALL function 1 KEY args`, no module loaded."""
    return Row(name, ["FCALL", function, "1", KEY] + args, module=False, expect=None,
               library=True)


def script_row(name: str, script: str, args: List[str]) -> Row:
    """A row of a hand-written Lua baseline (bench/lua/), run by EVALSHA, no module."""
    return Row(name, ["EVALSHA", SHA, "1", KEY] + args, module=False, expect=None,
               script=script)


def lua_rows() -> List[Row]:
    """The Functions library beside the module's rows and the Lua scripts it replaces
    (the same limits: 1000000/1h, or 100/1h on live keys for token and gcra)."""
    return [
        library_row("FCALL rl_hit fixed, 1000000/1h (Functions library)", "rl_hit",
                    ["1000000", "1h"]),
        script_row("Lua fixed window (INCR+PEXPIRE), 1000000/1h", "fixed_window.lua",
                   ["1000000", str(HOUR_MS), "1"]),
        # The same algorithm with RL.HIT's semantics (a denied hit not counted), written
        # by hand: GET, INCRBY, and PEXPIREAT on the window's first hit.
        script_row("Lua fixed window, denials not counted (GET+INCRBY), 1000000/1h",
                   "fixed_window_exact.lua", ["1000000", str(HOUR_MS), "1"]),
        library_row("FCALL rl_hit sliding, 1000000/1h (Functions library)", "rl_hit",
                    ["1000000", "1h", "ALGO", "sliding"]),
        library_row("FCALL rl_hit token, 100/1h (Functions library, live keys)", "rl_hit",
                    ["100", "1h", "ALGO", "token"]),
        script_row("Lua token bucket (hash), 100/1h", "token_bucket.lua",
                   ["100", str(HOUR_MS), "1"]),
        library_row("FCALL rl_hit gcra, 100/1h (Functions library, live keys)", "rl_hit",
                    ["100", "1h", "ALGO", "gcra"]),
        script_row("Lua GCRA (one key, TAT), 100/1h", "gcra.lua", ["100", str(HOUR_MS), "1"]),
        library_row("FCALL rl_hit fixed, two tiers (Functions library)", "rl_hit",
                    ["10000", "1s", "1000000", "1h"]),
    ]


def load_lua(port: int, row: Row) -> List[str]:
    """Loads what `row` runs (the library or its script) and answers its command."""
    if row.library:
        call_once(port, "FUNCTION", "LOAD", "REPLACE", LIBRARY.read_text())
    if row.script is None:
        return row.args
    sha = call_once(port, "SCRIPT", "LOAD", (BENCH_DIR / "lua" / row.script).read_text())
    text = sha.decode() if isinstance(sha, bytes) else str(sha)
    return [text if arg == SHA else arg for arg in row.args]


def log_args(command: str, key: str, limit: int) -> List[str]:
    return [command, key, str(limit), LOG_WINDOW, "ALGO", "log"]


def rows(far_future_ms: int, requests: int) -> List[Row]:
    ten, full = Prefill(10_000, 10), Prefill(10_000, 10_000)
    ten_full = Prefill(10, 10)
    nearly_full = Prefill(10_000, LOG_NEARLY_FULL)
    nearly_full_keys = max(1, requests // LOG_HITS_PER_KEY)
    eight_tiers = [w for window in ("1s", "10s", "1m", "10m", "1h", "6h", "1d", "7d")
                   for w in ("1000000", window)]
    return [
        Row("SET k 1 PXAT t (native write with expiry)",
            ["SET", KEY, "1", "PXAT", str(far_future_ms)], module=False, expect=None),
        Row("RL.HIT fixed, 1000000/1h", ["RL.HIT", KEY, "1000000", "1h"]),
        Row("RL.HIT sliding, 1000000/1h", ["RL.HIT", KEY, "1000000", "1h", "ALGO", "sliding"]),
        # 100 per hour: the warm-up and the count give each key a handful of hits, far below
        # the burst, so every call allowed and every key live.
        Row("RL.HIT token, 100/1h (live keys)", ["RL.HIT", KEY, "100", "1h", "ALGO", "token"]),
        Row("RL.HIT gcra, 100/1h (live keys)", ["RL.HIT", KEY, "100", "1h", "ALGO", "gcra"]),
        # Each key holds 10 entries, and (with fewer requests than keys) gets about one more.
        Row("RL.HIT log 10000/1d, 10 entries, allowed", log_args("RL.HIT", KEY, 10_000),
            warmup=log_args("RL.PEEK", KEY, 10_000), prefill=ten),
        Row("RL.HIT log 10/1d, 10 entries (full), denied", log_args("RL.HIT", KEY, 10),
            expect="denied", prefill=ten_full),
        Row("RL.HIT log 10000/1d, 10,000 entries (full), denied",
            log_args("RL.HIT", KEY, 10_000), expect="denied", keyspace=FULL_LOG_KEYS,
            prefill=full),
        Row(f"RL.HIT log 10000/1d, {LOG_NEARLY_FULL:,} to ~{LOG_NEARLY_FULL + LOG_HITS_PER_KEY:,}"
            " entries, allowed", log_args("RL.HIT", KEY, 10_000), keyspace=nearly_full_keys,
            warmup=log_args("RL.PEEK", KEY, 10_000), prefill=nearly_full),
        Row("RL.PEEK fixed, 1000000/1h (live keys)", ["RL.PEEK", KEY, "1000000", "1h"],
            expect=None, warmup=["RL.HIT", KEY, "1000000", "1h"]),
        Row("RL.PEEK log 10000/1d, 10,000 entries (full)", log_args("RL.PEEK", KEY, 10_000),
            expect=None, keyspace=FULL_LOG_KEYS, prefill=full),
        # A refund reads and rewrites every entry: the log's costliest call. Each gives the
        # newest unit back, so a key loses about one entry per refund: requests / 100 each.
        Row("RL.REFUND log 10000/1d, ~10,000 entries", log_args("RL.REFUND", KEY, 10_000),
            expect=None, keyspace=FULL_LOG_KEYS, warmup=log_args("RL.PEEK", KEY, 10_000),
            prefill=full),
        # A calendar window: a month in Paris, as its own row so the fixed rows stay as they
        # were.
        Row("RL.HIT month TZ Europe/Paris, 1000000/month",
            ["RL.HIT", KEY, "1000000", "month", "TZ", "Europe/Paris"]),
        Row("RL.HIT fixed, two tiers (10000/1s + 1000000/1h)",
            ["RL.HIT", KEY, "10000", "1s", "1000000", "1h"]),
        Row("RL.HIT fixed, 8 tiers (1000000 per 1s, 10s, 1m, 10m, 1h, 6h, 1d, 7d)",
            ["RL.HIT", KEY] + eight_tiers),
        # Leases (RL.ACQUIRE and its kin), which decide nothing INFO ratelimit counts.
        # Warmed up with their own call: each key holds 2 to 5 leases of a generated id.
        Row("RL.ACQUIRE k 100 1h (leases; live keys, generated ids)",
            ["RL.ACQUIRE", KEY, "100", "1h"], expect=None),
        Row("RL.ACQUIRE k 100 1h 1000000 1h (leases with a tier)",
            ["RL.ACQUIRE", KEY, "100", "1h", "1000000", "1h"], expect=None),
        Row("RL.ACQUIRE k 1 1h (leases; every key full, denied)",
            ["RL.ACQUIRE", KEY, "1", "1h"], expect=None, warmup=["RL.LEASES", KEY, "1"],
            lease_fill=LeaseFill(1)),
        # 12 leases of `job` per key: 2 calls per key on average, 12 only one in a million.
        Row("RL.RELEASE k job (leases; 12 held, one released)", ["RL.RELEASE", KEY, "job"],
            expect=None, warmup=["RL.LEASES", KEY, "100"], lease_fill=LeaseFill(12, True)),
        # 2 days: past the fill's day, so every renewal moves the lease's end and writes.
        Row("RL.RENEW k job 2d (leases; 12 held, one renewed)",
            ["RL.RENEW", KEY, "job", "2d"], expect=None, warmup=["RL.LEASES", KEY, "100"],
            lease_fill=LeaseFill(12, True)),
        Row("RL.RELEASE k none (leases; 12 held, wrong id)", ["RL.RELEASE", KEY, "none"],
            expect=None, lease_fill=LeaseFill(12, True)),
        Row("RL.LEASES k 100 (leases; 12 held)", ["RL.LEASES", KEY, "100"], expect=None,
            lease_fill=LeaseFill(12)),
        # The cap: every call reads all 10,000 leases (250 KB). PING warms up (the keys are
        # filled already), and 5,000 calls are counted.
        Row("RL.ACQUIRE k 10000 1h (leases; 10,000 held, the cap, denied)",
            ["RL.ACQUIRE", KEY, "10000", "1h"], expect=None, keyspace=FULL_LOG_KEYS,
            warmup=["PING"], lease_fill=LeaseFill(10_000), requests=5_000),
    ] + lua_rows() + [
        Row("CL.THROTTLE k 100 100 3600 (redis-cell API)",
            ["CL.THROTTLE", KEY, "100", "100", "3600", "1"]),
        Row("CL.THROTTLE k 100 100 3600 on redis-cell's own module",
            ["CL.THROTTLE", KEY, "100", "100", "3600", "1"], module=False, expect=None,
            redis_cell=True),
    ]


def newer_server(name: str) -> Optional[str]:
    """The newer build of `name` ("redis" or "valkey") that scripts/newer-servers.sh made
    (Redis 8.6, Valkey 9.1), or None where it has not run."""
    found = subprocess.run([str(REPO_DIR / "scripts" / "newer-servers.sh"), "--path", name],
                           capture_output=True, text=True)
    candidate = found.stdout.strip()
    return candidate if found.returncode == 0 and Path(candidate).exists() else None


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


# glibc copies a block of a few KB or more with `rep movsb`, which callgrind counts as one
# instruction per byte moved: a 20 KB copy would count about 20,000, though the CPU moves
# it in a few hundred cycles. With the threshold out of reach, glibc copies with vector
# loads and stores, whose count follows the real work (a 20 KB copy: about 2,500). Only
# the counted server gets it; every row, SET too, runs with the same setting.
UNROLLED_COPIES = "glibc.cpu.x86_rep_movsb_threshold=4294967295"


def start_under_callgrind(processes: Processes, binary: str, module: Optional[Path],
                          workdir: Path) -> Tuple[subprocess.Popen, int]:
    environment = dict(os.environ)
    environment["GLIBC_TUNABLES"] = ":".join(
        part for part in (environment.get("GLIBC_TUNABLES", ""), UNROLLED_COPIES) if part)
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
                                 stderr=open(workdir / "valgrind.log", "w"),
                                 env=environment)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and server.poll() is None:
            if ping(port):
                return server, port
            time.sleep(0.2)
        processes.stop(server)
    raise RuntimeError(f"{binary} did not start under valgrind: see {workdir}")


def benchmark(port: int, args: List[str], requests: int, keyspace: int) -> None:
    command = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(CLIENTS),
               "-P", str(PIPELINE), "-r", str(keyspace), "-n", str(requests), "-q", "--csv"]
    result = subprocess.run(command + args, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0 or "ERR" in result.stdout or "ERR" in result.stderr:
        raise RuntimeError(f"redis-benchmark {args}: {result.stdout}{result.stderr}")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def build_logs(port: int, fills: List[Prefill]) -> Dict[Prefill, Tuple[bytes, int]]:
    """On a plain server with the module, fills one key per Prefill with one hit per
    distinct ms; returns each key's value and absolute expiry (ms)."""
    connection = Connection(port, timeout=120)
    try:
        keys = {fill: f"fill:{fill.limit}:{fill.entries}" for fill in fills}
        for step in range(max(fill.entries for fill in fills)):
            replies = connection.batch([fill.args(keys[fill]) for fill in fills
                                        if step < fill.entries])
            if any(not isinstance(r, list) or r[0] != 1 for r in replies):
                raise RuntimeError(f"a hit of the fill was not allowed: {replies}")
            # The next hits must be logged at a later ms: their replies came back by `done`,
            # so calls sent once the clock has passed it run later.
            done = now_ms()
            while now_ms() <= done:
                pass
        built = {}
        for fill, key in keys.items():
            value, expiry, entries = connection.batch(
                [["GET", key], ["PEXPIRETIME", key],
                 log_args("RL.PEEK", key, fill.limit)])
            # RL.PEEK's `remaining` is what would be left after one more unit.
            if fill.limit == fill.entries and entries[2] != 0:
                raise RuntimeError(f"{key} is not full: {entries}")
            built[fill] = (value, expiry)
        return built
    finally:
        connection.close()


def prefilled_logs(binary: str, module: Path,
                   cache: Dict[Tuple[str, Path], Dict[Prefill, Tuple[bytes, int]]],
                   fills: List[Prefill]) -> Dict[Prefill, Tuple[bytes, int]]:
    """The values of every Prefill, built once per server and module on a server of its
    own (not under valgrind) and kept for the run: the window of a day keeps them whole."""
    if (binary, module) not in cache:
        processes = Processes()
        workdir = Path(tempfile.mkdtemp(prefix="rl-fill-"))
        try:
            port = free_port()
            processes.start([binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                             "--appendonly", "no", "--dir", str(workdir),
                             "--logfile", str(workdir / "server.log"),
                             "--loadmodule", str(module)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 30
            while not ping(port):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{binary} did not start: see {workdir}")
                time.sleep(0.1)
            cache[(binary, module)] = build_logs(port, fills)
        finally:
            processes.stop_all()
            shutil.rmtree(workdir, ignore_errors=True)
    return cache[(binary, module)]


def store_prefill(port: int, row: Row, value: bytes, expiry_ms: int) -> None:
    """Writes `value` into every key of the row's key space, as redis-benchmark names them
    (`__rand_int__` becomes 12 digits)."""
    connection = Connection(port, timeout=120)
    try:
        keys = [row.args[1].replace("__rand_int__", f"{i:012d}") for i in range(row.keyspace)]
        for start in range(0, len(keys), 1000):
            connection.batch([["SET", key, value, "PXAT", expiry_ms]
                              for key in keys[start:start + 1000]])
    finally:
        connection.close()


def counts(port: int, command: str) -> Tuple[int, int, int]:
    """Calls of `command` so far (INFO commandstats; redis-benchmark sends a few more than
    -n when it pipelines), and the module's allowed and denied decisions (INFO ratelimit)."""
    # Module commands are listed as registered (cmdstat_RL.HIT), the server's in lower case.
    stats = {name.lower(): value for name, value in
             parse_info(call_once(port, "INFO", "commandstats")).items()
             if name.startswith("cmdstat_")}
    fields = dict(part.split("=", 1) for part in
                  stats.get(f"cmdstat_{command.lower()}", "").split(",") if "=" in part)
    decided = [int(info_field(port, "ratelimit", f"ratelimit_{name}") or 0)
               for name in ("allowed", "denied")]
    return int(fields.get("calls", 0)), decided[0], decided[1]


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
    return parse_info(call_once(port, "INFO", section)).get(field, "")


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


class RowRefused(RuntimeError):
    """The module refuses the row's command (a build older than the row's syntax)."""


def measure(binary: str, module: Optional[Path], row: Row, requests: int,
            replica: bool, prefill: Optional[Tuple[bytes, int]] = None,
            keep: Optional[Path] = None) -> float:
    """Instructions per request of `row` on a fresh server (with a replica attached); the
    callgrind profile is copied into `keep` when given, for callgrind_annotate."""
    processes = Processes()
    workdir = Path(tempfile.mkdtemp(prefix="rl-instr-"))
    try:
        server, port = start_under_callgrind(processes, binary, module, workdir)
        if replica:
            attach_replica(processes, binary, port, workdir)
        command = load_lua(port, row)
        warmup = row.warmup or command
        # A wrong row must fail loudly, not count the cost of an error reply.
        for args in (command, warmup):
            try:
                call_once(port, *[a.replace("__rand_int__", "probe") for a in args])
            except ReplyError as error:
                raise RowRefused(f"{args}: {error.line!r}") from error
        if prefill is not None:
            store_prefill(port, row, *prefill)
        benchmark(port, warmup, WARMUP_REQUESTS, row.keyspace)
        before = counts(port, command[0])
        callgrind(server.pid, "--instr=on")
        benchmark(port, command, requests, row.keyspace)
        callgrind(server.pid, "--instr=off")
        calls, allowed, denied = (b - a for a, b in zip(before, counts(port, command[0])))
        wanted = {"allowed": (calls, 0), "denied": (0, calls), None: (0, 0)}
        if calls < requests or (allowed, denied) != wanted[row.expect]:
            raise RuntimeError(f"{row.name}: {allowed} allowed and {denied} denied of "
                               f"{calls} calls, expected {row.expect or 'no decision'}")
        callgrind(server.pid, "--dump")
        processes.stop(server)
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            name = re.sub(r"[^A-Za-z0-9]+", "-", f"{server_version(binary)} {row.name}")
            for index, dump in enumerate(sorted(workdir.glob("callgrind.out*"))):
                shutil.copy(dump, keep / f"{name.strip('-')}.{index}.callgrind")
        return total_instructions(workdir) / calls
    finally:
        processes.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)


OURS_ON_CELL_API = "CL.THROTTLE k 100 100 3600 (redis-cell API)"


def cells(table: Dict[str, Dict[str, float]], name: str, labels: List[str]) -> List[str]:
    """The row `name`'s cell for each module label, on one server's `table`."""
    per_module = table[name]
    set_cost = next(iter(table.values()))["server"]
    ours = table.get(OURS_ON_CELL_API, {})
    if "redis-cell's own" in name and all(l in ours for l in labels):
        cell = per_module["server"]
        # Ours against redis-cell: the target is at most 0.75 x.
        return [f"{cell:,.0f} (ours: {ours[l] / cell:.2f} x)" for l in labels]
    if "server" in per_module:
        cost = per_module["server"]
        # The first row is SET itself; the Lua rows (library and scripts) get its ratio.
        text = f"{cost:,.0f}" if cost == set_cost else \
            f"{cost:,.0f} ({ratio_text(set_cost / cost)} x)"
        return [text] * len(labels)
    return [f"{per_module[l]:,.0f} ({ratio_text(set_cost / per_module[l])} x)"
            if l in per_module else "refused" for l in labels]


def module_columns(version: str, table: Dict[str, Dict[str, float]],
                   labels: List[str]) -> List[str]:
    """One server's table, a column per module build and their ratio (last / first)."""
    header = "| " + version + " | " + " | ".join(labels) + f" | {labels[-1]} / {labels[0]} |"
    lines = [header, "|---" + "|---:" * (len(labels) + 1) + "|"]
    for name, per_module in table.items():
        ratio = ""
        if "server" not in per_module and all(l in per_module for l in labels):
            ratio = f"{per_module[labels[-1]] / per_module[labels[0]]:.3f}"
        lines.append(f"| {name} | " + " | ".join(cells(table, name, labels)) + f" | {ratio} |")
    return lines + [""]


def server_columns(results: Dict[str, Dict[str, Dict[str, float]]], label: str) -> List[str]:
    """One table, a column per server (a row a server did not run, e.g. redis-cell's on
    the newer servers: empty)."""
    versions = list(results)
    names: List[str] = []
    for table in results.values():
        names += [name for name in table if name not in names]
    lines = ["| " + " | ".join(["row"] + versions) + " |",
             "|---" + "|---:" * len(versions) + "|"]
    for name in names:
        row = [cells(results[v], name, [label])[0] if name in results[v] else ""
               for v in versions]
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return lines + [""]


def measure_server(binary: str, cell: Optional[Path], table: List[Row],
                   modules: List[Tuple[Path, str]], far_future_ms: int,
                   options: argparse.Namespace) -> Dict[str, Dict[str, Dict[str, float]]]:
    """Every row on `binary` (without, then with a replica): [version][row][label]."""
    results: Dict[str, Dict[str, Dict[str, float]]] = {}
    fills = sorted({row.prefill for row in table if row.prefill},
                   key=lambda f: (f.limit, f.entries))
    built: Dict[Tuple[str, Path], Dict[Prefill, Tuple[bytes, int]]] = {}
    for replica in [False] if options.no_replica else [False, True]:
        version = server_version(binary) + (", with a replica" if replica else "")
        results[version] = {}
        for row in table:
            if row.module and options.only not in row.name:
                continue
            if any(text in row.name for text in options.skip):
                continue
            if row.redis_cell and (cell is None or options.only not in row.name):
                continue
            per_module = results[version].setdefault(row.name, {})
            targets = modules if row.module else [(None, "server")]
            if row.redis_cell:
                targets = [(Path(cell).resolve(), "server")]
            for path, label in targets:
                prefill = None
                if row.prefill is not None and path is not None:
                    prefill = prefilled_logs(binary, path, built, fills)[row.prefill]
                if row.lease_fill is not None:
                    prefill = (row.lease_fill.value(far_future_ms), far_future_ms)
                requests = min(options.requests, row.requests or options.requests)
                try:
                    value = measure(binary, path, row, requests, replica, prefill,
                                    options.keep_profiles)
                except RowRefused as refused:
                    # A baseline build older than the row (a calendar window or a lease
                    # before they existed) has no figure for it; a wrong row on this
                    # checkout's own build still stops the run.
                    if len(modules) < 2 or path == modules[-1][0]:
                        raise
                    print(f"{version:30} {label:14} {row.name:50} refused: {refused}",
                          flush=True)
                    continue
                per_module[label] = value
                print(f"{version:30} {label:14} {row.name:50} {value:10,.0f}", flush=True)
    return results


def ratio_text(ratio: float) -> str:
    """Two decimals, or two significant digits for a row far costlier than SET."""
    return f"{ratio:.2f}" if ratio >= 0.095 else f"{ratio:.2g}"


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
    parser.add_argument("--keep-profiles", type=Path,
                        help="copy each row's callgrind profile into this folder")
    parser.add_argument("--no-replica", action="store_true",
                        help="skip the rows with a replica attached")
    parser.add_argument("--jobs", type=int, default=1,
                        help="measure this many servers at once (each row still alone on "
                             "its server; counts do not depend on the machine's load)")
    parser.add_argument("--no-newer", action="store_true",
                        help="leave out Redis 8.6 and Valkey 9.1 (scripts/newer-servers.sh)")
    parser.add_argument("--server", default="",
                        help="measure only on the servers whose version contains this text "
                             "(e.g. 'Redis 8.6')")
    parser.add_argument("--only", default="",
                        help="measure only the rows whose name contains this text (SET always)")
    parser.add_argument("--skip", action="append", default=[],
                        help="leave out the rows whose name contains this text (repeatable)")
    parser.add_argument("--redis-cell", type=Path,
                        default=os.environ.get("REDIS_CELL_SO") or None,
                        help="a build of redis-cell for Redis (env REDIS_CELL_SO): adds a "
                             "CL.THROTTLE row on it")
    parser.add_argument("--redis-cell-valkey", type=Path,
                        default=os.environ.get("REDIS_CELL_VALKEY_SO") or None,
                        help="redis-cell built with its valkey feature, for the Valkey rows "
                             "(env REDIS_CELL_VALKEY_SO)")
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
    # The newer servers, where scripts/newer-servers.sh built them: their redis-cell rows
    # need a build of it for them, which nobody gives here.
    newer = [] if options.no_newer else [
        newer_server(name) for name in (("redis",) if options.redis_only else ("redis", "valkey"))]
    newer_servers = [binary for binary in newer if binary]
    servers += newer_servers
    if options.server:
        servers = [binary for binary in servers if options.server in server_version(binary)]
    far_future_ms = int(time.time() * 1000) + 24 * HOUR_MS

    # results[server][row][label] = instructions per request
    results: Dict[str, Dict[str, Dict[str, float]]] = {}
    table = rows(far_future_ms, options.requests)
    cells_of = {binary: None if binary in newer_servers else
                options.redis_cell_valkey if binary == valkey else options.redis_cell
                for binary in servers}
    # Each server's rows run in order; the servers side by side with --jobs (a count does
    # not move with the machine's load).
    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        runs = [pool.submit(measure_server, binary, cells_of[binary], table, modules,
                            far_future_ms, options) for binary in servers]
        for run in runs:
            results.update(run.result())

    labels = [label for _, label in modules]
    lines = [
        "# Instructions per request inside the server (callgrind)",
        "",
        README_LINK,
        "",
        f"Commit {git_commit()}, {time.strftime('%Y-%m-%d')}, `python3 bench/instructions.py"
        + "".join(f" --module {p.name}={l}" for p, l in modules if options.module)
        + (f" --requests {options.requests}" if options.requests != DEFAULT_REQUESTS else "")
        + (" --redis-only" if options.redis_only else "")
        + (" --no-replica" if options.no_replica else "")
        + (" --no-newer" if options.no_newer else "")
        + (f" --jobs {options.jobs}" if options.jobs > 1 else "")
        + (f" --server '{options.server}'" if options.server else "")
        + (f" --only '{options.only}'" if options.only else "")
        + "".join(f" --skip '{text}'" for text in options.skip)
        + (" --redis-cell <build>" if options.redis_cell else "")
        + (" --redis-cell-valkey <build>" if options.redis_cell_valkey else "") + "`.",
        f"{machine_description()}. Counts move about 1 to 2% between runs, whatever the machine's load (the rows with a moving expiry a little with how many calls share a millisecond).",
        "",
        f"redis-benchmark -c {CLIENTS} -P {PIPELINE} -r {KEYSPACE}: {WARMUP_REQUESTS:,} "
        f"requests to warm up with instrumentation off, then {options.requests:,} counted. "
        "Each cell is a fresh server in a fresh directory; the count is the whole server's "
        "(event loop, networking, every thread) divided by the calls INFO commandstats "
        "counted. Every hit of a row got the decision its name says (INFO ratelimit), or "
        "the run stops. In brackets: the "
        "ratio of `SET ... PXAT`'s count to the row's (higher is cheaper; 1.00 x costs what "
        "SET costs).",
        "",
        f"The counted server runs with `GLIBC_TUNABLES={UNROLLED_COPIES}`: glibc then "
        "copies large blocks with vector loads and stores instead of `rep movsb`, which "
        "callgrind counts as one instruction per byte (without it, the allowed hit on a "
        "nearly full log counts about 57,600 instead of 21,600, two 20 KB copies at 20,000 "
        "each). Every row, SET included, runs with it.",
        "",
        f"The log rows use a window of {LOG_WINDOW}, so no entry leaves it during the run. "
        "Before the count, each of their keys is given the value that hits one ms apart "
        "leave (built on a server of its own, outside valgrind): 10 entries in all "
        f"{KEYSPACE:,} keys, 10,000 entries in {FULL_LOG_KEYS} keys, {LOG_NEARLY_FULL:,} "
        f"entries in one key per {LOG_HITS_PER_KEY} requests counted (so the allowed hits "
        f"take each key to about {LOG_NEARLY_FULL + LOG_HITS_PER_KEY:,}). The rows on "
        "pre-filled keys that would change them warm up with RL.PEEK; `RL.PEEK fixed` warms "
        "up with RL.HIT, so that its keys are live.",
        "",
    ]
    if len(labels) == 1:
        lines += server_columns(results, labels[0])
    else:
        for version, table in results.items():
            lines += module_columns(version, table, labels)
    options.output.write_text("\n".join(lines))
    print(f"wrote {options.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
