"""What the reports say besides their figures: the machine, the commit, formatting; and the
progress log on stderr."""

import os
import subprocess
import sys
from pathlib import Path

from . import REPO_DIR

# The line each results file's generated header carries: the analysis of the results is
# written by hand in bench/README.md, never in a results file (a run rewrites the whole file).
README_LINK = ("What this measures, how to run it and the analysis of these results: "
               "[bench/README.md](README.md).")


def machine_description() -> str:
    models = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
              if line.startswith("model name")]
    memory_kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal:"))
    return (f"{len(os.sched_getaffinity(0))} CPUs (nproc; /proc/cpuinfo lists {len(models)} "
            f"× {models[0] if models else 'unknown CPU'}), {memory_kib / 1024 / 1024:.1f} GiB RAM, "
            f"Linux {os.uname().release}")


def git_commit() -> str:
    # rev-parse only reads: nothing here may change the repository's state.
    result = subprocess.run(["git", "-C", str(REPO_DIR), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True)
    return result.stdout.strip() or "unknown"


def markdown_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").strip()


def format_duration(seconds: float) -> str:
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes}m {rest:02d}s"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
