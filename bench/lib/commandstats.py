"""The rate-limit commands a Redis server has run, from INFO commandstats.

A benchmark reads the counts before and after a run: their difference over the requests of
the run is the Redis commands per request a client of the module (or of the Functions
library) costs, whatever it batches, pipelines or gives back."""

from typing import Dict, Mapping

# The module's commands are listed as registered (cmdstat_RL.HIT on Redis 7.0), the server's
# own in lower case; the Functions library's calls all come in through FCALL and FCALL_RO.
MODULE_PREFIX = "cmdstat_rl."
LIBRARY_COMMANDS = ("cmdstat_fcall", "cmdstat_fcall_ro")


def calls_of(value: str) -> int:
    """`calls` of one cmdstat line's value: calls=12,usec=34,usec_per_call=2.83,..."""
    for part in value.split(","):
        name, _, number = part.partition("=")
        if name == "calls":
            return int(number)
    raise ValueError(f"no calls= in the commandstats line {value!r}")


def ratelimit_calls(fields: Mapping[str, str]) -> Dict[str, int]:
    """Calls by command (lower case, without cmdstat_) of the module's commands and of FCALL,
    from INFO commandstats as lib/resp.py's `Connection.info` returns it."""
    calls = {}
    for name, value in fields.items():
        lowered = name.lower()
        if lowered.startswith(MODULE_PREFIX) or lowered in LIBRARY_COMMANDS:
            calls[lowered[len("cmdstat_"):]] = calls_of(value)
    return calls


def calls_between(before: Mapping[str, int], after: Mapping[str, int]) -> Dict[str, int]:
    """What each command ran between two readings of `ratelimit_calls`; a command first run
    in between counts from zero, and one that is gone (CONFIG RESETSTAT) counts nothing."""
    return {name: count - before.get(name, 0) for name, count in after.items()
            if count > before.get(name, 0)}
