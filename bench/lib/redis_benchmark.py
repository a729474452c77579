"""The output of redis-benchmark (7.0), in the two forms the scripts ask for:

    --csv (bench/run.py; with -q too in bench/instructions.py): a header line, then one
        quoted line per test: "test","rps","avg_latency_ms","min_latency_ms",
        "p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    -q (bench/cluster.py, with or without --cluster): progress lines ended by \\r, then
        "<test>: 139860.14 requests per second, p50=4.327 msec"

The scripts read stdout and stderr together; an error reply stops redis-benchmark at once
with "Error from server: ..." before any result."""

import csv
import io
import re
from typing import List, NamedTuple, Optional

QUIET_RESULT = re.compile(r"([\d.]+) requests per second")
SERVER_ERROR = "Error from server"


class CsvResult(NamedTuple):
    rps: float
    p50_ms: Optional[float]  # None from a redis-benchmark without the latency columns
    p99_ms: Optional[float]


def parse_csv(output: str) -> CsvResult:
    """rps, p50 and p99 (ms) of the last test in redis-benchmark --csv output."""
    # Only the CSV lines: warnings or an error message may surround them.
    lines = [line for line in output.splitlines() if line.startswith('"')]
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    if not rows:
        raise RuntimeError(f"no CSV result in redis-benchmark output: {output.strip()[-300:]!r}")
    last = rows[-1]

    def column(name: str) -> Optional[float]:
        return float(last[name]) if last.get(name) else None

    return CsvResult(float(last["rps"]), column("p50_latency_ms"), column("p99_latency_ms"))


def parse_quiet(output: str) -> Optional[float]:
    """Requests per second of the last test in redis-benchmark -q output; None when there is
    no result (the progress lines' "rps=" figures are not results)."""
    found = QUIET_RESULT.findall(output)
    return float(found[-1]) if found else None


def server_errors(output: str) -> List[str]:
    """The "Error from server: ..." lines: the first error reply stops redis-benchmark."""
    return [line for line in output.splitlines() if SERVER_ERROR in line]
