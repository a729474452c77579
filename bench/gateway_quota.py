"""The local-quota rows of bench/gateway.py: what they configure, and their part of the report.

Two more rl-gateway instances run the same two rules, one of them with `local_quota = true`:

    hot   path /hot/**,  key = "global": one key for every request, so that the gateway with
          local quota takes its units from Redis in batches (RL.TAKE ... UPTO n) and decides
          most requests in memory
    cold  path /cold/**, key = "header:X-User", with a new X-User on every request (wrk runs
          COLD_KEY_SCRIPT): no key is seen twice, so every request is a batch of one, as
          expensive as a request without local quota can be

Not a script: bench/gateway.py imports it. It imports nothing of gateway.py's; the report
functions take the measurements as gateway.py keeps them (results[(scenario key,
connections)][round] with the WrkResult fields they name) and a function for the CPU ratios.
"""

import statistics
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

HOT_PATH = "/hot/"
COLD_PATH = "/cold/"
COLD_HEADER = "X-User"
ALGORITHM = "fixed"

# The [local_quota] section, written out with the defaults so that the report can say them.
INTERVAL_MS = 20
HOLD_MS = 100
MAX_BATCH_PERCENT = 1

# After a local-quota run the gateway still holds units: its sweeper gives them back with
# RL.REFUND once the key has been idle for hold_ms (it looks every 10 ms). Waiting three
# times that before reading INFO commandstats counts those refunds with the run.
SETTLE_S = 3 * HOLD_MS / 1000

# The targets for the hot key at -c 32.
TARGET_CPU_RATIO = 1.25  # (gateway + Redis) per allowed request over nginx limit_req's
TARGET_COMMANDS = 0.05  # Redis rate-limit commands per allowed request
TARGET_CONNECTIONS_CPU = 32
TARGET_CONNECTIONS_LATENCY = 8  # p99 no worse than today's gateway

# wrk's Lua (wrk 4.x): every request carries another X-User. A thread's values start with
# the run's own prefix (the first argument after --) and the thread's number, so that no
# two requests of a run, nor of two runs, share a key.
COLD_KEY_SCRIPT = """-- Written by bench/gateway.py for one run: a new X-User on every request.
local thread_count = 0
function setup(thread)
  thread_count = thread_count + 1
  thread:set("thread_number", thread_count)
end
local prefix = ""
local sent = 0
function init(args)
  prefix = (args[1] or "run") .. "." .. tostring(thread_number) .. "."
end
function request()
  sent = sent + 1
  wrk.headers["%s"] = prefix .. sent
  return wrk.format()
end
""" % COLD_HEADER


def write_cold_key_script(workdir: Path) -> Path:
    path = workdir / "cold-key.lua"
    path.write_text(COLD_KEY_SCRIPT)
    return path


def rules_toml(limit: str, local_quota: bool) -> str:
    """The hot and the cold rule, with or without local quota (and then its section)."""
    opt_in = "local_quota = true\n" if local_quota else ""
    section = ""
    if local_quota:
        section = (f"[local_quota]\ninterval_ms = {INTERVAL_MS}\nhold_ms = {HOLD_MS}\n"
                   f"max_batch_percent = {MAX_BATCH_PERCENT}\n\n")
    rules = [("hot", HOT_PATH, "global"), ("cold", COLD_PATH, f"header:{COLD_HEADER}")]
    return section + "\n".join(
        f'[[rule]]\nname = "{name}"\npath = "{path}**"\nkey = "{key}"\nlimits = ["{limit}"]\n'
        f'algorithm = "{ALGORITHM}"\n{opt_in}' for name, path, key in rules)


