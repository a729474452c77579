#!/usr/bin/env python3
"""Throughput and added latency of rl-gateway, measured with wrk in one run.

Starts its own redis-server (with the module), demo-upstream and two rl-gateway instances on
free loopback ports, then loads them with wrk in interleaved rounds:

    (a) upstream alone          wrk -> demo-upstream
    (b) through the gateway     wrk -> rl-gateway -> demo-upstream; one RL.HIT per request
                                on a local Redis, every request allowed
    (c) denied from the cache   wrk -> rl-gateway with a 1/1h limit: after the first two
                                requests every answer is a 429 from the local deny cache
    (d) Redis stopped           as (b) with the redis-server frozen by SIGSTOP: the circuit
                                breaker lets requests through (fail-open) without waiting
    (e) to (h) nginx            what users would run instead, one nginx process (nginx-light,
                                master_process off) in front of the same demo-upstream:
                                proxy_pass as nginx does by default (a new upstream connection
                                per request), proxy_pass with upstream keep-alive, limit_req
                                allowing every request, and limit_req denying (429)
    (i) to (l) local quota      two more rl-gateway instances with the same two rules (a
                                fixed window at the limit of (b)), one of them with
                                local_quota = true: (i) today's gateway and (j) local quota
                                on a hot key (key = "global", one key for every request),
                                (k) and (l) the same on cold keys (a new X-User header on
                                every request, from wrk's Lua); Redis commands per allowed
                                request from INFO commandstats (gateway_quota.py)
    (m) nginx, cold keys        limit_req keyed by that header, a new key on every request

With --baseline-gateway PATH a third rl-gateway, built from another commit, runs (b) in the
same rounds as (b0), so that a change to the gateway is measured against the old binary.

Each round runs every scenario at every connection count once, the order rotated from round
to round, so that the noise of a shared machine hits every scenario alike; the report gives
the median over the rounds. It prints a Markdown report and writes it to
bench/GATEWAY-RESULTS.md, all of it generated: the hand-written profile and analysis are in
bench/README.md.

    python3 bench/gateway.py            # what `make bench-gateway` runs, after `make build`
    python3 bench/gateway.py --quick    # a fast smoke run of the script itself (not a result)

It builds nothing: target/release/{libredis_ratelimit.so,rl-gateway,demo-upstream} must
exist, and nginx (make setup installs nginx-light). wrk comes from Debian: when it is missing the script installs it if it runs as root
with CI=true, and otherwise says which command would. Python 3 standard library only. Every
process the script starts is stopped by its pid, also on an error, Ctrl-C or SIGTERM.
"""

import argparse
import datetime
import http.client
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import gateway_quota as quota
from lib.commandstats import calls_between, ratelimit_calls
from lib.cpu import (CpuSnapshot, cpus_for_pinning, process_cpu_seconds, rusage_cpu_seconds,
                     taskset_failure, taskset_prefix)
from lib.net import free_ports
from lib.processes import Processes, send_signal, stop_on_signals
from lib.report import (README_LINK, format_duration, git_commit, log, machine_description,
                        markdown_cell)
from lib.resp import Connection, ping
from lib.rounds import round_order
from lib.wrk import parse_wrk

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
RELEASE_DIR = REPO_DIR / "target" / "release"
MODULE = RELEASE_DIR / "libredis_ratelimit.so"
GATEWAY = RELEASE_DIR / "rl-gateway"
UPSTREAM = RELEASE_DIR / "demo-upstream"
DEFAULT_OUTPUT = BENCH_DIR / "GATEWAY-RESULTS.md"

# The targets for (b) on this 2-core machine.
TARGET_RPS = 20_000
TARGET_ADDED_P99_MS = 1.0

# Redis's deadline for one decision, as in the example rules.
DEADLINE_MS = 5
# So high that nothing is ever denied: at 50,000 requests/s a minute holds 3,000,000.
ALLOW_LIMIT = "1000000000/1m"
# One request per hour: the second request is denied by Redis, every later one by the cache.
DENY_LIMIT = "1/1h"

# nginx's limit_req with the same limits. nginx takes a rate per second or minute and keeps
# the time in ms: ALLOW_LIMIT's 1,000,000,000 a minute is 16,666,667 a second, and a burst
# lets more than one request through in the same ms (without one, the second request of a
# ms is over the rate). DENY_LIMIT's one an hour becomes nginx's lowest rate, one a minute.
NGINX_ALLOW_RATE = "16666667r/s"
NGINX_ALLOW_BURST = 100_000
NGINX_DENY_RATE = "1r/m"

# A wrk run that has not finished by then is stuck: it is killed and counted as failed.
RUN_TIMEOUT_S = 120
WRK_TIMEOUT = "2s"  # wrk's own per-request timeout; a request slower than this is an error


# ----------------------------------------------------------------------------------------
# The servers' logs, for the message when one fails


def log_tail(path: Path, characters: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-characters:]
    except OSError:
        return "(no log)"


# ----------------------------------------------------------------------------------------
# Talking to the servers: one HTTP request, the gateway's metrics (Redis: lib/resp.py)


