"""The output of `wrk --latency` (wrk 4.x), as bench/gateway.py reads it."""

import re
from typing import Dict, NamedTuple

# wrk prints a duration with the largest unit that keeps it at 1 or more: 211.00us, 4.64ms,
# 1.14s (then a space where "ms" would have a letter more), and m or h for longer ones.
UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}
LATENCY_LINE = re.compile(r"^\s*(50|99)(?:\.0+)?%\s+([\d.]+)(us|ms|s|m|h)\s*$", re.MULTILINE)
RPS_LINE = re.compile(r"^Requests/sec:\s+([\d.]+)", re.MULTILINE)
REQUESTS_LINE = re.compile(r"^\s*(\d+) requests in ", re.MULTILINE)
NON_2XX_LINE = re.compile(r"Non-2xx or 3xx responses:\s+(\d+)")
SOCKET_ERRORS_LINE = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")
SOCKET_ERROR_KINDS = ("connect", "read", "write", "timeout")


class WrkSummary(NamedTuple):
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    non_2xx: int  # responses with a status outside 2xx and 3xx
    socket_errors: Dict[str, int]  # by kind; empty when wrk printed no such line (no error)


def parse_wrk(output: str) -> WrkSummary:
    """requests/s, p50 and p99 in ms, requests, non-2xx/3xx responses and socket errors from
    the output of `wrk --latency`; RuntimeError when a figure the report needs is missing."""
    rps = RPS_LINE.search(output)
    requests = REQUESTS_LINE.search(output)
    latencies = {int(m.group(1)): float(m.group(2)) * UNIT_MS[m.group(3)]
                 for m in LATENCY_LINE.finditer(output)}
    if rps is None or requests is None or 50 not in latencies or 99 not in latencies:
        raise RuntimeError(f"cannot read the wrk output: {output.strip()[-600:]!r}")
    non_2xx = NON_2XX_LINE.search(output)
    socket_errors = SOCKET_ERRORS_LINE.search(output)
    errors = dict(zip(SOCKET_ERROR_KINDS, (int(n) for n in socket_errors.groups()))) \
        if socket_errors else {}
    return WrkSummary(float(rps.group(1)), latencies[50], latencies[99], int(requests.group(1)),
                      int(non_2xx.group(1)) if non_2xx else 0, errors)