def describe_rules(limit: str, local_quota: bool) -> str:
    """The rules and the local quota's settings, as the report's header gives them."""
    if not local_quota:
        return (f"two rules on paths {HOT_PATH}** and {COLD_PATH}**, limits = [\"{limit}\"], "
                f"algorithm = \"{ALGORITHM}\", hot with key = \"global\", cold with key = "
                f"\"header:{COLD_HEADER}\" (a new value on every request); both instances "
                "WITHOUT local quota (--without-local-quota, an A/A run)")
    return (f"two rules on paths {HOT_PATH}** and {COLD_PATH}**, limits = [\"{limit}\"], "
            f"algorithm = \"{ALGORITHM}\": hot with key = \"global\" (one key for every "
            f"request), cold with key = \"header:{COLD_HEADER}\" and wrk's Lua setting a new "
            f"{COLD_HEADER} on every request (no key is seen twice). One instance has them as "
            "they are (today's gateway), the other with local_quota = true and [local_quota] "
            f"interval_ms = {INTERVAL_MS}, hold_ms = {HOLD_MS}, max_batch_percent = "
            f"{MAX_BATCH_PERCENT} (the defaults)")


# ----------------------------------------------------------------------------------------
# Redis commands per allowed request


def commands_per_allowed(result) -> Optional[float]:
    """The run's rate-limit commands (INFO commandstats) over its allowed requests."""
    if result.redis_calls is None or result.decisions is None:
        return None
    allowed = result.decisions.outcomes["allowed"]
    return sum(result.redis_calls.values()) / allowed if allowed else None


def commands_by_name(runs: Sequence) -> str:
    """Each command's calls per allowed request over the runs together, e.g. rl.take 0.0021."""
    allowed = sum(r.decisions.outcomes["allowed"] for r in runs if r.decisions)
    totals: Dict[str, int] = {}
    for run in runs:
        for name, count in (run.redis_calls or {}).items():
            totals[name] = totals.get(name, 0) + count
    if not allowed or not totals:
        return "none"
    return ", ".join(f"{name} {count / allowed:.4f}" for name, count in sorted(totals.items()))


def spread(values: List[float], digits: int) -> str:
    if not values:
        return "–"
    text = f"{statistics.median(values):.{digits}f}"
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return text + (f" ({low} to {high})" if low != high else "")


def commands_table(results: Mapping[Tuple[str, int], Mapping[int, object]],
                   scenarios: Sequence, connections: Sequence[int]) -> List[str]:
    """Every gateway row whose commands were counted: the median over rounds per connection
    count, and the commands by name over every run of the row."""
    lines = ["| scenario | " + " | ".join(f"-c {c}" for c in connections)
             + " | by command, all runs |", "|---|" + "---:|" * len(connections) + "---|"]
    for scenario in scenarios:
        runs = {c: list(results.get((scenario.key, c), {}).values()) for c in connections}
        per_conns = [[v for v in map(commands_per_allowed, runs[c]) if v is not None]
                     for c in connections]
        if not any(per_conns):
            continue
        every_run = [r for c in connections for r in runs[c] if r.redis_calls is not None]
        lines.append(f"| {scenario.name} | " + " | ".join(spread(v, 4) for v in per_conns)
                     + f" | {commands_by_name(every_run)} |")
    return lines


# ----------------------------------------------------------------------------------------
# CPU and latency against today's gateway and nginx

Results = Mapping[Tuple[str, int], Mapping[int, object]]
# ratio(mine, theirs, connections): per round in which both ran, mine's CPU per request
# (the gateway's and Redis's) over theirs's.
Ratio = Callable[[str, str, int], List[float]]

CPU_COMPARISONS = [
    ("(j) local quota + Redis / (g) nginx limit_req, hot key", "j", "g"),
    ("(i) today's gateway + Redis / (g) nginx limit_req, hot key", "i", "g"),
    ("(j) local quota / (i) today's gateway, each + Redis, hot key", "j", "i"),
    ("(l) local quota + Redis / (m) nginx limit_req, cold keys", "l", "m"),
    ("(k) today's gateway + Redis / (m) nginx limit_req, cold keys", "k", "m"),
    ("(l) local quota / (k) today's gateway, each + Redis, cold keys", "l", "k"),
    # What local quota can reach at best: the gateway when it makes no Redis call at all.
    ("(d) the gateway without any Redis call (breaker open) / (g) nginx limit_req", "d", "g"),
]
# The rows of the latency table, and the row each is paired with ("" for none).
LATENCY_ROWS = [("a", ""), ("i", ""), ("j", "i"), ("k", ""), ("l", "k")]


