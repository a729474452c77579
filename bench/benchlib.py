"""What the benchmark scripts share: starting and stopping processes by pid, the
machine's description and busy time, the commit, signals and report formatting.
Python 3 standard library only; imported by run.py, gateway.py and cluster.py, which run
from this folder (`python3 bench/<script>.py`)."""

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import List

REPO_DIR = Path(__file__).resolve().parent.parent


class Processes:
    """The processes this script started; stop_all() ends each one by its pid."""

    def __init__(self) -> None:
        self.running: List[subprocess.Popen] = []

    def start(self, command: List[str], **popen_args) -> subprocess.Popen:
        # A session of its own keeps Ctrl-C away from the child: the script stops it itself,
        # from its finally block.
        process = subprocess.Popen(command, start_new_session=True, **popen_args)
        self.running.append(process)
        return process

    def stop(self, process: subprocess.Popen) -> None:
        if process.poll() is None:
            # A process frozen by SIGSTOP would hold SIGTERM pending until it is continued.
            send_signal(process, signal.SIGCONT)
            process.terminate()  # SIGTERM to this pid only
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process in self.running:
            self.running.remove(process)

    def stop_all(self) -> None:
        # The newest first: wrk and the gateways before the upstream and Redis they use.
        for process in list(reversed(self.running)):
            self.stop(process)


def send_signal(process: subprocess.Popen, signum: int) -> None:
    if process.poll() is None:
        try:
            os.kill(process.pid, signum)
        except ProcessLookupError:
            pass


def machine_busy_seconds() -> float:
    """Busy CPU time of the whole machine, all CPUs (steal included: it is lost to us too).
    The loopback network stack's softirq time is in it and also, as system time, in the
    processes whose sockets it served: on this kernel the two add up to the machine's total."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


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


def stop_on_signals() -> None:
    """SIGINT and SIGTERM unwind through the finally blocks, which stop the processes.

    SIGINT is set explicitly because Python leaves it ignored when the script starts in the
    background of a shell, and then Ctrl-C or `kill -INT` would do nothing.
    """
    def raise_exit(signum, frame):
        log(f"stopping on signal {signum}")
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, raise_exit)
    signal.signal(signal.SIGINT, raise_exit)
