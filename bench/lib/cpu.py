"""CPU time: of a process, of this script and its children, of a Redis server, of the whole
machine; snapshots of them around a run; and pinning with taskset.

The machine is shared with other work, whose load is the main source of noise: a snapshot
before and after a run gives what each tracked process used and what everything else did."""

import os
import resource
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Tuple

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a running process, from /proc/<pid>/stat."""
    text = Path(f"/proc/{pid}/stat").read_text()
    # The command name (field 2) is in parentheses and may hold spaces or ")": the fields
    # are counted from the last ")". After it: state (3), ..., utime (14), stime (15).
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rusage_cpu_seconds(*who: int) -> float:
    """User + system time of resource.RUSAGE_SELF (this script) and/or RUSAGE_CHILDREN (its
    children that have finished and been waited for: redis-benchmark, wrk, redis-cli)."""
    total = 0.0
    for one in who:
        usage = resource.getrusage(one)
        total += usage.ru_utime + usage.ru_stime
    return total


def server_cpu_seconds(info_cpu: Mapping[str, str]) -> float:
    """A Redis or Valkey server's CPU seconds from its INFO cpu fields (user + sys of its
    main process, every thread)."""
    return float(info_cpu["used_cpu_user"]) + float(info_cpu["used_cpu_sys"])


def machine_busy_seconds() -> float:
    """Busy CPU time of the whole machine, all CPUs (steal included: it is lost to us too).
    The loopback network stack's softirq time is in it and also, as system time, in the
    processes whose sockets it served: on this kernel the two add up to the machine's total."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


@dataclass
class CpuSnapshot:
    """CPU seconds so far: the wall clock, the machine's busy time and each tracked
    process's (by name)."""

    wall: float
    machine: float
    processes: Dict[str, float]

    @staticmethod
    def take(readers: Mapping[str, Callable[[], float]]) -> "CpuSnapshot":
        processes = {name: read() for name, read in readers.items()}
        return CpuSnapshot(time.monotonic(), machine_busy_seconds(), processes)

    def used_since(self, before: "CpuSnapshot") -> Dict[str, float]:
        """CPU seconds each tracked process used between the snapshots."""
        return {name: self.processes[name] - before.processes[name] for name in self.processes}

    def other_cpus_since(self, before: "CpuSnapshot") -> float:
        """CPUs kept busy by processes other than the tracked ones, on average, between the
        snapshots."""
        others = (self.machine - before.machine) - sum(self.used_since(before).values())
        return max(0.0, others / max(self.wall - before.wall, 1e-9))


# ----------------------------------------------------------------------------------------
# Pinning with taskset


def taskset_prefix(cpu: int) -> List[str]:
    """The command prefix that runs a program on `cpu` only."""
    return ["taskset", "-c", str(cpu)]


def cpus_for_pinning() -> Tuple[List[int], Optional[str]]:
    """The CPUs this script may run on, sorted, and None; or no CPUs and why pinning is not
    possible here (no taskset, or fewer than 2 CPUs to split between servers and clients)."""
    if shutil.which("taskset") is None:
        return [], "taskset is not installed"
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return [], f"only {len(cpus)} CPU is available"
    return cpus, None


def taskset_failure(cpus: Iterable[int]) -> Optional[Tuple[int, str]]:
    """None when `taskset -c CPU true` works for each CPU (a container may forbid it); else
    the first CPU where it failed and taskset's message (or its exit status)."""
    for cpu in cpus:
        trial = subprocess.run(taskset_prefix(cpu) + ["true"], capture_output=True, text=True)
        if trial.returncode != 0:
            return cpu, trial.stderr.strip() or f"exit status {trial.returncode}"
    return None
