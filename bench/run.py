#!/usr/bin/env python3
"""Side-by-side benchmark of the ratelimit module against native commands and Lua scripts.

Starts its own redis-server (from the PATH) with the module on a free loopback port, finds
which commands the module offers today (the others become "n/a" rows), warms up, measures the
memory a tracked key costs, then runs redis-benchmark over every row in interleaved rounds so
that the noise of a shared machine hits every row alike. Prints a Markdown report and writes
it to bench/RESULTS.md.

    python3 bench/run.py              # what `make bench` runs, after building the module
    python3 bench/run.py --quick      # a fast smoke run of the script itself (not a result)

Python 3 standard library only. Every process the script starts is stopped by its pid, also
on an error, Ctrl-C or SIGTERM.
"""

import argparse
import datetime
import hashlib
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import full_log
from lib.cpu import (CpuSnapshot, cpus_for_pinning, rusage_cpu_seconds, server_cpu_seconds,
                     taskset_failure, taskset_prefix)
from lib.net import free_port
from lib.processes import Processes, stop_on_signals
from lib.redis_benchmark import parse_csv, server_errors
from lib.report import (README_LINK, format_duration, git_commit, log, machine_description,
                        markdown_cell)
from lib.resp import Connection, ReplyError, encode_argument, ping
from lib.rounds import round_order

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
DEFAULT_MODULE = REPO_DIR / "target" / "release" / "libredis_ratelimit.so"
DEFAULT_OUTPUT = BENCH_DIR / "RESULTS.md"

# redis-benchmark replaces __rand_int__ with a 12-digit random number below -r, in every
# argument; the memory cases spell their keys the same way, numbered instead of random.
RAND_MARK = "__rand_int__"
KEY = "k:" + RAND_MARK

CLIENTS = 50
KEYSPACE = 100_000
LIMIT = 1_000_000  # high enough that no row is ever denied
WINDOW = "60s"
WINDOW_MS = 60_000
# The log keeps one entry per counted hit, so its limit must stay small; with a long window
# a key's log holds every hit it gets in one run (about 10 at pipeline 16), never more.
LOG_LIMIT = 100
LOG_WINDOW = "1h"
LOG_WINDOW_MS = 3_600_000

# A run that has not finished by then is stuck (e.g. a server that stopped answering): it
# is killed and counted as failed rather than hanging the whole script.
RUN_TIMEOUT_S = 300


# ----------------------------------------------------------------------------------------
# What is measured


@dataclass
class Row:
    """One command measured under load: a native reference, a Lua baseline or the module."""

    name: str
    args: List[str]  # the command with KEY where the key goes; for a Lua row, its ARGV
    lua: Optional[str] = None  # bench/lua/<file>, run with EVALSHA
    prefill: Optional[List[str]] = None  # written to every key before each run (read rows)
    error: Optional[str] = None  # why the row is not available, found at warm-up


REFERENCE_ROW = "INCR (reference, no TTL)"
NATIVE_WRITE_ROW = "SET k 1 PXAT t (native write with expiry)"


