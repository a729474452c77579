"""The exact log on a full key: one RL.HIT log key filled with one entry per distinct ms,
and the Lua sorted-set log (bench/lua/sliding_log.lua) filled by the same loop, so with the
same entries, one call each per ms. Then RL.HIT, RL.PEEK and the script are called on them
in turn (all denied: the keys are full, so every call sees the same state) and the server's
own time per call is read from INFO commandstats. A key of 10 entries (limit 10) and one of
10,000 (limit 10,000) show whether the cost grows with the log.

Used by run.py; Python 3 standard library only.
"""

import time
from typing import Dict, List, Tuple

WINDOW = "1h"
WINDOW_MS = 3_600_000
SIZES = (10, 10_000)
QUICK_SIZES = (10, 300)
CALLS = 3_000
QUICK_CALLS = 200


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def fill(connection, sha: str, size: int) -> Tuple[str, str]:
    """Fills a log key and a sorted-set key with `size` hits, each pair in its own ms."""
    log_key, zset_key = f"full:log:{size}", f"full:zset:{size}"
    for _ in range(size):
        connection.call("RL.HIT", log_key, str(size), WINDOW, "ALGO", "log")
        connection.call("EVALSHA", sha, "1", zset_key, str(size), str(WINDOW_MS), "1")
        # The next pair must be logged at a later ms than this one: the replies came back
        # by `done`, so a call sent after the clock passed it runs later.
        done = now_ms()
        while now_ms() <= done:
            pass
    return log_key, zset_key


def usec_per_call(connection) -> Dict[str, float]:
    # Module commands are listed as registered (cmdstat_RL.HIT), the server's in lower case.
    stats = {name.lower(): value for name, value in connection.info("commandstats").items()}
    per_call = {}
    for name in ("rl.hit", "rl.peek", "rl.refund", "evalsha"):
        line = stats.get(f"cmdstat_{name}", "")
        fields = dict(part.split("=", 1) for part in line.split(",") if "=" in part)
        per_call[name] = float(fields.get("usec_per_call", "nan"))
    return per_call


def allowed_on_full_log(connection, log_key: str, size: int, calls: int) -> Dict[str, float]:
    """Server µs per allowed RL.HIT on the full log of `size` entries: each round gives one
    unit back (RL.REFUND keeps the newest entry as a marker, so the log keeps its length)
    and then takes it again, allowed, which rewrites the whole value."""
    args = [log_key, str(size), WINDOW, "ALGO", "log"]
    connection.call("RL.REFUND", *args)
    connection.call("CONFIG", "RESETSTAT")
    for _ in range(calls):
        reply = connection.call("RL.HIT", *args)
        if not isinstance(reply, list) or reply[0] != 1:
            raise RuntimeError(f"a hit after a refund was not allowed: {reply}")
        connection.call("RL.REFUND", *args)
    per_call = usec_per_call(connection)
    connection.call("RL.HIT", *args)
    return per_call


def measure(connection, sha: str, size: int, calls: int) -> List[str]:
    log_key, zset_key = fill(connection, sha, size)
    entries = connection.call("ZCARD", zset_key)
    log_bytes = connection.call("STRLEN", log_key)
    log_memory = connection.call("MEMORY", "USAGE", log_key)
    zset_memory = connection.call("MEMORY", "USAGE", zset_key)
    connection.call("CONFIG", "RESETSTAT")
    for _ in range(calls):
        connection.call("RL.HIT", log_key, str(size), WINDOW, "ALGO", "log")
        connection.call("RL.PEEK", log_key, str(size), WINDOW, "ALGO", "log")
        connection.call("EVALSHA", sha, "1", zset_key, str(size), str(WINDOW_MS), "1")
    per_call = usec_per_call(connection)
    allowed = allowed_on_full_log(connection, log_key, size, calls)
    return [f"| {size:,} ({entries:,} in the sorted set) | {per_call['rl.hit']:.2f} | "
            f"{allowed['rl.hit']:.2f} | {allowed['rl.refund']:.2f} | "
            f"{per_call['rl.peek']:.2f} | {per_call['evalsha']:.2f} | {log_bytes:,} | "
            f"{log_memory:,} | {zset_memory:,} |"]


def section(connection, shas: Dict[str, str], quick: bool) -> List[str]:
    """The report's section: how it was measured, then one row per log size."""
    sha = shas.get("sliding_log.lua")
    sizes, calls = (QUICK_SIZES, QUICK_CALLS) if quick else (SIZES, CALLS)
    lines = [
        "## The exact log on a full key",
        "",
        f"One key per size filled with one RL.HIT per distinct ms (limit = the size, per "
        f"{WINDOW}, ALGO log), and the Lua sorted-set log filled in the same loop, so with "
        f"the same entries. Then {calls:,} rounds of RL.HIT, RL.PEEK and the script on them, "
        "all denied (the keys are full). Then, on the same full log, "
        f"{calls:,} rounds of RL.REFUND of one unit and an RL.HIT that takes it again, "
        "allowed, so that each allowed hit rewrites a log of the full length. "
        "µs: the server's own time per call (INFO "
        "commandstats usec_per_call, after CONFIG RESETSTAT), without the network. Memory: "
        "MEMORY USAGE of the key.",
        "",
        "| log entries | RL.HIT denied µs | RL.HIT allowed µs | RL.REFUND µs | RL.PEEK µs | "
        "Lua sorted-set log µs | log value bytes | log key memory | sorted-set key memory |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    if sha is None:
        return lines + ["| n/a (bench/lua/sliding_log.lua not loaded) | | | | | | | | |"]
    for size in sizes:
        try:
            lines += measure(connection, sha, size, calls)
        except Exception as error:  # a failing command is reported, not fatal to the run
            lines.append(f"| {size:,} | n/a ({error}) | | | | | | | |")
    return lines
