"""Free loopback ports for the servers a benchmark starts, and waiting for them to listen."""

import socket
import time
from typing import List

# A cluster node also listens on its port + 10000 (the cluster bus), so a node's port must
# leave room for that below 65536.
CLUSTER_BUS_OFFSET = 10_000
HIGHEST_CLUSTER_PORT = 55_000


def free_ports(count: int) -> List[int]:
    """Ports the kernel calls free right now, all different (they are held open together
    until all are chosen). The servers bind them a moment later; a port taken in between
    makes that server's start fail, so callers retry with fresh ports."""
    trials = []
    try:
        for _ in range(count):
            trial = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            trials.append(trial)
            trial.bind(("127.0.0.1", 0))
        return [trial.getsockname()[1] for trial in trials]
    finally:
        for trial in trials:
            trial.close()


def free_port() -> int:
    """One port the kernel calls free right now (see free_ports)."""
    return free_ports(1)[0]


def free_cluster_port() -> int:
    """A port free now whose cluster bus port (+10000) is free too."""
    while True:
        port = free_port()
        if port > HIGHEST_CLUSTER_PORT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bus:
            try:
                bus.bind(("127.0.0.1", port + CLUSTER_BUS_OFFSET))
            except OSError:
                continue
        return port


def wait_port(port: int, what: str, limit: float = 20.0) -> None:
    """Returns once 127.0.0.1:port accepts a connection; exits naming `what` after `limit`
    seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{what} did not listen on {port}")