def throughput_rows(far_future_ms: int) -> List[Row]:
    """Every row of the throughput table, in the order printed."""
    fixed_hit = ["RL.HIT", KEY, str(LIMIT), WINDOW]

    def rl_hit(algorithm: str) -> List[str]:
        return ["RL.HIT", KEY, str(LIMIT), WINDOW, "ALGO", algorithm]

    def fcall_hit(algorithm: str) -> List[str]:
        return ["FCALL", "rl_hit", "1", KEY, str(LIMIT), WINDOW, "ALGO", algorithm]

    lua_args = [str(LIMIT), str(WINDOW_MS), "1"]
    log_name = f"limit {LOG_LIMIT}, {LOG_WINDOW}"
    return [
        Row(REFERENCE_ROW, ["INCR", KEY]),
        Row(NATIVE_WRITE_ROW, ["SET", KEY, "1", "PXAT", str(far_future_ms)]),
        Row("Lua fixed window (INCR+PEXPIRE)", lua_args, lua="fixed_window.lua"),
        Row("Lua fixed window, denials not counted (GET+INCRBY)", lua_args,
            lua="fixed_window_exact.lua"),
        Row("Lua GCRA (one key, TAT)", lua_args, lua="gcra.lua"),
        Row("Lua token bucket (hash)", lua_args, lua="token_bucket.lua"),
        Row(f"Lua sliding log (zset; {log_name})", [str(LOG_LIMIT), str(LOG_WINDOW_MS), "1"],
            lua="sliding_log.lua"),
        # The Functions library (the module's commands in Lua, for servers that cannot
        # load a module), beside the hand-written scripts above.
        Row("FCALL rl_hit fixed (Functions library)", fcall_hit("fixed")),
        Row("FCALL rl_hit sliding (Functions library)", fcall_hit("sliding")),
        Row("FCALL rl_hit token (Functions library)", fcall_hit("token")),
        Row("FCALL rl_hit gcra (Functions library)", fcall_hit("gcra")),
        Row("RL.HIT fixed", fixed_hit),
        Row("RL.HIT sliding", rl_hit("sliding")),
        Row(f"RL.HIT log ({log_name})", ["RL.HIT", KEY, str(LOG_LIMIT), LOG_WINDOW, "ALGO", "log"]),
        Row("RL.HIT token", rl_hit("token")),
        Row("RL.HIT gcra", rl_hit("gcra")),
        # At 1,000,000/60s a gcra key expires 60 µs after a hit (its bucket is full again), so
        # the row above mostly creates keys and expires them. This one overwrites live keys,
        # as SET PXAT does: 10 hits per key in a run stay far below the burst of 100.
        Row(f"RL.HIT gcra, live keys ({log_name})",
            ["RL.HIT", KEY, str(LOG_LIMIT), LOG_WINDOW, "ALGO", "gcra"]),
        Row("RL.HIT fixed, two tiers (10000/1s + 1000000/1h)",
            ["RL.HIT", KEY, "10000", "1s", "1000000", "1h"]),
        # A calendar window: the fixed window whose end is the next local boundary.
        Row("RL.HIT month TZ Europe/Paris",
            ["RL.HIT", KEY, str(LIMIT), "month", "TZ", "Europe/Paris"]),
        # On an empty database PEEK would only look up missing keys; every key is hit once
        # before the run so that it reads real state.
        Row("RL.PEEK fixed (keys hit once before)", ["RL.PEEK", KEY, str(LIMIT), WINDOW],
            prefill=fixed_hit),
        Row("CL.THROTTLE (redis-cell API)",
            ["CL.THROTTLE", KEY, str(LIMIT), str(LIMIT), str(WINDOW_MS // 1000), "1"]),
    ]


@dataclass
class MemoryWindow:
    """The window of the memory cases."""

    text: str
    ms: int


def choose_memory_window(now_ms: int, margin_ms: int = 15 * 60_000) -> MemoryWindow:
    """A window whose epoch-aligned end is at least margin_ms away, so that no fixed-window
    key (which expires at a multiple of its window) expires while it is being measured."""
    for text, ms in (("1h", 3_600_000), ("1d", 86_400_000)):
        if ms - now_ms % ms >= margin_ms:
            return MemoryWindow(text, ms)
    return MemoryWindow("7d", 604_800_000)


@dataclass
class MemoryCase:
    """Distinct keys written once each (or twice) to measure what a tracked key costs."""

    name: str
    args: List[str]
    lua: Optional[str] = None
    second_hit: bool = False  # also measure after every key is hit a second time


# The memory cases count 10 per window: token and gcra keys expire once their bucket has
# refilled (window / limit after one hit, 6 min with 1h), so a high limit would let them
# expire during the measurement. A fixed-window count is "1" whatever the limit is.
MEMORY_LIMIT = "10"


def memory_cases(window: MemoryWindow) -> List[MemoryCase]:
    """Every row of the memory table."""

    def rl_hit(algorithm: str) -> List[str]:
        return ["RL.HIT", KEY, MEMORY_LIMIT, window.text, "ALGO", algorithm]

    ttl = str(window.ms)
    return [
        MemoryCase("Lua fixed window (INCR+PEXPIRE)", [MEMORY_LIMIT, ttl], lua="fixed_window.lua"),
        MemoryCase(f"SET k xxx PX {ttl} (native, embstr value)", ["SET", KEY, "xxx", "PX", ttl]),
        MemoryCase(f"SET k 1 PX {ttl} (native, integer value)", ["SET", KEY, "1", "PX", ttl]),
        MemoryCase("RL.HIT fixed", ["RL.HIT", KEY, MEMORY_LIMIT, window.text], second_hit=True),
        MemoryCase("RL.HIT sliding", rl_hit("sliding")),
        MemoryCase("RL.HIT log", rl_hit("log")),
        MemoryCase("RL.HIT token", rl_hit("token")),
        MemoryCase("RL.HIT gcra", rl_hit("gcra")),
        MemoryCase("CL.THROTTLE",
                   ["CL.THROTTLE", KEY, MEMORY_LIMIT, MEMORY_LIMIT, str(window.ms // 1000), "1"]),
    ]


@dataclass
class Settings:
    requests: Dict[int, int]  # requests per run, per pipeline depth
    min_rounds: int
    max_rounds: int
    budget_s: float  # no round beyond min_rounds starts if it would end after this
    memory_keys: int
    warmup_requests: int


# ----------------------------------------------------------------------------------------
# What the server says about itself (the client is lib/resp.py)


def used_memory(connection: Connection) -> int:
    return int(connection.info("memory")["used_memory"])


def server_cpu(connection: Connection) -> float:
    return server_cpu_seconds(connection.info("cpu"))


# ----------------------------------------------------------------------------------------
# Pinning and the server


@dataclass
class Pinning:
    """taskset prefixes for the server and for the clients; empty when unpinned."""

    server: List[str]
    client: List[str]
    description: str


def detect_pinning() -> Pinning:
    """Server on the first allowed CPU, clients on the second, when taskset works here."""
    cpus, problem = cpus_for_pinning()
    if problem is not None:
        return Pinning([], [], f"not used ({problem}): everything runs unpinned")
    server_cpu, client_cpu = cpus[0], cpus[1]
    failure = taskset_failure((server_cpu, client_cpu))
    if failure is not None:
        cpu, reason = failure
        return Pinning([], [], f"not used (taskset -c {cpu} failed: {reason}): everything runs unpinned")
    return Pinning(
        taskset_prefix(server_cpu),
        taskset_prefix(client_cpu),
        f"server on CPU {server_cpu}, redis-benchmark and redis-cli on CPU {client_cpu} (taskset)",
    )


def start_server(processes: Processes, workdir: Path, module: Path,
                 pinning: Pinning) -> Tuple[subprocess.Popen, int]:
    # Someone may take the port between free_port() and the bind: then try another one.
    for _ in range(3):
        port = free_port()
        command = pinning.server + [
            "redis-server",
            "--bind", "127.0.0.1",
            "--port", str(port),
            "--save", "",
            "--appendonly", "no",
            "--dir", str(workdir),
            "--logfile", str(workdir / "redis.log"),
            "--loadmodule", str(module),
        ]
        server = processes.start(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if wait_until_ready(server, port):
            return server, port
        processes.stop(server)
    log_tail = (workdir / "redis.log").read_text(errors="replace")[-2000:]
    raise RuntimeError(f"redis-server did not start; the end of its log:\n{log_tail}")


def wait_until_ready(server: subprocess.Popen, port: int, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and server.poll() is None:
        if ping(port):
            return True
        time.sleep(0.1)
    return False


@dataclass
class Bench:
    """What every step needs: the server, the pinning and the loaded scripts."""

    processes: Processes
    connection: Connection
    port: int
    pinning: Pinning
    shas: Dict[str, str]  # bench/lua file name -> sha of SCRIPT LOAD
    workdir: Path


LIBRARY = REPO_DIR / "functions" / "ratelimit.lua"


def load_scripts(connection: Connection) -> Dict[str, str]:
    """SCRIPT LOAD every bench/lua/*.lua (the rows run them by their sha), and FUNCTION LOAD
    the Functions library (its rows call FCALL)."""
    connection.call("FUNCTION", "LOAD", "REPLACE", LIBRARY.read_text())
    return {
        path.name: connection.call("SCRIPT", "LOAD", path.read_text()).decode()
        for path in sorted((BENCH_DIR / "lua").glob("*.lua"))
    }


# ----------------------------------------------------------------------------------------
# Commands: as redis-benchmark arguments, as a single trial, as a pipe of distinct keys


def command_args(bench: Bench, args: List[str], lua: Optional[str], key: str = KEY) -> List[str]:
    """The full command: EVALSHA for a Lua row, the row's own command otherwise."""
    if lua is not None:
        return ["EVALSHA", bench.shas[lua], "1", key] + args
    return [key if arg == KEY else arg for arg in args]


def try_once(bench: Bench, args: List[str]) -> Optional[str]:
    """Runs the command once on a fresh key: None when it works, else why the row is n/a."""
    try:
        reply = bench.connection.call(*args)
    except ReplyError as error:
        # "ERR unknown command 'X', with args beginning with: ..." says enough without the args.
        return str(error).split(", with args beginning with")[0]
    if args[0].upper() in ("INCR", "SET"):
        return None
    # Every rate-limit reply starts with allowed = 1 on a fresh key; CL.THROTTLE's with
    # limited = 0.
    expected = 0 if args[0].upper() == "CL.THROTTLE" else 1
    if not isinstance(reply, list) or not reply or reply[0] != expected:
        return f"unexpected reply on a fresh key: {reply!r}"
    return None


def pipe_payload(args: List[str], count: int) -> bytes:
    """RESP for `count` commands on the keys numbered 0 .. count-1, spelled as redis-benchmark
    spells __rand_int__ (12 digits), so that every command gets its own key."""
    key_index = next(index for index, arg in enumerate(args) if RAND_MARK in arg)
    prefix, suffix = (part.encode().replace(b"%", b"%%") for part in args[key_index].split(RAND_MARK))
    key_length = len(args[key_index]) - len(RAND_MARK) + 12
    head = b"*%d\r\n" % len(args) + b"".join(encode_argument(arg) for arg in args[:key_index])
    tail = b"".join(encode_argument(arg) for arg in args[key_index + 1:])
    key_format = b"$%d\r\n" % key_length + prefix + b"%012d" + suffix + b"\r\n"
    return b"".join(head + key_format % number + tail for number in range(count))


def pipe_commands(bench: Bench, payload_file: Path) -> Tuple[int, int]:
    """Feeds a file of commands to `redis-cli --pipe`; returns (errors, replies)."""
    with payload_file.open("rb") as payload:
        pipe = bench.processes.start(
            bench.pinning.client + ["redis-cli", "-h", "127.0.0.1", "-p", str(bench.port), "--pipe"],
            stdin=payload, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        try:
            output, _ = pipe.communicate(timeout=RUN_TIMEOUT_S)
        finally:
            bench.processes.stop(pipe)
    match = re.search(r"errors: (\d+), replies: (\d+)", output)
    if match is None:
        raise RuntimeError(f"redis-cli --pipe said: {output.strip()[-500:]}")
    return int(match.group(1)), int(match.group(2))


# ----------------------------------------------------------------------------------------
# CPU used by other processes during a run: this machine is shared, and that load is the
# main source of noise, so every run records it.


def cpu_snapshot(connection: Connection) -> CpuSnapshot:
    """The server's CPU (INFO cpu), and this script's with its finished children
    (redis-benchmark, redis-cli)."""
    return CpuSnapshot.take({
        "server": lambda: server_cpu(connection),
        "own": lambda: rusage_cpu_seconds(resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN),
    })


# ----------------------------------------------------------------------------------------
# Throughput


@dataclass
class RunResult:
    ops: float
    p50_ms: Optional[float]
    p99_ms: Optional[float]
    server_us_per_request: float
    other_cpus: float
    expired_per_request: float  # keys the server expired during the run, per request


@dataclass
class Measurements:
    """results[(row name, pipeline)][round] for every run that worked; failures the same way."""

    results: Dict[Tuple[str, int], Dict[int, RunResult]] = field(default_factory=dict)
    failures: Dict[Tuple[str, int], Dict[int, str]] = field(default_factory=dict)
    rounds: int = 0
    repeated: int = 0  # runs repeated because other processes were busy during them


def prepare_keyspace(bench: Bench, row: Row) -> None:
    """FLUSHALL, then for a read row write every key of the keyspace once."""
    bench.connection.call("FLUSHALL")
    if row.prefill is None:
        return
    # The same prefill serves every round: its file is written once.
    digest = hashlib.sha1(" ".join(row.prefill).encode()).hexdigest()[:12]
    payload_file = bench.workdir / f"prefill-{digest}.resp"
    if not payload_file.exists():
        payload_file.write_bytes(pipe_payload(row.prefill, KEYSPACE))
    errors, replies = pipe_commands(bench, payload_file)
    if errors or replies != KEYSPACE:
        raise RuntimeError(f"prefill failed: {errors} errors in {replies} replies")


def run_benchmark(bench: Bench, args: List[str], pipeline: int, requests: int) -> RunResult:
    command = bench.pinning.client + [
        "redis-benchmark",
        "-h", "127.0.0.1",
        "-p", str(bench.port),
        "-c", str(CLIENTS),
        "-r", str(KEYSPACE),
        "-n", str(requests),
        "-P", str(pipeline),
        "--csv",
    ] + args
    expired_before = expired_keys(bench.connection)
    before = cpu_snapshot(bench.connection)
    benchmark = bench.processes.start(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = benchmark.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        bench.processes.stop(benchmark)
    after = cpu_snapshot(bench.connection)
    expired = expired_keys(bench.connection) - expired_before
    # redis-benchmark stops at the first error reply and prints it.
    errors = server_errors(output)
    if benchmark.returncode != 0 or errors:
        raise RuntimeError((errors or [f"redis-benchmark exit status {benchmark.returncode}"])[0])
    ops, p50, p99 = parse_csv(output)
    server_us = after.used_since(before)["server"] * 1e6 / requests
    return RunResult(ops, p50, p99, server_us, after.other_cpus_since(before), expired / requests)


def expired_keys(connection: Connection) -> int:
    return int(connection.info("stats")["expired_keys"])


# A run during which other processes kept this much CPU busy is repeated once at the end of
# its round, and the quieter of the two counts: on a shared 2-CPU machine one busy neighbour
# can halve a run, and when it hits a reference row it skews every ratio of that round.
NOISY_OTHER_CPUS = 0.25


def run_round(bench: Bench, units: List[Tuple[Row, int]], round_index: int, settings: Settings,
              measurements: Measurements) -> None:
    noisy = []
    for row, pipeline in round_order(units, round_index, settings.max_rounds):
        result = run_unit(bench, row, pipeline, round_index, settings, measurements)
        if result is not None and result.other_cpus >= NOISY_OTHER_CPUS:
            noisy.append((row, pipeline))
    for row, pipeline in noisy:
        first = measurements.results[(row.name, pipeline)][round_index]
        retry = run_unit(bench, row, pipeline, round_index, settings, measurements, retry=True)
        measurements.repeated += 1
        if retry is None or retry.other_cpus > first.other_cpus:
            measurements.results[(row.name, pipeline)][round_index] = first


def run_unit(bench: Bench, row: Row, pipeline: int, round_index: int, settings: Settings,
             measurements: Measurements, retry: bool = False) -> Optional[RunResult]:
    """One run of one row; records its result (or its failure) under the round."""
    label = f"round {round_index + 1}{' (repeat)' if retry else ''}  P{pipeline:<2} {row.name}"
    try:
        prepare_keyspace(bench, row)
        args = command_args(bench, row.args, row.lua)
        result = run_benchmark(bench, args, pipeline, settings.requests[pipeline])
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        if not retry:
            measurements.failures.setdefault((row.name, pipeline), {})[round_index] = str(error)
        log(f"{label}: FAILED {error}")
        return None
    measurements.results.setdefault((row.name, pipeline), {})[round_index] = result
    log(f"{label}: {result.ops:,.0f} ops/s, {result.server_us_per_request:.2f} server µs/req, "
        f"other load {result.other_cpus:.2f} CPU")
    return result


def measure_throughput(bench: Bench, rows: List[Row], settings: Settings, started: float) -> Measurements:
    """Rounds of every available row at every pipeline depth: at least min_rounds, more up to
    max_rounds while another round still fits in the time budget."""
    units = [(row, pipeline) for row in rows if row.error is None for pipeline in settings.requests]
    measurements = Measurements()
    longest_round_s = 0.0
    for round_index in range(settings.max_rounds):
        if round_index >= settings.min_rounds and \
                time.monotonic() + longest_round_s - started > settings.budget_s:
            log(f"stopping after {round_index} rounds: another would end past the "
                f"{format_duration(settings.budget_s)} budget")
            break
        round_started = time.monotonic()
        run_round(bench, units, round_index, settings, measurements)
        measurements.rounds = round_index + 1
        longest_round_s = max(longest_round_s, time.monotonic() - round_started)
    return measurements


def warm_up(bench: Bench, rows: List[Row], settings: Settings) -> None:
    """Marks the rows whose command fails as n/a, then runs every other row once, unmeasured
    (first-touch allocations, page faults and cold caches would otherwise hit the first rows)."""
    for row in rows:
        bench.connection.call("FLUSHALL")
        row.error = try_once(bench, command_args(bench, row.args, row.lua, key="warm-up"))
        if row.error is not None:
            log(f"warm-up  {row.name}: n/a ({row.error})")
    for row in rows:
        if row.error is None:
            bench.connection.call("FLUSHALL")
            try:
                run_benchmark(bench, command_args(bench, row.args, row.lua), 16, settings.warmup_requests)
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                row.error = f"failed at warm-up: {error}"
                log(f"warm-up  {row.name}: n/a ({row.error})")
    bench.connection.call("FLUSHALL")


# ----------------------------------------------------------------------------------------
# Memory per key


@dataclass
class MemoryResult:
    name: str
    bytes_per_key: Optional[float] = None
    keys: int = 0
    encoding: str = ""
    error: Optional[str] = None
    note: str = ""


def measure_memory(bench: Bench, window: MemoryWindow, keys: int) -> List[MemoryResult]:
    results = []
    for case in memory_cases(window):
        for result in measure_memory_case(bench, case, keys):
            shown = f"{result.bytes_per_key:.1f} B/key" if result.error is None else result.error
            log(f"memory   {result.name}: {shown}")
            results.append(result)
    bench.connection.call("FLUSHALL")
    return results


def measure_memory_case(bench: Bench, case: MemoryCase, keys: int) -> List[MemoryResult]:
    bench.connection.call("FLUSHALL")
    error = try_once(bench, command_args(bench, case.args, case.lua, key="memory-trial"))
    if error is not None:
        return [MemoryResult(case.name, error=f"not available: {error}")]
    bench.connection.call("FLUSHALL")
    payload_file = bench.workdir / "memory.resp"
    payload_file.write_bytes(pipe_payload(command_args(bench, case.args, case.lua), keys))
    try:
        before = used_memory(bench.connection)
        results = [write_keys_and_measure(bench, case.name, keys, before, payload_file)]
        if case.second_hit:
            name = case.name + ", after a second hit on every key"
            results.append(write_keys_and_measure(bench, name, keys, before, payload_file))
    finally:
        payload_file.unlink()
    return results


def write_keys_and_measure(bench: Bench, name: str, keys: int, before: int,
                           payload_file: Path) -> MemoryResult:
    errors, replies = pipe_commands(bench, payload_file)
    if errors or replies != keys:
        return MemoryResult(name, error=f"{errors} errors in {replies} replies")
    # Read after redis-cli has gone, so that its client buffers are no longer counted.
    connection = bench.connection
    dbsize = connection.call("DBSIZE")
    used = used_memory(connection)
    sample = KEY.replace(RAND_MARK, "%012d" % 0)
    encoding = connection.call("OBJECT", "ENCODING", sample)
    kind = f"{connection.call('TYPE', sample)}/{encoding.decode() if encoding else '?'}"
    if not dbsize:
        return MemoryResult(name, error="no key left (they expired)")
    result = MemoryResult(name, (used - before) / dbsize, dbsize, kind)
    if dbsize != keys:
        result.note = f"DBSIZE {dbsize:,}, not the {keys:,} keys written"
    return result


# ----------------------------------------------------------------------------------------
# The report


def per_round(row: str, reference: str, pipeline: int, measurements: Measurements,
              ratio_of) -> List[float]:
    """ratio_of(row's run, reference's run) for every round in which both ran."""
    own = measurements.results.get((row, pipeline), {})
    base = measurements.results.get((reference, pipeline), {})
    return [ratio_of(own[r], base[r]) for r in sorted(own) if r in base]


def throughput_ratio(run: RunResult, reference: RunResult) -> float:
    return run.ops / reference.ops


def cpu_ratio(run: RunResult, reference: RunResult) -> float:
    """Like throughput_ratio, but from server CPU per request: what other load does to the
    wall clock barely moves it."""
    return reference.server_us_per_request / run.server_us_per_request


def format_ratio(ratios: List[float]) -> str:
    if not ratios:
        return "–"
    text = f"{statistics.median(ratios):.2f}"
    if max(ratios) - min(ratios) >= 0.005:
        text += f" ({min(ratios):.2f}–{max(ratios):.2f})"
    return text


def format_median(values: List[Optional[float]], digits: int) -> str:
    present = [value for value in values if value is not None]
    return f"{statistics.median(present):.{digits}f}" if present else "–"


THROUGHPUT_COLUMNS = ["command", "P", "ops/s", "× INCR", "× SET PXAT", "× SET PXAT by server CPU",
                      "p50 ms", "p99 ms", "server µs/req", "other load (CPUs)"]


def throughput_table(rows: List[Row], settings: Settings, measurements: Measurements) -> List[str]:
    lines = ["| " + " | ".join(THROUGHPUT_COLUMNS) + " |",
             "|---|" + "---:|" * (len(THROUGHPUT_COLUMNS) - 1)]
    for pipeline in settings.requests:
        for row in rows:
            lines.append(throughput_line(row, pipeline, measurements))
    return lines


def throughput_line(row: Row, pipeline: int, measurements: Measurements) -> str:
    blanks = " |" * (len(THROUGHPUT_COLUMNS) - 3)
    if row.error is not None:
        return f"| {row.name} | {pipeline} | n/a (not available: {markdown_cell(row.error)}) |{blanks}"
    runs = measurements.results.get((row.name, pipeline), {})
    if not runs:
        failure = next(iter(measurements.failures.get((row.name, pipeline), {}).values()), "no run")
        return f"| {row.name} | {pipeline} | failed: {markdown_cell(failure)} |{blanks}"
    ops = f"{statistics.median(run.ops for run in runs.values()):,.0f}"
    if len(runs) < measurements.rounds:
        ops += f" ({len(runs)} of {measurements.rounds} runs)"
    cells = [
        row.name,
        str(pipeline),
        ops,
        format_ratio(per_round(row.name, REFERENCE_ROW, pipeline, measurements, throughput_ratio)),
        format_ratio(per_round(row.name, NATIVE_WRITE_ROW, pipeline, measurements, throughput_ratio)),
        format_ratio(per_round(row.name, NATIVE_WRITE_ROW, pipeline, measurements, cpu_ratio)),
        format_median([run.p50_ms for run in runs.values()], 3),
        format_median([run.p99_ms for run in runs.values()], 3),
        format_median([run.server_us_per_request for run in runs.values()], 2),
        format_median([run.other_cpus for run in runs.values()], 2),
    ]
    return "| " + " | ".join(cells) + " |"


def memory_table(results: List[MemoryResult]) -> List[str]:
    lines = ["| keys written with | bytes/key | keys | type/encoding | note |",
             "|---|---:|---:|---|---|"]
    for result in results:
        if result.error is not None:
            lines.append(f"| {result.name} | n/a ({markdown_cell(result.error)}) | | | |")
        else:
            lines.append(f"| {result.name} | {result.bytes_per_key:.1f} | {result.keys:,} | "
                         f"{result.encoding} | {result.note} |")
    return lines



def expiry_churn(rows: List[Row], measurements: Measurements, threshold: float = 0.1) -> str:
    """The rows whose keys the server expired during the runs, with keys expired per request."""
    churned = []
    for row in rows:
        for pipeline in (1, 16):
            runs = measurements.results.get((row.name, pipeline), {}).values()
            share = statistics.median(run.expired_per_request for run in runs) if runs else 0.0
            if share >= threshold:
                churned.append(f"{row.name} at -P {pipeline}: {share:.2f}")
    return "; ".join(churned)


def other_load_summary(measurements: Measurements) -> str:
    loads = [run.other_cpus for runs in measurements.results.values() for run in runs.values()]
    if not loads:
        return "no run"
    return f"median {statistics.median(loads):.2f} CPUs, highest {max(loads):.2f}"


@dataclass
class Context:
    """What the report says about the run besides its numbers."""

    redis_version: str
    pinning: Pinning
    module: Path
    memory_window: MemoryWindow
    started: datetime.datetime
    elapsed_s: float


def report(rows: List[Row], settings: Settings, measurements: Measurements,
           memory: List[MemoryResult], context: Context) -> str:
    requests = ", ".join(f"-n {n:,} at -P {p}" for p, n in settings.requests.items())
    lines = [
        "# Benchmark: the ratelimit module against native commands and Lua",
        "",
        README_LINK,
        "",
        f"- Date: {context.started:%Y-%m-%d %H:%M} UTC; total run time {format_duration(context.elapsed_s)}",
        f"- Machine: {machine_description()}",
        f"- Redis: {context.redis_version}; module {context.module.name} built from commit "
        f"{git_commit()} (plus any uncommitted work in the tree)",
        f"- Pinning: {context.pinning.description}",
        f"- Load: redis-benchmark -c {CLIENTS} -r {KEYSPACE:,} (key {KEY}), {requests}; "
        f"{measurements.rounds} interleaved rounds ({rounds_rule(settings)}; every row once per "
        "round, the order rotated each round), after an unmeasured warm-up of "
        f"{settings.warmup_requests:,} requests per row at -P 16",
        "- Server: redis-server from the PATH on loopback, --save '' --appendonly no, no "
        "replicas; FLUSHALL before every run",
        f"- Parameters: limit {LIMIT:,} per {WINDOW}, so nothing is denied. The log rows use "
        f"limit {LOG_LIMIT} per {LOG_WINDOW}: a log holds one entry per hit, and this keeps "
        "each key's log to the hits of one run (about 10 at -P 16, none denied). Two tiers: "
        f"10000/1s and 1000000/1h. CL.THROTTLE key {LIMIT} {LIMIT} {WINDOW_MS // 1000} 1",
        "- Lua baselines: bench/lua/*.lua, loaded with SCRIPT LOAD, run with EVALSHA; they "
        "read the server's clock with TIME (effects replication, the 7.0 default)",
        f"- Load from other processes during the measured runs: {other_load_summary(measurements)} "
        "(the machine is shared; this is the main source of noise). A run during which they "
        f"used {NOISY_OTHER_CPUS} CPU or more is repeated once at the end of its round and the "
        f"quieter of the two counts: {measurements.repeated} runs were repeated",
        "",
        "## Throughput",
        "",
        "ops/s, p50 and p99 are medians over the rounds (latency as redis-benchmark reports "
        "it: per request, which at -P 16 waits for its whole pipeline). × INCR and × SET PXAT: "
        "the median over rounds of the row's ops/s divided by the reference's ops/s in the "
        "same round and pipeline, lowest and highest round in brackets. × SET PXAT by server "
        "CPU: the same from the server's CPU time per request (INFO cpu, user + sys), which "
        "load from other processes barely moves. At -P 1 one redis-benchmark process is the "
        "bottleneck, so rows differ little there.",
        "",
    ]
    lines += throughput_table(rows, settings, measurements)
    churn = expiry_churn(rows, measurements)
    if churn:
        lines += ["", "Keys the server expired during the runs, per request (median; rows at "
                      f"0.1 or more): {churn}. Token-bucket and GCRA state expires once the bucket "
                      "is full again (60 µs after one hit at 1,000,000/60s), so most of those "
                      "hits create a key that the expiry cycle then deletes, which shows in p99. "
                      "A fixed-window row shows up here when its run crossed a window end."]
    if any(row.error is not None for row in rows):
        lines += ["", "n/a: the command fails on this build; the script measures it as soon "
                      "as it works."]
    lines += [
        "",
        "## Memory per tracked key",
        "",
        f"FLUSHALL, then {settings.memory_keys:,} distinct keys written once each through "
        "`redis-cli --pipe` (checked with DBSIZE); bytes/key = (used_memory after − before) "
        f"/ DBSIZE. Limit {MEMORY_LIMIT} per {context.memory_window.text} "
        f"({context.memory_window.ms} ms for SET PX and Lua), so that every key outlives the "
        "measurement. type/encoding is that of one key. Values below 10000 written by INCR "
        "or SET share Redis's integer objects, which costs them nothing per key.",
        "",
    ]
    lines += memory_table(memory)
    return "\n".join(lines) + "\n"


def rounds_rule(settings: Settings) -> str:
    if settings.min_rounds == settings.max_rounds:
        return "as asked"
    return (f"{settings.min_rounds} to {settings.max_rounds}, as many as the "
            f"{format_duration(settings.budget_s)} budget allows")



# ----------------------------------------------------------------------------------------
# Main


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", type=Path, default=Path(os.environ.get("RL_MODULE", DEFAULT_MODULE)),
                        help="the module to load (default: the release build, or $RL_MODULE)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where the Markdown goes")
    parser.add_argument("--rounds", type=int,
                        help="exactly this many rounds (default: 3, up to 5 within the budget)")
    parser.add_argument("--budget-minutes", type=float, default=8.0,
                        help="no round beyond the third starts if it would end later than this")
    parser.add_argument("--requests-p1", type=int, default=100_000, help="requests per run at -P 1")
    parser.add_argument("--requests-p16", type=int, default=1_000_000, help="requests per run at -P 16")
    parser.add_argument("--memory-keys", type=int, default=1_000_000, help="distinct keys per memory case")
    parser.add_argument("--quick", action="store_true",
                        help="smoke-test the script: few requests, 1 round, 20,000 memory keys")
    return parser.parse_args()


def settings_from(arguments: argparse.Namespace) -> Settings:
    if arguments.quick:
        return Settings({1: 10_000, 16: 50_000}, 1, 1, arguments.budget_minutes * 60, 20_000, 20_000)
    min_rounds, max_rounds = (arguments.rounds, arguments.rounds) if arguments.rounds else (3, 5)
    return Settings({1: arguments.requests_p1, 16: arguments.requests_p16}, min_rounds, max_rounds,
                    arguments.budget_minutes * 60, arguments.memory_keys,
                    warmup_requests=min(100_000, arguments.requests_p16))



def missing_prerequisite(module: Path) -> Optional[str]:
    if not module.exists():
        return f"no module at {module}; build it first (make build)"
    for tool in ("redis-server", "redis-benchmark", "redis-cli"):
        if shutil.which(tool) is None:
            return f"{tool} is not on the PATH (make setup installs it)"
    return None


def main() -> int:
    arguments = parse_arguments()
    stop_on_signals()
    started = time.monotonic()
    started_at = datetime.datetime.now(datetime.timezone.utc)
    problem = missing_prerequisite(arguments.module)
    if problem is not None:
        log(problem)
        return 1
    settings = settings_from(arguments)
    pinning = detect_pinning()
    log(f"pinning: {pinning.description}")

    processes = Processes()
    workdir = Path(tempfile.mkdtemp(prefix="rl-bench-"))
    try:
        server, port = start_server(processes, workdir, arguments.module.resolve(), pinning)
        log(f"redis-server pid {server.pid} on 127.0.0.1:{port}, files in {workdir}")
        connection = Connection(port)
        bench = Bench(processes, connection, port, pinning, load_scripts(connection), workdir)
        redis_version = "redis-server " + connection.info("server")["redis_version"]
        rows = throughput_rows(far_future_ms=int(time.time() * 1000) + 30 * 86_400_000)
        warm_up(bench, rows, settings)
        # Memory first: the rounds then get whatever time remains of the budget.
        memory_window = choose_memory_window(int(time.time() * 1000))
        memory = measure_memory(bench, memory_window, settings.memory_keys)
        measurements = measure_throughput(bench, rows, settings, started)
        connection.call("FLUSHALL")
        full_log_lines = full_log.section(connection, bench.shas, arguments.quick)
        connection.close()
    finally:
        processes.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)

    context = Context(redis_version, pinning, arguments.module, memory_window, started_at,
                      time.monotonic() - started)
    text = report(rows, settings, measurements, memory, context)
    text += "\n" + "\n".join(full_log_lines) + "\n"
    print(text)
    arguments.output.write_text(text)
    log(f"wrote {arguments.output}; total run time {format_duration(context.elapsed_s)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
