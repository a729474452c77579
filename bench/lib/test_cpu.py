import os
import resource
import unittest

from .cpu import (CpuSnapshot, cpus_for_pinning, machine_busy_seconds, process_cpu_seconds,
                  rusage_cpu_seconds, server_cpu_seconds, taskset_prefix)


def spin(seconds: float) -> None:
    end = resource.getrusage(resource.RUSAGE_SELF).ru_utime + seconds
    while resource.getrusage(resource.RUSAGE_SELF).ru_utime < end:
        pass


class CpuSecondsTest(unittest.TestCase):
    def test_process_cpu_seconds_follows_this_process(self):
        before = process_cpu_seconds(os.getpid())
        spin(0.05)
        used = process_cpu_seconds(os.getpid()) - before
        # /proc counts in clock ticks (10 ms at 100 Hz).
        self.assertGreater(used, 0.02)
        self.assertAlmostEqual(process_cpu_seconds(os.getpid()),
                               rusage_cpu_seconds(resource.RUSAGE_SELF), delta=0.05)

    def test_rusage_adds_up(self):
        both = rusage_cpu_seconds(resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        self.assertGreaterEqual(both, rusage_cpu_seconds(resource.RUSAGE_SELF))

    def test_machine_busy_seconds_grows(self):
        before = machine_busy_seconds()
        spin(0.03)
        self.assertGreater(machine_busy_seconds(), before)

    def test_server_cpu_seconds(self):
        self.assertAlmostEqual(server_cpu_seconds(
            {"used_cpu_user": "1.25", "used_cpu_sys": "0.5", "used_cpu_sys_children": "9"}), 1.75)


class CpuSnapshotTest(unittest.TestCase):
    def test_used_and_other_cpus(self):
        before = CpuSnapshot(wall=10.0, machine=100.0, processes={"server": 1.0, "own": 2.0})
        after = CpuSnapshot(wall=12.0, machine=103.0, processes={"server": 2.0, "own": 2.5})
        self.assertEqual(after.used_since(before), {"server": 1.0, "own": 0.5})
        # 3 s of machine time, 1.5 of it ours, over 2 s of wall time: 0.75 CPU for others.
        self.assertAlmostEqual(after.other_cpus_since(before), 0.75)

    def test_other_cpus_never_negative(self):
        before = CpuSnapshot(0.0, 0.0, {"a": 0.0})
        after = CpuSnapshot(1.0, 0.5, {"a": 1.0})
        self.assertEqual(after.other_cpus_since(before), 0.0)

    def test_take_reads_every_role(self):
        snapshot = CpuSnapshot.take({"a": lambda: 1.5, "b": lambda: 2.0})
        self.assertEqual(snapshot.processes, {"a": 1.5, "b": 2.0})
        self.assertGreater(snapshot.machine, 0.0)


class PinningTest(unittest.TestCase):
    def test_taskset_prefix(self):
        self.assertEqual(taskset_prefix(3), ["taskset", "-c", "3"])

    def test_cpus_or_a_reason(self):
        cpus, problem = cpus_for_pinning()
        if problem is None:
            self.assertGreaterEqual(len(cpus), 2)
            self.assertEqual(cpus, sorted(os.sched_getaffinity(0)))
        else:
            self.assertEqual(cpus, [])


if __name__ == "__main__":
    unittest.main()
