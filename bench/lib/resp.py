"""A minimal RESP2 client for setting servers up and checking them; the load itself comes
from redis-benchmark, wrk or the other load generators.

Replies: simple strings as str, bulk strings as bytes, integers as int, arrays as lists,
nil as None; an error reply raises ReplyError."""

import socket
from typing import Dict, Iterable, List, Sequence

HOST = "127.0.0.1"


class ReplyError(Exception):
    """The server answered with an error reply."""

    def __init__(self, line: bytes) -> None:
        super().__init__(line[1:].rstrip(b"\r\n").decode(errors="replace"))
        # The reply as the server sent it ("-ERR ...\r\n"), for messages that quote it.
        self.line = line


def encode_argument(argument: object) -> bytes:
    """One bulk string; bytes are sent as they are, anything else as its str()."""
    data = argument if isinstance(argument, bytes) else str(argument).encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


def encode_command(arguments: Sequence[object]) -> bytes:
    return b"*%d\r\n" % len(arguments) + b"".join(encode_argument(a) for a in arguments)


class Connection:
    """One connection to a server on the loopback interface."""

    def __init__(self, port: int, timeout: float = 60.0, host: str = HOST) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.reader = self.sock.makefile("rb")

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exception) -> None:
        self.close()

    def close(self) -> None:
        self.reader.close()
        self.sock.close()

    def call(self, *arguments: object) -> object:
        self.sock.sendall(encode_command(arguments))
        return self.read_reply()

    def batch(self, commands: Iterable[Sequence[object]]) -> List[object]:
        """Sends every command in one write, then reads their replies in order (one round
        trip instead of one per command)."""
        commands = list(commands)
        self.sock.sendall(b"".join(encode_command(c) for c in commands))
        return [self.read_reply() for _ in commands]

    def info(self, section: str) -> Dict[str, str]:
        """INFO `section` as {field: value}."""
        return parse_info(self.call("INFO", section))

    def read_reply(self) -> object:
        line = self.reader.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("the server closed the connection")
        kind, body = line[:1], line[1:-2]
        if kind == b"+":
            return body.decode()
        if kind == b"-":
            raise ReplyError(line)
        if kind == b":":
            return int(body)
        if kind == b"$":
            length = int(body)
            if length < 0:
                return None
            data = self.reader.read(length + 2)
            if len(data) < length + 2:
                raise ConnectionError("the server closed the connection")
            return data[:-2]
        if kind == b"*":
            length = int(body)
            return None if length < 0 else [self.read_reply() for _ in range(length)]
        raise ConnectionError(f"unexpected reply line {line!r}")


def parse_info(reply: object) -> Dict[str, str]:
    """The fields of an INFO reply; section headers (# Server) and blank lines left out."""
    text = reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)
    fields = {}
    for line in text.splitlines():
        if ":" in line and not line.startswith("#"):
            name, value = line.split(":", 1)
            fields[name] = value.strip()
    return fields


def call_once(port: int, *arguments: object, timeout: float = 30.0) -> object:
    """One command on a connection of its own (for a server checked now and then)."""
    with Connection(port, timeout=timeout) as connection:
        return connection.call(*arguments)


def ping(port: int, timeout: float = 2.0) -> bool:
    """Whether a server answers PING with PONG now (False while it starts or loads)."""
    try:
        return call_once(port, "PING", timeout=timeout) == "PONG"
    except (OSError, ReplyError):
        return False
