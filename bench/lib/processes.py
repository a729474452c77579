"""Starting and stopping the processes a benchmark runs: each one is tracked and stopped by
its pid (never by name: other work on this machine may run the same programs)."""

import os
import signal
import subprocess
from typing import List

from .report import log


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
        # The newest first: the load generators and proxies before the servers they use.
        for process in list(reversed(self.running)):
            self.stop(process)


def send_signal(process: subprocess.Popen, signum: int) -> None:
    if process.poll() is None:
        try:
            os.kill(process.pid, signum)
        except ProcessLookupError:
            pass


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