def cpu_table(ratio: Ratio, connections: Sequence[int]) -> List[str]:
    lines = ["| CPU µs per request, ratio | " + " | ".join(f"-c {c}" for c in connections)
             + " |", "|---|" + "---:|" * len(connections)]
    for name, mine, theirs in CPU_COMPARISONS:
        lines.append(f"| {name} | " + " | ".join(spread(ratio(mine, theirs, c), 2)
                                                 for c in connections) + " |")
    return lines


def paired(results: Results, key: str, other: str, connections: int,
           of: Callable[[object, object], float]) -> List[float]:
    own, theirs = results.get((key, connections), {}), results.get((other, connections), {})
    return [of(own[r], theirs[r]) for r in sorted(own) if r in theirs]


def latency_table(results: Results, names: Mapping[str, str],
                  connections: Sequence[int]) -> List[str]:
    """p50 and p99 of the upstream alone, today's gateway and local quota; the added p99
    against (a) and against today's gateway, paired by round."""
    lines = ["| scenario | conns | p50 ms | p99 ms | added p99 ms, against (a) | "
             "p99 against today's gateway, ms |", "|---|---:|---:|---:|---:|---:|"]
    for count in connections:
        for key, today in LATENCY_ROWS:
            runs = list(results.get((key, count), {}).values())
            if not runs:
                continue
            added = "–" if key == "a" else spread(
                paired(results, key, "a", count, lambda x, y: x.p99_ms - y.p99_ms), 3)
            against = spread(paired(results, key, today, count,
                                    lambda x, y: x.p99_ms - y.p99_ms), 3) if today else "–"
            lines.append(f"| {names[key]} | {count} | "
                         f"{statistics.median(r.p50_ms for r in runs):.3f} | "
                         f"{statistics.median(r.p99_ms for r in runs):.3f} | {added} | {against} |")
    return lines


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def targets_line(results: Results, ratio: Ratio) -> str:
    """The issue's three targets for the hot key, each with by how much it is met or missed."""
    parts = []
    cpu = ratio("j", "g", TARGET_CONNECTIONS_CPU)
    if cpu:
        value = statistics.median(cpu)
        parts.append(f"CPU per allowed request, gateway + Redis, at most {TARGET_CPU_RATIO:g}× "
                     f"nginx limit_req's at -c {TARGET_CONNECTIONS_CPU}: {value:.2f}× "
                     f"({verdict(value <= TARGET_CPU_RATIO)}, "
                     f"{100 * (value / TARGET_CPU_RATIO - 1):+.0f}% against the target)")
    commands = [v for v in map(commands_per_allowed,
                               results.get(("j", TARGET_CONNECTIONS_CPU), {}).values())
                if v is not None]
    if commands:
        value = statistics.median(commands)
        parts.append(f"Redis commands per allowed request at most {TARGET_COMMANDS:g} at -c "
                     f"{TARGET_CONNECTIONS_CPU}: {value:.4f} ({verdict(value <= TARGET_COMMANDS)})")
    latency = paired(results, "j", "i", TARGET_CONNECTIONS_LATENCY,
                     lambda x, y: x.p99_ms - y.p99_ms)
    if latency:
        value = statistics.median(latency)
        parts.append(f"p99 at -c {TARGET_CONNECTIONS_LATENCY} no worse than today's gateway "
                     f"(i): {value:+.3f} ms, the median over rounds of (j)'s p99 less (i)'s "
                     f"({min(latency):+.3f} to {max(latency):+.3f}; {verdict(value <= 0)})")
    return ("**Targets** for local quota on the hot key (j): " + "; ".join(parts) + "."
            if parts else "**Targets** for local quota: not measured, (j), (i) or (g) failed.")
