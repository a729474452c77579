"""Running `grpc-load` (gateway/src/bin/grpc-load.rs), the load generator of the gateway's
gRPC and check-mode benchmarks, and reading the one line it prints."""

import subprocess
from pathlib import Path
from typing import Dict, List


def run_load(load: Path, args: List[str]) -> Dict[str, float]:
    """`load args...`: its `calls=.. seconds=.. p50_us=.. p99_us=.. errors=..` as numbers."""
    out = subprocess.run([str(load)] + args, capture_output=True, text=True, check=True).stdout
    return {k: float(v) for k, v in (item.split("=") for item in out.split())}