def http_get(port: int, path: str = "/", timeout: float = 2.0) -> Tuple[int, Dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body
    finally:
        connection.close()


METRIC_LINE = re.compile(r"^([a-z_]+)(\{[^}]*\})?\s+(\S+)$")


def read_metrics(admin_port: int) -> Dict[str, float]:
    """The gateway's /metrics as {'name{labels}': value}."""
    status, _, body = http_get(admin_port, "/metrics")
    if status != 200:
        raise RuntimeError(f"GET /metrics answered {status}")
    values = {}
    for line in body.decode().splitlines():
        match = METRIC_LINE.match(line)
        if match:
            values[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return values


OUTCOMES = ("allowed", "denied", "denied_cached", "shadow_denied", "fail_open", "fail_closed")
FAIL_OPEN_REASONS = ("timeout", "connection", "unavailable", "error", "breaker")


@dataclass
class Decisions:
    """How the gateway decided the requests of one run: counts by outcome of the rule."""

    outcomes: Dict[str, int]
    fail_open_reasons: Dict[str, int]
    upstream_errors: int
    # Local quota: requests decided from units held (no Redis call), units taken, given back.
    local: int = 0
    units_taken: int = 0
    units_given_back: int = 0

    @staticmethod
    def between(before: Dict[str, float], after: Dict[str, float],
                rule: str = "default") -> "Decisions":
        def delta(name: str) -> int:
            return int(after.get(name, 0) - before.get(name, 0))

        return Decisions(
            {o: delta(f'rl_gateway_decisions_total{{rule="{rule}",outcome="{o}"}}') for o in OUTCOMES},
            {r: delta(f'rl_gateway_fail_open_total{{reason="{r}"}}') for r in FAIL_OPEN_REASONS},
            delta("rl_gateway_upstream_errors_total"),
            delta("rl_gateway_local_quota_decisions_total"),
            delta("rl_gateway_local_quota_units_taken_total"),
            delta("rl_gateway_local_quota_units_given_back_total"),
        )

    def total(self) -> int:
        return sum(self.outcomes.values())

    def describe(self) -> str:
        """The outcomes that happened, as shares of all decisions of the run."""
        total = self.total()
        if total == 0:
            return "none"
        parts = []
        for outcome, count in self.outcomes.items():
            if count == 0:
                continue
            text = f"{outcome} {100 * count / total:.1f}%"
            if outcome == "fail_open":
                reasons = ", ".join(f"{r} {c:,}" for r, c in self.fail_open_reasons.items() if c)
                text += f" ({reasons})"
            parts.append(text)
        if self.upstream_errors:
            parts.append(f"upstream errors {self.upstream_errors:,}")
        if self.local or self.units_taken:
            parts.append(f"from local quota {100 * self.local / total:.2f}% (units taken "
                         f"{self.units_taken:,}, given back {self.units_given_back:,})")
        return "; ".join(parts)


# ----------------------------------------------------------------------------------------
# Pinning


@dataclass
class Pinning:
    """taskset prefixes for the servers and for wrk; empty when unpinned."""

    name: str
    servers: List[str]
    wrk: List[str]
    description: str


PINNINGS = ("none", "wrk", "split")


def choose_pinning(name: str) -> Pinning:
    """none: everything unpinned. wrk: wrk on the last CPU, the servers wherever the kernel
    puts them. split: wrk on the last CPU, Redis, the upstream and the gateways on the first."""
    if name == "none":
        return Pinning(name, [], [], "none: wrk, rl-gateway, demo-upstream and redis-server share "
                                     "both CPUs as the kernel schedules them")
    cpus, problem = cpus_for_pinning()
    if problem is not None:
        return Pinning("none", [], [], f"none (asked for {name}, but {problem})")
    first, last = cpus[0], cpus[-1]
    failure = taskset_failure((first, last))
    if failure is not None:
        return Pinning("none", [], [], f"none (asked for {name}, but taskset -c {failure[0]} failed)")
    wrk = taskset_prefix(last)
    if name == "wrk":
        return Pinning(name, [], wrk, f"wrk: wrk on CPU {last} (taskset); the servers unpinned, "
                                      "so they share that CPU with wrk too")
    return Pinning(name, taskset_prefix(first), wrk,
                   f"split (taskset): wrk alone on CPU {last}; redis-server, demo-upstream, nginx and "
                   f"the rl-gateway instances together on CPU {first}. So the whole server side "
                   "has one core (the gateway's and the upstream's tokio runtimes each run one "
                   "worker thread) and wrk never takes CPU from the path measured: the latencies "
                   "are much steadier than unpinned (where wrk, two threads of each server, Redis "
                   "and the network stack take turns on 2 cores and p99 mostly measures the "
                   "scheduler), at the cost of the throughput the gateway reaches with both cores. "
                   "(a) and (c) are likely limited by wrk's one thread, not by the server: compare "
                   "wrk's µs/req below with the others'. `--pin none` runs everything unpinned")


# ----------------------------------------------------------------------------------------
# The servers


@dataclass
class Server:
    process: subprocess.Popen
    port: int
    admin_port: Optional[int] = None  # the gateways'


@dataclass
class Servers:
    redis: Server
    upstream: Server
    allow_gateway: Server  # (b) and (d)
    deny_gateway: Server  # (c)
    rules_gateway: Server  # (i) and (k): the hot and cold rules, today's gateway
    quota_gateway: Server  # (j) and (l): the same rules with local quota
    nginx: Dict[str, Server]  # (e) to (h) and (m) by scenario key; one process
    cold_key_script: Path  # wrk's Lua for the cold keys
    baseline_gateway: Optional[Server] = None  # (b0), with --baseline-gateway


def wait_for(process: subprocess.Popen, ready: Callable[[], bool], timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if ready():
                return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def start_with_retries(processes: Processes, name: str, workdir: Path, ports_needed: int,
                       command_for: Callable[[List[int]], List[str]],
                       ready_for: Callable[[List[int]], Callable[[], bool]]) -> Tuple[subprocess.Popen, List[int]]:
    """Starts `name` on fresh free ports; someone may take one between the check and the
    bind, so it tries up to three times."""
    log_path = workdir / f"{name}.log"
    for _ in range(3):
        ports = free_ports(ports_needed)
        with log_path.open("ab") as log_file:
            process = processes.start(command_for(ports), stdin=subprocess.DEVNULL,
                                      stdout=log_file, stderr=subprocess.STDOUT)
        if wait_for(process, ready_for(ports)):
            return process, ports
        processes.stop(process)
    raise RuntimeError(f"{name} did not start; the end of its log:\n{log_tail(log_path)}")


def start_redis(processes: Processes, workdir: Path, pinning: Pinning) -> Server:
    def command(ports: List[int]) -> List[str]:
        return pinning.servers + [
            "redis-server",
            "--bind", "127.0.0.1",
            "--port", str(ports[0]),
            "--save", "",
            "--appendonly", "no",
            "--dir", str(workdir),
            "--loadmodule", str(MODULE),
        ]

    def ready(ports: List[int]) -> Callable[[], bool]:
        return lambda: ping(ports[0])

    process, ports = start_with_retries(processes, "redis-server", workdir, 1, command, ready)
    return Server(process, ports[0])


def start_upstream(processes: Processes, workdir: Path, pinning: Pinning) -> Server:
    def command(ports: List[int]) -> List[str]:
        return pinning.servers + [str(UPSTREAM), "--listen", f"127.0.0.1:{ports[0]}"]

    def ready(ports: List[int]) -> Callable[[], bool]:
        return lambda: http_get(ports[0], "/__requests")[0] == 200

    process, ports = start_with_retries(processes, "demo-upstream", workdir, 1, command, ready)
    return Server(process, ports[0])


def default_rule(limit: str) -> str:
    return f"""[default]
key = "ip"
limits = ["{limit}"]
"""


def gateway_config(listen: int, admin: int, upstream: int, redis: int, key_prefix: str,
                   rules: str) -> str:
    return f"""# Written by bench/gateway.py for one run.
[server]
listen = "127.0.0.1:{listen}"
admin_listen = "127.0.0.1:{admin}"
mode = "proxy"
upstream = "http://127.0.0.1:{upstream}"
trusted_proxies = []

[redis]
url = "redis://127.0.0.1:{redis}"
deadline_ms = {DEADLINE_MS}
key_prefix = "{key_prefix}"

{rules}"""


def start_gateway(processes: Processes, workdir: Path, pinning: Pinning, name: str,
                  upstream: Server, redis: Server, key_prefix: str, rules: str,
                  binary: Path = GATEWAY) -> Server:
    config_path = workdir / f"{name}.toml"

    def command(ports: List[int]) -> List[str]:
        config_path.write_text(gateway_config(ports[0], ports[1], upstream.port, redis.port,
                                              key_prefix, rules))
        return pinning.servers + [str(binary), "--config", str(config_path)]

    def ready(ports: List[int]) -> Callable[[], bool]:
        return lambda: http_get(ports[1], "/healthz")[0] == 200

    process, ports = start_with_retries(processes, name, workdir, 2, command, ready)
    return Server(process, ports[0], ports[1])


# The nginx scenarios' keys, in the order of their ports in nginx's configuration.
NGINX_KEYS = ("e", "f", "g", "h", "m")
# (m)'s zone, keyed by the header that is new on every request: a 10 MB zone holds some
# 80,000 keys, after which nginx drops the oldest for each new one (as it would in use).
NGINX_COLD_ZONE = "10m"
NGINX_COLD_KEY = "$http_" + quota.COLD_HEADER.lower().replace("-", "_")


def nginx_config(workdir: Path, ports: List[int], upstream: Server) -> str:
    """One process (master_process off, so that its pid is the one doing the work), no access
    log (the gateway keeps none), refusals logged below the error log's level (the gateway
    logs none). The keep-alive servers use HTTP/1.1 to an upstream block with idle
    connections kept, as nginx's documentation says to; the first one is proxy_pass as it
    comes, HTTP/1.0 and a new connection for every request. X-Forwarded-For is appended, as
    the gateway does. The last one is (g) keyed by the cold keys' header."""
    d = workdir
    forward = ("proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for; "
               "proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_pass http://api;")
    return f"""# Written by bench/gateway.py for one run.
daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log error;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {d}/nginx-body;
  proxy_temp_path {d}/nginx-proxy;
  fastcgi_temp_path {d}/nginx-fastcgi;
  uwsgi_temp_path {d}/nginx-uwsgi;
  scgi_temp_path {d}/nginx-scgi;
  upstream api {{ server 127.0.0.1:{upstream.port}; keepalive 64; }}
  limit_req_zone $binary_remote_addr zone=allow:1m rate={NGINX_ALLOW_RATE};
  limit_req_zone $binary_remote_addr zone=deny:1m rate={NGINX_DENY_RATE};
  limit_req_zone {NGINX_COLD_KEY} zone=cold:{NGINX_COLD_ZONE} rate={NGINX_ALLOW_RATE};
  limit_req_status 429;
  limit_req_log_level info;
  server {{ listen 127.0.0.1:{ports[0]};
    location / {{ proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
                 proxy_pass http://127.0.0.1:{upstream.port}; }} }}
  server {{ listen 127.0.0.1:{ports[1]}; location / {{ {forward} }} }}
  server {{ listen 127.0.0.1:{ports[2]};
    location / {{ limit_req zone=allow burst={NGINX_ALLOW_BURST} nodelay; {forward} }} }}
  server {{ listen 127.0.0.1:{ports[3]}; location / {{ limit_req zone=deny; {forward} }} }}
  server {{ listen 127.0.0.1:{ports[4]};
    location / {{ limit_req zone=cold burst={NGINX_ALLOW_BURST} nodelay; {forward} }} }}
}}
"""


def start_nginx(processes: Processes, workdir: Path, pinning: Pinning, binary: str,
                upstream: Server) -> Dict[str, Server]:
    config_path = workdir / "nginx.conf"

    def command(ports: List[int]) -> List[str]:
        config_path.write_text(nginx_config(workdir, ports, upstream))
        return pinning.servers + [binary, "-p", str(workdir), "-c", str(config_path),
                                  "-e", str(workdir / "nginx-error.log")]

    def ready(ports: List[int]) -> Callable[[], bool]:
        return lambda: all(http_get(port)[0] == 200 for port in ports[:3])

    process, ports = start_with_retries(processes, "nginx", workdir, len(NGINX_KEYS), command,
                                        ready)
    return {key: Server(process, port) for key, port in zip(NGINX_KEYS, ports)}


def check_nginx_deny(nginx: Server, timeout_s: float = 5.0) -> None:
    """The first request takes limit_req's one a minute; every later one is a 429."""
    deadline = time.monotonic() + timeout_s
    statuses = []
    while True:
        status, _, _ = http_get(nginx.port)
        statuses.append(status)
        if status == 429:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"nginx with limit_req {NGINX_DENY_RATE} answered {statuses}")
        time.sleep(0.05)


def check_allow_gateway(gateway: Server, timeout_s: float = 5.0, path: str = "/",
                        rule: str = "default") -> None:
    """Requests through an allowing gateway until Redis decides one: 200 from the upstream
    with the RateLimit fields. The gateway connects to Redis on its first decision, which may
    miss the deadline and fail open; so may a decision on a busy machine."""
    deadline = time.monotonic() + timeout_s
    while True:
        before = read_metrics(gateway.admin_port)
        status, headers, body = http_get(gateway.port, path)
        decisions = Decisions.between(before, read_metrics(gateway.admin_port), rule)
        if status != 200 or not body.startswith(b"GET /"):
            raise RuntimeError(f"the allowing gateway answered {status} {headers} {body[:200]!r}")
        if decisions.outcomes["allowed"] == 1 and "ratelimit" in headers:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the allowing gateway did not decide with Redis: {decisions.describe()}")
        time.sleep(0.05)


def check_deny_gateway(gateway: Server, timeout_s: float = 5.0) -> None:
    """Spends the 1/1h budget: the first request that Redis decides passes, the next is
    denied by Redis, and from then on the deny cache answers 429 with Retry-After."""
    deadline = time.monotonic() + timeout_s
    statuses = []
    while True:
        before = read_metrics(gateway.admin_port)
        status, headers, _ = http_get(gateway.port)
        decisions = Decisions.between(before, read_metrics(gateway.admin_port))
        statuses.append(status)
        if status == 429 and "retry-after" in headers and decisions.outcomes["denied_cached"] == 1:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the denying gateway answered {statuses}; the last request: "
                               f"{decisions.describe()}")
        time.sleep(0.05)


def start_servers(processes: Processes, workdir: Path, pinning: Pinning, nginx_binary: str,
                  baseline_gateway: Optional[Path], local_quota: bool = True) -> Servers:
    redis = start_redis(processes, workdir, pinning)
    log(f"redis-server pid {redis.process.pid} on 127.0.0.1:{redis.port}")
    upstream = start_upstream(processes, workdir, pinning)
    log(f"demo-upstream pid {upstream.process.pid} on 127.0.0.1:{upstream.port}")
    allow = start_gateway(processes, workdir, pinning, "rl-gateway-allow", upstream, redis,
                          "rl-bench-allow:", default_rule(ALLOW_LIMIT))
    log(f"rl-gateway (limit {ALLOW_LIMIT}) pid {allow.process.pid} on 127.0.0.1:{allow.port}, "
        f"admin {allow.admin_port}")
    deny = start_gateway(processes, workdir, pinning, "rl-gateway-deny", upstream, redis,
                         "rl-bench-deny:", default_rule(DENY_LIMIT))
    log(f"rl-gateway (limit {DENY_LIMIT}) pid {deny.process.pid} on 127.0.0.1:{deny.port}, "
        f"admin {deny.admin_port}")
    baseline = None
    if baseline_gateway is not None:
        baseline = start_gateway(processes, workdir, pinning, "rl-gateway-baseline", upstream,
                                 redis, "rl-bench-baseline:", default_rule(ALLOW_LIMIT),
                                 baseline_gateway)
        log(f"rl-gateway from {baseline_gateway} (limit {ALLOW_LIMIT}) pid "
            f"{baseline.process.pid} on 127.0.0.1:{baseline.port}, admin {baseline.admin_port}")
    rules = start_gateway(processes, workdir, pinning, "rl-gateway-rules", upstream, redis,
                          "rl-bench-rules:", quota.rules_toml(ALLOW_LIMIT, local_quota=False))
    local = start_gateway(processes, workdir, pinning, "rl-gateway-quota", upstream, redis,
                          "rl-bench-quota:", quota.rules_toml(ALLOW_LIMIT, local_quota))
    for what, gateway in (("today's hot and cold rules", rules), ("the same with local quota", local)):
        log(f"rl-gateway ({what}) pid {gateway.process.pid} on 127.0.0.1:{gateway.port}, "
            f"admin {gateway.admin_port}")
    nginx = start_nginx(processes, workdir, pinning, nginx_binary, upstream)
    log(f"nginx pid {nginx['e'].process.pid} on 127.0.0.1:"
        + ", ".join(f"{server.port} ({key})" for key, server in nginx.items()))
    check_allow_gateway(allow)
    check_deny_gateway(deny)
    if baseline is not None:
        check_allow_gateway(baseline)
    for gateway in (rules, local):
        check_allow_gateway(gateway, path=quota.HOT_PATH, rule="hot")
        check_allow_gateway(gateway, path=quota.COLD_PATH, rule="cold")
    check_nginx_deny(nginx["h"])
    return Servers(redis, upstream, allow, deny, rules, local, nginx,
                   quota.write_cold_key_script(workdir), baseline)


# ----------------------------------------------------------------------------------------
# What is measured


@dataclass
class Scenario:
    key: str
    name: str
    target: Callable[[Servers], Server]  # where wrk sends its requests
    proxy: Optional[str] = None  # the CPU role in front of the upstream: one of CPU_ROLES
    baseline: bool = False  # the upstream alone: what the gateway rows are compared with
    redis_stopped: bool = False  # redis-server frozen with SIGSTOP for the run
    denies: bool = False  # every answer but the first is a 429
    path: str = "/"
    rule: str = "default"  # the gateway's rule, as its metrics name it
    cold_keys: bool = False  # wrk's Lua sends a new X-User on every request
    local_quota: bool = False  # the gateway gives units back after the run: wait for it

    def counts_redis_commands(self) -> bool:
        """A gateway row, with Redis running: INFO commandstats before and after it."""
        return self.proxy in GATEWAY_ROLES and not self.redis_stopped


SCENARIOS = [
    Scenario("a", "(a) upstream alone", lambda s: s.upstream, baseline=True),
    Scenario("b", "(b) gateway, Redis local (allowed: RL.HIT + forward)", lambda s: s.allow_gateway,
             proxy="gateway"),
    Scenario("c", f"(c) gateway, limit {DENY_LIMIT} (429 from the deny cache)",
             lambda s: s.deny_gateway, proxy="gateway", denies=True),
    Scenario("d", "(d) gateway, Redis stopped (SIGSTOP; fail-open, breaker)",
             lambda s: s.allow_gateway, proxy="gateway", redis_stopped=True),
    Scenario("e", "(e) nginx proxy_pass (nginx's default: a new upstream connection per request)",
             lambda s: s.nginx["e"], proxy="nginx"),
    Scenario("f", "(f) nginx proxy_pass, upstream keep-alive", lambda s: s.nginx["f"],
             proxy="nginx"),
    Scenario("g", f"(g) nginx limit_req {NGINX_ALLOW_RATE} burst={NGINX_ALLOW_BURST} (allowed), "
                  "keep-alive", lambda s: s.nginx["g"], proxy="nginx"),
    Scenario("h", f"(h) nginx limit_req {NGINX_DENY_RATE} (429), keep-alive",
             lambda s: s.nginx["h"], proxy="nginx", denies=True),
    Scenario("i", "(i) gateway today, hot key (key = \"global\"): RL.HIT per request",
             lambda s: s.rules_gateway, proxy="rules", path=quota.HOT_PATH, rule="hot"),
    Scenario("j", "(j) gateway, local quota, hot key: RL.TAKE in batches",
             lambda s: s.quota_gateway, proxy="quota", path=quota.HOT_PATH, rule="hot",
             local_quota=True),
    Scenario("k", "(k) gateway today, cold keys (a new X-User per request)",
             lambda s: s.rules_gateway, proxy="rules", path=quota.COLD_PATH, rule="cold",
             cold_keys=True),
    Scenario("l", "(l) gateway, local quota, cold keys (batches of one)",
             lambda s: s.quota_gateway, proxy="quota", path=quota.COLD_PATH, rule="cold",
             cold_keys=True, local_quota=True),
    Scenario("m", f"(m) nginx limit_req as (g), cold keys (keyed by X-User, a new one per "
                  "request), keep-alive", lambda s: s.nginx["m"], proxy="nginx", cold_keys=True),
]
BASELINE = SCENARIOS[0]
THROUGH_REDIS = SCENARIOS[1]
HOT_TODAY, HOT_QUOTA, COLD_TODAY, COLD_QUOTA, COLD_NGINX = SCENARIOS[8:13]
NGINX_LIMIT_REQ = SCENARIOS[6]
# With --baseline-gateway: (b) through the gateway built from another commit, inserted after (b).
BASELINE_GATEWAY = Scenario("b0", "(b0) baseline gateway (--baseline-gateway), as (b)",
                            lambda s: s.baseline_gateway, proxy="baseline")


def scenario_by_key(key: str) -> Scenario:
    return next(s for s in SCENARIOS if s.key == key)


@dataclass
class Settings:
    threads: int
    connections: List[int]
    duration_s: int
    rounds: int
    warmup_s: int
    budget_s: float  # no repeat of a noisy run starts if it, and the rounds left, would end after this
    local_quota: bool = True  # False: (j) and (l) without it, an A/A run against (i) and (k)


@dataclass
class WrkResult:
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    non_2xx: int
    socket_errors: Dict[str, int]
    decisions: Optional[Decisions]  # the gateway rows
    cpu_us_per_request: Dict[str, float]  # by CPU_ROLES
    other_cpus: float  # CPUs kept busy by processes that are not this benchmark's
    redis_calls: Optional[Dict[str, int]] = None  # rate-limit commands by name, gateway rows

    def errors(self) -> int:
        return sum(self.socket_errors.values())


# ----------------------------------------------------------------------------------------
# CPU: per process of the benchmark, and that of everything else on this shared machine


def cpu_snapshot(servers: Servers) -> CpuSnapshot:
    """The servers' CPU by role, plus wrk (finished children) and this script."""
    def pid_of(server: Server) -> int:
        return server.process.pid

    return CpuSnapshot.take({
        "gateway": lambda: process_cpu_seconds(pid_of(servers.allow_gateway))
        + process_cpu_seconds(pid_of(servers.deny_gateway)),
        "baseline": lambda: process_cpu_seconds(pid_of(servers.baseline_gateway))
        if servers.baseline_gateway else 0.0,
        "rules": lambda: process_cpu_seconds(pid_of(servers.rules_gateway)),
        "quota": lambda: process_cpu_seconds(pid_of(servers.quota_gateway)),
        "nginx": lambda: process_cpu_seconds(pid_of(servers.nginx["e"])),
        "upstream": lambda: process_cpu_seconds(pid_of(servers.upstream)),
        "redis": lambda: process_cpu_seconds(pid_of(servers.redis)),
        "wrk": lambda: rusage_cpu_seconds(resource.RUSAGE_CHILDREN),
        "script": lambda: rusage_cpu_seconds(resource.RUSAGE_SELF),
    })


CPU_ROLES = ("gateway", "baseline", "rules", "quota", "nginx", "upstream", "redis", "wrk")
# The rl-gateway instances: (b) to (d), (b0), (i) and (k), (j) and (l). Each of the last two
# counts alone, so that the local-quota one's sweeper (awake every 10 ms) is charged to its
# own rows only.
GATEWAY_ROLES = ("gateway", "baseline", "rules", "quota")


# ----------------------------------------------------------------------------------------
# Running wrk


def wrk_command(pinning: Pinning, servers: Servers, scenario: Scenario, threads: int,
                connections: int, duration_s: int) -> List[str]:
    target = scenario.target(servers)
    command = pinning.wrk + ["wrk", "-t", str(threads), "-c", str(connections),
                             "-d", f"{duration_s}s", "--timeout", WRK_TIMEOUT, "--latency"]
    if scenario.cold_keys:
        command += ["-s", str(servers.cold_key_script)]
    command.append(f"http://127.0.0.1:{target.port}{scenario.path}")
    if scenario.cold_keys:
        # The script's prefix for its keys: new for every run, so no run meets another's.
        command += ["--", f"{scenario.key}{connections}.{time.time_ns()}"]
    return command


def redis_calls_now(redis: Server) -> Dict[str, int]:
    with Connection(redis.port, timeout=10.0) as connection:
        return ratelimit_calls(connection.info("commandstats"))


def run_wrk(processes: Processes, pinning: Pinning, servers: Servers, scenario: Scenario,
            threads: int, connections: int, duration_s: int) -> WrkResult:
    target = scenario.target(servers)
    command = wrk_command(pinning, servers, scenario, threads, connections, duration_s)
    metrics_before = read_metrics(target.admin_port) if target.admin_port else None
    calls_before = redis_calls_now(servers.redis) if scenario.counts_redis_commands() else None
    if scenario.redis_stopped:
        send_signal(servers.redis.process, signal.SIGSTOP)
    try:
        before = cpu_snapshot(servers)
        wrk = processes.start(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        try:
            output, _ = wrk.communicate(timeout=RUN_TIMEOUT_S)
        finally:
            processes.stop(wrk)
        after = cpu_snapshot(servers)
    finally:
        if scenario.redis_stopped:
            send_signal(servers.redis.process, signal.SIGCONT)
    if scenario.local_quota:
        time.sleep(quota.SETTLE_S)  # the refunds of the units still held belong to the run
    decisions = None
    if metrics_before is not None:
        decisions = Decisions.between(metrics_before, read_metrics(target.admin_port),
                                      scenario.rule)
    if scenario.redis_stopped:
        # Also after a failed run, so that the next scenario finds Redis deciding again.
        wait_for_redis_decisions(servers.allow_gateway)
    redis_calls = None
    if calls_before is not None:
        redis_calls = calls_between(calls_before, redis_calls_now(servers.redis))
    if wrk.returncode != 0:
        raise RuntimeError(f"wrk exit status {wrk.returncode}: {output.strip()[-600:]}")
    rps, p50, p99, requests, non_2xx, socket_errors = parse_wrk(output)
    used = after.used_since(before)
    per_request = {role: used[role] * 1e6 / max(requests, 1) for role in CPU_ROLES}
    return WrkResult(rps, p50, p99, requests, non_2xx, socket_errors, decisions, per_request,
                     after.other_cpus_since(before), redis_calls)


def wait_for_redis_decisions(gateway: Server, timeout_s: float = 10.0) -> None:
    """After SIGCONT: requests until the breaker has closed and Redis decides again (the
    breaker lets a probe through once its open period, 1 s by default, is over)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = read_metrics(gateway.admin_port)
        http_get(gateway.port)
        after = read_metrics(gateway.admin_port)
        if after.get("rl_gateway_breaker_open") == 0 and \
                Decisions.between(before, after).outcomes["allowed"] == 1:
            return
        time.sleep(0.05)
    raise RuntimeError(f"the gateway's breaker did not close within {timeout_s:.0f} s of SIGCONT")


@dataclass
class Measurements:
    """results[(scenario key, connections)][round]; failures the same way."""

    results: Dict[Tuple[str, int], Dict[int, WrkResult]] = field(default_factory=dict)
    failures: Dict[Tuple[str, int], Dict[int, str]] = field(default_factory=dict)
    rounds: int = 0
    repeated: int = 0  # runs repeated because other processes were busy during them
    not_repeated: int = 0  # noisy runs left as they were: a repeat would have overrun the budget


# A run during which other processes kept this much CPU busy is repeated once at the end of
# its round, and the quieter of the two counts: on a shared 2-CPU machine a busy neighbour
# takes a large share of what wrk and the servers need.
NOISY_OTHER_CPUS = 0.25


def measure(processes: Processes, pinning: Pinning, servers: Servers, settings: Settings,
            started: float) -> Measurements:
    units = [(scenario, connections) for connections in settings.connections for scenario in SCENARIOS]
    measurements = Measurements()
    first_round_started = time.monotonic()
    for round_index in range(settings.rounds):
        noisy = []
        for scenario, connections in round_order(units, round_index, settings.rounds):
            result = run_unit(processes, pinning, servers, settings, scenario, connections,
                              round_index, measurements)
            if result is not None and result.other_cpus >= NOISY_OTHER_CPUS:
                noisy.append((scenario, connections))
        if round_index == 0:
            run_s = (time.monotonic() - first_round_started) / len(units)
        # The rounds still to come keep their time: repeats only take what is left over.
        reserved_s = (settings.rounds - round_index - 1) * len(units) * run_s
        for scenario, connections in noisy:
            if time.monotonic() - started + run_s + reserved_s > settings.budget_s:
                measurements.not_repeated += 1
                continue
            first = measurements.results[(scenario.key, connections)][round_index]
            retry = run_unit(processes, pinning, servers, settings, scenario, connections,
                             round_index, measurements, retry=True)
            measurements.repeated += 1
            if retry is None or retry.other_cpus > first.other_cpus:
                measurements.results[(scenario.key, connections)][round_index] = first
        measurements.rounds = round_index + 1
    return measurements


def run_unit(processes: Processes, pinning: Pinning, servers: Servers, settings: Settings,
             scenario: Scenario, connections: int, round_index: int, measurements: Measurements,
             retry: bool = False) -> Optional[WrkResult]:
    """One wrk run of one scenario; records its result (or its failure) under the round."""
    label = f"round {round_index + 1}{' (repeat)' if retry else ''}  -c{connections:<3} {scenario.name}"
    try:
        result = run_wrk(processes, pinning, servers, scenario, settings.threads, connections,
                         settings.duration_s)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        if not retry:
            measurements.failures.setdefault((scenario.key, connections), {})[round_index] = str(error)
        log(f"{label}: FAILED {error}")
        return None
    measurements.results.setdefault((scenario.key, connections), {})[round_index] = result
    decided = f", {result.decisions.describe()}" if result.decisions else ""
    problems = f", non-2xx {result.non_2xx:,}" if result.non_2xx else ""
    problems += f", socket errors {result.socket_errors}" if result.errors() else ""
    log(f"{label}: {result.rps:,.0f} req/s, p50 {result.p50_ms:.3f} ms, p99 {result.p99_ms:.3f} ms"
        f"{problems}{decided}, other load {result.other_cpus:.2f} CPU")
    return result


def warm_up(processes: Processes, pinning: Pinning, servers: Servers, settings: Settings) -> None:
    """Every scenario once, unmeasured: connection pools, first-touch allocations, caches."""
    for scenario in SCENARIOS:
        result = run_wrk(processes, pinning, servers, scenario, settings.threads,
                         max(settings.connections), settings.warmup_s)
        log(f"warm-up  {scenario.name}: {result.rps:,.0f} req/s")


# ----------------------------------------------------------------------------------------
# The report


def median_cell(values: List[float], digits: int, thousands: bool = False) -> str:
    if not values:
        return "–"
    middle = statistics.median(values)
    return f"{middle:,.{digits}f}" if thousands else f"{middle:.{digits}f}"


def spread_cell(values: List[float], digits: int, suffix: str = "") -> str:
    """The median, with the lowest and highest round in brackets when they differ."""
    if not values:
        return "–"
    text = f"{statistics.median(values):.{digits}f}{suffix}"
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    if low != high:
        text += f" ({low} to {high})"
    return text


def paired(measurements: Measurements, scenario: Scenario, connections: int,
           of: Callable[[WrkResult, WrkResult], float]) -> List[float]:
    """of(scenario's run, the upstream's run) for every round in which both ran."""
    own = measurements.results.get((scenario.key, connections), {})
    base = measurements.results.get((BASELINE.key, connections), {})
    return [of(own[r], base[r]) for r in sorted(own) if r in base]


RESULT_COLUMNS = ["scenario", "conns", "requests/s", "× upstream alone", "p50 ms", "p99 ms",
                  "added p50 ms", "added p99 ms", "non-2xx", "socket errors", "how the gateway decided"]


def result_table(measurements: Measurements, settings: Settings) -> List[str]:
    lines = ["| " + " | ".join(RESULT_COLUMNS) + " |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for connections in settings.connections:
        for scenario in SCENARIOS:
            lines.append(result_line(measurements, settings, scenario, connections))
    return lines


def result_line(measurements: Measurements, settings: Settings, scenario: Scenario,
                connections: int) -> str:
    runs = measurements.results.get((scenario.key, connections), {})
    if not runs:
        failure = next(iter(measurements.failures.get((scenario.key, connections), {}).values()), "no run")
        blanks = " |" * (len(RESULT_COLUMNS) - 3)
        return f"| {scenario.name} | {connections} | failed: {markdown_cell(failure)} |{blanks}"
    results = list(runs.values())
    rps = median_cell([r.rps for r in results], 0, thousands=True)
    if len(runs) < settings.rounds:
        rps += f" ({len(runs)} of {settings.rounds} runs)"
    if scenario.baseline:
        ratio = added_p50 = added_p99 = "–"
    else:
        ratio = spread_cell(paired(measurements, scenario, connections, lambda a, b: a.rps / b.rps), 2)
        added_p50 = spread_cell(paired(measurements, scenario, connections,
                                       lambda a, b: a.p50_ms - b.p50_ms), 3)
        added_p99 = spread_cell(paired(measurements, scenario, connections,
                                       lambda a, b: a.p99_ms - b.p99_ms), 3)
    non_2xx = sum(r.non_2xx for r in results)
    requests = sum(r.requests for r in results)
    non_2xx_cell = f"{non_2xx:,}" + (f" ({100 * non_2xx / requests:.2f}%)" if non_2xx else "")
    errors = {}
    for result in results:
        for kind, count in result.socket_errors.items():
            errors[kind] = errors.get(kind, 0) + count
    errors_cell = ", ".join(f"{kind} {count:,}" for kind, count in errors.items() if count) or "0"
    decided = "–"
    if results[0].decisions is not None:
        total = Decisions({o: sum(r.decisions.outcomes[o] for r in results) for o in OUTCOMES},
                          {f: sum(r.decisions.fail_open_reasons[f] for r in results) for f in FAIL_OPEN_REASONS},
                          sum(r.decisions.upstream_errors for r in results),
                          sum(r.decisions.local for r in results),
                          sum(r.decisions.units_taken for r in results),
                          sum(r.decisions.units_given_back for r in results))
        decided = total.describe()
    cells = [scenario.name, str(connections), rps, ratio,
             median_cell([r.p50_ms for r in results], 3), median_cell([r.p99_ms for r in results], 3),
             added_p50, added_p99, non_2xx_cell, errors_cell, decided]
    return "| " + " | ".join(cells) + " |"


CPU_COLUMNS = ["scenario", "conns", "proxy µs/req (rl-gateway or nginx)", "redis-server µs/req",
               "proxy + Redis µs/req", "demo-upstream µs/req", "wrk µs/req", "sum µs/req",
               "other load (CPUs)"]


def proxy_us(result: WrkResult, scenario: Scenario) -> float:
    """CPU µs per request of the process in front of the upstream (0 for the upstream alone)."""
    return result.cpu_us_per_request[scenario.proxy] if scenario.proxy else 0.0


def proxy_and_redis_us(result: WrkResult, scenario: Scenario) -> float:
    return proxy_us(result, scenario) + result.cpu_us_per_request["redis"]


def cpu_table(measurements: Measurements, settings: Settings) -> List[str]:
    lines = ["| " + " | ".join(CPU_COLUMNS) + " |", "|---|" + "---:|" * (len(CPU_COLUMNS) - 1)]
    for connections in settings.connections:
        for scenario in SCENARIOS:
            results = list(measurements.results.get((scenario.key, connections), {}).values())
            if not results:
                continue
            cells = [scenario.name, str(connections)]
            cells += [median_cell([proxy_us(r, scenario) for r in results], 1),
                      median_cell([r.cpu_us_per_request["redis"] for r in results], 1),
                      median_cell([proxy_and_redis_us(r, scenario) for r in results], 1),
                      median_cell([r.cpu_us_per_request["upstream"] for r in results], 1),
                      median_cell([r.cpu_us_per_request["wrk"] for r in results], 1)]
            cells.append(median_cell([sum(r.cpu_us_per_request[role] for role in CPU_ROLES)
                                      for r in results], 1))
            cells.append(median_cell([r.other_cpus for r in results], 2))
            lines.append("| " + " | ".join(cells) + " |")
    return lines


# The goal of issue 13 for (b): rl-gateway's CPU per request, Redis's included, at most this
# many times nginx limit_req's (g).
TARGET_CPU_RATIO = 1.5


@dataclass
class CpuComparison:
    name: str
    mine: str  # scenario keys
    theirs: str
    mine_with_redis: bool  # the scenario's Redis CPU counted with its proxy's


def cpu_comparisons() -> List[CpuComparison]:
    comparisons = [
        CpuComparison("(b) rl-gateway + Redis / (g) nginx limit_req, allowed", "b", "g", True),
        CpuComparison("(b) rl-gateway alone / (f) nginx proxy_pass, keep-alive", "b", "f", False),
        CpuComparison("(b) rl-gateway + Redis / (e) nginx proxy_pass, its defaults", "b", "e", True),
        CpuComparison("(c) rl-gateway deny cache / (h) nginx limit_req, 429", "c", "h", False),
    ]
    if any(s.key == BASELINE_GATEWAY.key for s in SCENARIOS):
        comparisons += [
            CpuComparison("(b) rl-gateway + Redis / (b0) baseline rl-gateway + Redis", "b", "b0", True),
            CpuComparison("(b) rl-gateway alone / (b0) baseline rl-gateway alone", "b", "b0", False),
        ]
    return comparisons


def comparison_ratios(measurements: Measurements, comparison: CpuComparison,
                      connections: int) -> List[float]:
    """Per round in which both ran: the one's CPU per request over the other's."""
    mine, theirs = scenario_by_key(comparison.mine), scenario_by_key(comparison.theirs)
    cost = proxy_and_redis_us if comparison.mine_with_redis else proxy_us
    own = measurements.results.get((mine.key, connections), {})
    other = measurements.results.get((theirs.key, connections), {})
    return [cost(own[r], mine) / cost(other[r], theirs)
            for r in sorted(own) if r in other and cost(other[r], theirs) > 0]


def comparison_table(measurements: Measurements, settings: Settings) -> List[str]:
    lines = ["| CPU µs per request, ratio | " + " | ".join(f"-c {c}" for c in settings.connections)
             + " |", "|---|" + "---:|" * len(settings.connections)]
    for comparison in cpu_comparisons():
        cells = [comparison.name]
        cells += [spread_cell(comparison_ratios(measurements, comparison, c), 2)
                  for c in settings.connections]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def cpu_target_line(measurements: Measurements, settings: Settings) -> str:
    comparison = cpu_comparisons()[0]
    parts = []
    for connections in settings.connections:
        ratios = comparison_ratios(measurements, comparison, connections)
        if ratios:
            ratio = statistics.median(ratios)
            parts.append(f"{ratio:.2f}× at -c {connections} "
                         f"({'met' if ratio <= TARGET_CPU_RATIO else 'NOT met'})")
    return (f"**Target** for (b): rl-gateway's CPU per request, Redis's included, at most "
            f"{TARGET_CPU_RATIO:g}× nginx limit_req's (g): " + ("; ".join(parts) or "not measured")
            + ".")


def through_redis_figures(measurements: Measurements, connections: int) -> Optional[Tuple[float, float, float]]:
    """(b)'s median requests/s, p50 and added p99 at one connection count, when measured."""
    runs = measurements.results.get((THROUGH_REDIS.key, connections), {})
    added = paired(measurements, THROUGH_REDIS, connections, lambda a, b: a.p99_ms - b.p99_ms)
    if not runs or not added:
        return None
    return (statistics.median(r.rps for r in runs.values()),
            statistics.median(r.p50_ms for r in runs.values()), statistics.median(added))


def targets_line(measurements: Measurements, settings: Settings) -> str:
    """Whether (b) met the issue's targets: each at every connection count, and both at once."""
    figures = {c: through_redis_figures(measurements, c) for c in settings.connections}
    measured = {c: f for c, f in figures.items() if f is not None}
    if not measured:
        return "**Targets**: not measured, (b) or (a) failed at every connection count."

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    throughput = "; ".join(f"{rps:,.0f} req/s at -c {c} ({verdict(rps >= TARGET_RPS)})"
                           for c, (rps, _, _) in measured.items())
    latency = "; ".join(f"{added:.3f} ms at -c {c} ({verdict(added < TARGET_ADDED_P99_MS)})"
                        for c, (_, _, added) in measured.items())
    both = [f"-c {c} ({rps:,.0f} req/s with {added:.3f} ms added p99)"
            for c, (rps, _, added) in measured.items()
            if rps >= TARGET_RPS and added < TARGET_ADDED_P99_MS]
    return (f"**Targets** for (b), Redis local: at least {TARGET_RPS:,} requests/s through the "
            f"gateway: {throughput}. p99 added latency under {TARGET_ADDED_P99_MS:g} ms: "
            f"{latency}. Both at the same load: "
            + (", ".join(both) if both else "at no connection count measured") + ".")


def queueing_line(measurements: Measurements, settings: Settings) -> str:
    """Little's law for (b): in a closed loop the mean latency is connections / throughput."""
    parts = []
    for connections in settings.connections:
        figures = through_redis_figures(measurements, connections)
        if figures is not None:
            rps, p50, _ = figures
            parts.append(f"-c {connections}: {connections} / {rps:,.0f} req/s = "
                         f"{1000 * connections / rps:.3f} ms, p50 {p50:.3f} ms")
    if not parts:
        return ""
    return ("Where (b)'s latency goes: with wrk's closed loop the mean latency is connections / "
            "requests/s (Little's law), " + "; ".join(parts) + ". While the server CPU is "
            "saturated, added connections only wait in line for it, so the added latency at a "
            "high connection count is set by the throughput of the one server core; the "
            "lowest connection count shows the path itself with the least queueing.")


def local_quota_section(measurements: Measurements, settings: Settings) -> List[str]:
    """(i) to (m): CPU against today's gateway and nginx, Redis commands, latency."""
    def ratio(mine: str, theirs: str, connections: int) -> List[float]:
        return comparison_ratios(measurements, CpuComparison("", mine, theirs, True), connections)

    results = measurements.results
    counted = [s for s in SCENARIOS if s.counts_redis_commands() and not s.denies]
    a_a = [] if settings.local_quota else [
        "**This run is an A/A run (--without-local-quota): (j) and (l) ran WITHOUT local quota, "
        "on an instance configured as (i)'s and (k)'s.** Their differences from (i) and (k) "
        "are what two identical instances differ by on this machine.", ""]
    return [
        "## Local quota: a hot key and cold keys",
        "",
        *a_a,
        "(i) and (j) are the same rule on two rl-gateway instances, (j)'s with local_quota = "
        "true; so are (k) and (l). CPU µs per request with Redis's (for nginx, Redis idles), "
        "the median over rounds of the ratio in the same round, lowest and highest round in "
        "brackets; every request of these rows is allowed (Anything odd says otherwise).",
        "",
        *quota.cpu_table(ratio, settings.connections),
        "",
        "Redis commands per allowed request: the calls of the rate-limit commands (INFO "
        "commandstats: every cmdstat_rl.*, and FCALL) from before the run until "
        f"{quota.SETTLE_S:g} s after it (for local quota: its sweeper's refunds of the units "
        "still held), over the requests the gateway counted allowed. The median over rounds, "
        "the lowest and highest in brackets; by command: over every run of the row.",
        "",
        *quota.commands_table(results, counted, settings.connections),
        "",
        "Latency: medians over rounds, and differences paired by round (the lowest and "
        "highest in brackets): against (a), and local quota against today's gateway on the "
        "same keys.",
        "",
        *quota.latency_table(results, {s.key: s.name for s in SCENARIOS}, settings.connections),
        "",
        quota.targets_line(results, ratio),
        "",
    ]


def odd_things(measurements: Measurements) -> List[str]:
    """What should not have happened: errors, non-2xx outside (c), fail-opens in (b)."""
    notes = []
    for (key, connections), runs in sorted(measurements.results.items()):
        scenario = next(s for s in SCENARIOS if s.key == key)
        for round_index, result in sorted(runs.items()):
            where = f"{scenario.name} at -c {connections}, round {round_index + 1}"
            if result.errors():
                notes.append(f"{where}: wrk socket errors {result.socket_errors}")
            if not scenario.denies and result.non_2xx:
                notes.append(f"{where}: {result.non_2xx:,} non-2xx responses")
            if scenario.counts_redis_commands() and not scenario.denies and result.decisions \
                    and result.decisions.outcomes["allowed"] != result.decisions.total():
                notes.append(f"{where}: not every request was allowed: "
                             f"{result.decisions.describe()}")
            if result.decisions and result.decisions.upstream_errors:
                notes.append(f"{where}: {result.decisions.upstream_errors:,} upstream errors (502)")
    for (key, connections), failures in sorted(measurements.failures.items()):
        for round_index, failure in sorted(failures.items()):
            notes.append(f"({key}) at -c {connections}, round {round_index + 1}: failed: {failure}")
    return notes


def other_load_summary(measurements: Measurements) -> str:
    loads = [run.other_cpus for runs in measurements.results.values() for run in runs.values()]
    if not loads:
        return "no run"
    return f"median {statistics.median(loads):.2f} CPUs, highest {max(loads):.2f}"


def repeats_summary(measurements: Measurements) -> str:
    text = f"{measurements.repeated} runs were repeated"
    if measurements.not_repeated:
        text += (f", {measurements.not_repeated} more were not (a repeat would have overrun the "
                 "time budget)")
    return text



def tool_version(command: List[str], pattern: str) -> str:
    result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    match = re.search(pattern, result.stdout + result.stderr)
    return match.group(1) if match else "unknown"



@dataclass
class Context:
    started: datetime.datetime
    elapsed_s: float
    pinning: Pinning
    redis_version: str
    wrk_version: str
    gateway_version: str
    rustc_version: str
    nginx_version: str
    baseline_gateway: Optional[Path]
    baseline_label: str


def shown_path(path: Path) -> str:
    """A path as the report shows it: inside the repository relative to it, else its name
    (the report is committed; the machine's layout is nobody's business)."""
    try:
        return str(path.relative_to(REPO_DIR))
    except ValueError:
        return path.name


def report(measurements: Measurements, settings: Settings, context: Context) -> str:
    connections = ", ".join(f"-c {c}" for c in settings.connections)
    lines = [
        "# Benchmark: rl-gateway in front of a trivial upstream",
        "",
        README_LINK,
        "",
        f"- Date: {context.started:%Y-%m-%d %H:%M} UTC; total run time {format_duration(context.elapsed_s)}",
        f"- Machine: {machine_description()}. These 2 cores run everything: wrk, rl-gateway, "
        "demo-upstream, redis-server, the loopback network stack, and whatever else runs on "
        "this VM at the time; Pinning says who gets which. A gateway with cores of its own, "
        "and the load generator elsewhere, would do better than this",
        f"- Versions: rl-gateway {context.gateway_version} and demo-upstream (release builds, "
        f"{context.rustc_version}) and the module, from commit {git_commit()} (plus any "
        f"uncommitted work in the tree); redis-server {context.redis_version}; wrk "
        f"{context.wrk_version} (Debian)",
        f"- Load: `wrk -t {settings.threads} {{{connections}}} -d {settings.duration_s}s --timeout "
        f"{WRK_TIMEOUT} --latency http://127.0.0.1:PORT/` (PORT{quota.HOT_PATH} for (i) and (j); "
        f"`-s cold-key.lua http://127.0.0.1:PORT{quota.COLD_PATH} -- PREFIX` for (k) and (l), "
        "and to PORT/ for (m); closed loop: each connection sends its "
        "next request when the previous answer is in, keep-alive); "
        f"{settings.rounds} interleaved rounds, every scenario at every connection count once per "
        "round, the order rotated each round, after an unmeasured "
        f"{settings.warmup_s} s warm-up of every scenario at -c {max(settings.connections)}",
        f"- Pinning: {context.pinning.description}",
        f"- Load from other processes during the measured runs: {other_load_summary(measurements)} "
        "(the machine is shared with other work; this is the main source of noise). A run "
        f"during which they used {NOISY_OTHER_CPUS} CPU or more is repeated once at the end of "
        f"its round and the quieter of the two counts: {repeats_summary(measurements)}",
        "- Servers, all on loopback and started by the script: redis-server --save '' --appendonly "
        f"no --loadmodule libredis_ratelimit.so; demo-upstream (answers 200 with an echo of the "
        "request, about 100 bytes); rl-gateway instances in mode = \"proxy\", "
        f"trusted_proxies = [], deadline_ms = {DEADLINE_MS}, the breaker's defaults (5 failures, "
        "1000 ms open) and one [default] rule keyed by the client IP: "
        f"limits = [\"{ALLOW_LIMIT}\"] for (b) and (d), so every request is allowed after one "
        f"RL.HIT, and limits = [\"{DENY_LIMIT}\"] for (c), so every request but the first two "
        "is answered 429 from the deny cache without Redis; for (i) to (l) two more, each with "
        f"{quota.describe_rules(ALLOW_LIMIT, settings.local_quota)}. Their limit is (b)'s and (g)'s: nothing is denied, "
        f"and a batch may grow to {quota.MAX_BATCH_PERCENT}% of it",
        f"- nginx {context.nginx_version} (Debian's nginx-light), started by the script as one "
        "process (daemon off, master_process off, worker_processes 1), pinned with the servers, "
        "no access log, refusals not logged, X-Forwarded-For appended as the gateway does; "
        "limit_req keyed by $binary_remote_addr as the gateway's rule is by the client IP. (e) "
        "is proxy_pass as it comes: HTTP/1.0 and a new connection to the upstream for every "
        "request (the upstream's accept and close are in its CPU). (f) to (h) go through an "
        "upstream block with `keepalive 64` and HTTP/1.1, as the gateway pools its upstream "
        f"connections. (g): rate={NGINX_ALLOW_RATE} burst={NGINX_ALLOW_BURST} nodelay, "
        f"{ALLOW_LIMIT} in nginx's units (it counts time in ms, so without a burst the second "
        f"request of a ms is refused). (h): rate={NGINX_DENY_RATE}, nginx's lowest rate, for "
        f"the gateway's {DENY_LIMIT}: every request after the first is a 429. (m): (g)'s "
        f"limit_req keyed by {NGINX_COLD_KEY} in a "
        f"{NGINX_COLD_ZONE} zone, with wrk's Lua sending a new {quota.COLD_HEADER} on every "
        "request as for (k) and (l)"
        + (f"\n- (b0): a third rl-gateway, {context.baseline_label}, with (b)'s "
           "configuration "
           "(its own key prefix), in the same rounds" if context.baseline_gateway else ""),
        "- (d): redis-server is frozen with SIGSTOP for the whole run and continued after it. "
        f"The first requests wait out the {DEADLINE_MS} ms deadline until 5 failures open the "
        "breaker; then decisions fail open at once, and one probe a second waits the deadline "
        "again (the timeouts in the table: the first requests in flight plus one a second)",
        "- wrk corrects its latencies for coordinated omission: for a response that took more "
        "than twice a connection's mean interval between requests, it adds the samples that the "
        "connection would have sent meanwhile, had it not waited. So a rare stall shows in the "
        f"percentiles at its true weight for an open-loop load; in (d) at -c 1 every {DEADLINE_MS} "
        "ms wait of a probe stalls the only connection and becomes dozens of samples between "
        "0.1 and 5 ms, which can move p99 there",
        "",
        "## Requests per second and latency",
        "",
        "requests/s, p50 and p99 (wrk's latency distribution) are medians over the rounds. "
        "× upstream alone, added p50 and added p99: the median over rounds of the scenario's "
        "figure against (a)'s at the same connection count in the same round (a ratio, or a "
        "difference in ms), the lowest and highest round in brackets. Latency in a closed loop "
        "includes the wait in every queue on the way, so at a connection count that saturates "
        "the CPUs it grows with the connections and the added latency says as much about the "
        "throughput as about the path. non-2xx and socket errors: summed over the rounds. How "
        "the gateway decided: its own counters (/metrics) over the rounds.",
        "",
    ]
    lines += result_table(measurements, settings)
    lines += ["", targets_line(measurements, settings), ""]
    queueing = queueing_line(measurements, settings)
    if queueing:
        lines += [queueing, ""]
    lines += [
        "## Where the CPU went",
        "",
        "CPU time (user + system, /proc/PID/stat) used per request during the runs, medians over "
        "the rounds; rl-gateway counts both instances (the idle one costs nothing). The system "
        "time includes the loopback TCP stack's work for the process's sockets (the kernel "
        "charges that softirq time to the process it interrupts). 1,000,000 divided by a process's "
        "µs/req is about the requests/s it could serve with one CPU to itself. Other load: the "
        "machine's busy time (/proc/stat) less that of the benchmark's processes and of this "
        "script, in CPUs on average over the run: other work on this shared machine.",
        "",
    ]
    lines += cpu_table(measurements, settings)
    lines += [
        "",
        "## rl-gateway against nginx",
        "",
        "CPU µs per request, the median over rounds of the ratio between two scenarios in the "
        "same round (lowest and highest round in brackets); + Redis: the redis-server's CPU "
        "during the gateway's run counted with the gateway's (nginx has no Redis). Below 1, the "
        "gateway uses less CPU per request.",
        "",
    ]
    lines += comparison_table(measurements, settings)
    lines += ["", cpu_target_line(measurements, settings), ""]
    lines += local_quota_section(measurements, settings)
    notes = odd_things(measurements)
    lines += ["", "## Anything odd", ""]
    lines += [f"- {note}" for note in notes] or [
        "- Nothing: no wrk socket errors or timeouts, no non-2xx answer outside (c), no upstream "
        "error, and in (b) and (i) to (l) every request was allowed (in (b) and (i), by Redis)."]
    return "\n".join(lines) + "\n"



# ----------------------------------------------------------------------------------------
# Prerequisites


def ensure_wrk() -> Optional[str]:
    """None when wrk is there (installed now if it may be), else what to do about it."""
    if shutil.which("wrk") is not None:
        return None
    command = ["apt-get", "install", "-y", "wrk"]
    unattended = os.environ.get("CI", "").lower() in ("true", "1", "yes")
    if os.geteuid() != 0 or not unattended:
        return ("wrk is not installed. Install it with\n    sudo apt-get install -y wrk\n"
                "(or run this script as root with CI=true to let it do so)")
    environment = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    log("wrk is not installed; " + " ".join(command))
    if subprocess.run(command, stdin=subprocess.DEVNULL, env=environment).returncode != 0:
        # A machine whose package lists were never fetched finds nothing: fetch them once.
        subprocess.run(["apt-get", "update"], stdin=subprocess.DEVNULL, env=environment)
        subprocess.run(command, stdin=subprocess.DEVNULL, env=environment)
    if shutil.which("wrk") is None:
        return "apt-get could not install wrk"
    return None


def nginx_binary() -> Optional[str]:
    """Debian's nginx is in /usr/sbin, which a user's PATH may lack."""
    found = shutil.which("nginx")
    if found:
        return found
    return next((p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)),
                None)


def missing_prerequisite(baseline_gateway: Optional[Path]) -> Optional[str]:
    for path in (MODULE, GATEWAY, UPSTREAM):
        if not path.exists():
            return f"no {path}; build it first (make build)"
    if baseline_gateway is not None and not baseline_gateway.exists():
        return f"no {baseline_gateway} (--baseline-gateway)"
    if shutil.which("redis-server") is None:
        return "redis-server is not on the PATH (make setup installs it)"
    if nginx_binary() is None:
        return "nginx is not installed (make setup installs nginx-light)"
    return ensure_wrk()


# ----------------------------------------------------------------------------------------
# Main


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where the Markdown goes")
    parser.add_argument("--threads", type=int,
                        help="wrk -t (default: 1 when wrk has a CPU of its own, else 2)")
    parser.add_argument("--connections", default="32,8,1",
                        help="wrk -c, one or more, comma-separated (default 32,8,1)")
    parser.add_argument("--duration", type=int, default=6, help="seconds per measured run (default 6)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--warmup", type=int, default=2, help="seconds of warm-up per scenario (default 2)")
    parser.add_argument("--budget-minutes", type=float, default=18.0,
                        help="no repeat of a noisy run starts if it, and the rounds still to "
                             "come, would end later than this after the start (default 18)")
    parser.add_argument("--pin", choices=PINNINGS, default="split",
                        help="split (default): wrk on the last CPU, the servers on the first; "
                             "wrk: only wrk pinned; none: nothing pinned")
    parser.add_argument("--baseline-gateway", type=Path, metavar="PATH",
                        help="also run (b) through this rl-gateway binary, built from another "
                             "commit, in the same rounds: (b0)")
    parser.add_argument("--baseline-label", metavar="TEXT",
                        help="what the report calls the --baseline-gateway binary, e.g. the "
                             "commit it was built from (default: its path)")
    parser.add_argument("--without-local-quota", action="store_true",
                        help="run (j) and (l) without local_quota: their instance then is "
                             "(i)'s and (k)'s twin, an A/A run that shows how far two identical "
                             "instances differ on this machine")
    parser.add_argument("--quick", action="store_true",
                        help="smoke-test the script: 1 round of 2 s runs, 1 s warm-up")
    return parser.parse_args()


def settings_from(arguments: argparse.Namespace, pinning: Pinning) -> Settings:
    connections = [int(c) for c in arguments.connections.split(",") if c.strip()]
    # Two wrk threads on one CPU take turns, and a response that arrives while its thread
    # waits for the CPU is timed late: with a CPU of its own, wrk runs one thread.
    threads = arguments.threads or (1 if pinning.wrk else 2)
    local_quota = not arguments.without_local_quota
    if arguments.quick:
        return Settings(threads, connections, 2, 1, 1, arguments.budget_minutes * 60, local_quota)
    return Settings(threads, connections, arguments.duration, arguments.rounds,
                    arguments.warmup, arguments.budget_minutes * 60, local_quota)



def main() -> int:
    arguments = parse_arguments()
    stop_on_signals()
    started = time.monotonic()
    started_at = datetime.datetime.now(datetime.timezone.utc)
    baseline_gateway = arguments.baseline_gateway.resolve() if arguments.baseline_gateway else None
    problem = missing_prerequisite(baseline_gateway)
    if problem is not None:
        log(problem)
        return 1
    pinning = choose_pinning(arguments.pin)
    settings = settings_from(arguments, pinning)
    log(f"pinning: {pinning.description}; wrk -t {settings.threads}")
    redis_version = tool_version(["redis-server", "--version"], r"v=(\S+)")
    wrk_version = tool_version(["wrk", "--version"], r"wrk (\S+)")
    gateway_version = re.search(r'^version = "([^"]+)"', (REPO_DIR / "gateway" / "Cargo.toml").read_text(),
                                re.MULTILINE)
    rustc_version = tool_version(["rustc", "--version"], r"(rustc \S+)")
    nginx = nginx_binary() or "nginx"
    nginx_version = tool_version([nginx, "-v"], r"nginx/(\S+)")
    if baseline_gateway is not None:
        SCENARIOS.insert(SCENARIOS.index(THROUGH_REDIS) + 1, BASELINE_GATEWAY)

    processes = Processes()
    workdir = Path(tempfile.mkdtemp(prefix="rl-gateway-bench-"))
    try:
        servers = start_servers(processes, workdir, pinning, nginx, baseline_gateway,
                                settings.local_quota)
        warm_up(processes, pinning, servers, settings)
        measurements = measure(processes, pinning, servers, settings, started)
    except RuntimeError as error:
        log(f"failed: {error}")
        for name in ("rl-gateway-allow", "rl-gateway-deny", "rl-gateway-baseline", "nginx",
                     "nginx-error", "demo-upstream", "redis-server"):
            tail = log_tail(workdir / f"{name}.log", 1000).strip()
            if tail and tail != "(no log)":
                log(f"--- the end of {name}'s log:\n{tail}")
        return 1
    finally:
        processes.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)

    context = Context(started_at, time.monotonic() - started, pinning, redis_version, wrk_version,
                      gateway_version.group(1) if gateway_version else "unknown", rustc_version,
                      nginx_version, baseline_gateway,
                      arguments.baseline_label or (shown_path(baseline_gateway)
                                                   if baseline_gateway else ""))
    text = report(measurements, settings, context)
    print(text)
    arguments.output.write_text(text)
    log(f"wrote {arguments.output}; total run time {format_duration(context.elapsed_s)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
