"""What the benchmark scripts in bench/ share.

The scripts run as `python3 bench/<script>.py`, which puts bench/ first on sys.path, so they
import this package as `lib` (`from lib.net import free_port`). Modules here import each
other relatively, so that the unit tests can also load them as `bench.lib`.

    net              free loopback ports
    resp             a minimal RESP2 client for setup and checks (the load comes from tools)
    cpu              CPU seconds of processes and of the machine; taskset pinning
    rounds           the order of the units in interleaved rounds
    processes        starting and stopping processes by pid; signals
    report           the machine's description, the commit, formatting, logging
    wrk              the output of `wrk --latency`
    redis_benchmark  the output of redis-benchmark (--csv and -q)

Python 3 standard library only.
"""

from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent.parent
REPO_DIR = BENCH_DIR.parent
