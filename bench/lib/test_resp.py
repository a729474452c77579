"""The RESP client against a scripted server (canned replies), and against a real
redis-server when one is on the PATH (it starts in about 50 ms)."""

import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from .net import free_port
from .resp import (Connection, ReplyError, call_once, encode_command, parse_info, ping)


class ScriptedServer:
    """Accepts one connection, records what it receives until `expect` bytes, answers
    `reply`, then closes: enough to test one call or one batch."""

    def __init__(self, reply: bytes, expect: int) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.received = b""
        self.thread = threading.Thread(target=self.serve, args=(reply, expect), daemon=True)
        self.thread.start()

    def serve(self, reply: bytes, expect: int) -> None:
        connection, _ = self.listener.accept()
        with connection:
            while len(self.received) < expect:
                chunk = connection.recv(65536)
                if not chunk:
                    break
                self.received += chunk
            connection.sendall(reply)
        self.listener.close()


def answer(reply: bytes, *arguments: object):
    server = ScriptedServer(reply, len(encode_command(arguments)))
    try:
        with Connection(server.port, timeout=5) as connection:
            return connection.call(*arguments), server.received
    finally:
        server.thread.join(5)


class EncodeTest(unittest.TestCase):
    def test_arguments_as_bulk_strings(self):
        self.assertEqual(encode_command(["SET", "k", 1, b"\x00\xff"]),
                         b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n1\r\n$2\r\n\x00\xff\r\n")

    def test_length_counts_bytes_not_characters(self):
        self.assertEqual(encode_command(["µ"]), b"*1\r\n$2\r\n\xc2\xb5\r\n")


class ReplyTest(unittest.TestCase):
    def test_simple_string(self):
        reply, sent = answer(b"+PONG\r\n", "PING")
        self.assertEqual(reply, "PONG")
        self.assertEqual(sent, b"*1\r\n$4\r\nPING\r\n")

    def test_integer_bulk_nil_and_array(self):
        self.assertEqual(answer(b":-12\r\n", "INCR", "k")[0], -12)
        self.assertEqual(answer(b"$5\r\na\r\nbc\r\n", "GET", "k")[0], b"a\r\nbc")
        self.assertIsNone(answer(b"$-1\r\n", "GET", "k")[0])
        self.assertEqual(answer(b"*3\r\n:1\r\n$1\r\nx\r\n*0\r\n", "RL.HIT", "k")[0], [1, b"x", []])
        self.assertIsNone(answer(b"*-1\r\n", "X")[0])

    def test_error_reply(self):
        with self.assertRaises(ReplyError) as raised:
            answer(b"-ERR unknown command 'RL.HIT'\r\n", "RL.HIT", "k")
        self.assertEqual(str(raised.exception), "ERR unknown command 'RL.HIT'")
        self.assertEqual(raised.exception.line, b"-ERR unknown command 'RL.HIT'\r\n")

    def test_closed_connection(self):
        with self.assertRaises(ConnectionError):
            answer(b"$10\r\nshort", "GET", "k")
        with self.assertRaises(ConnectionError):
            answer(b"", "PING")

    def test_batch_sends_once_and_reads_in_order(self):
        commands = [["SET", "a", "1"], ["GET", "a"], ["INCR", "n"]]
        server = ScriptedServer(b"+OK\r\n$1\r\n1\r\n:1\r\n",
                                sum(len(encode_command(c)) for c in commands))
        with Connection(server.port, timeout=5) as connection:
            self.assertEqual(connection.batch(commands), ["OK", b"1", 1])
        server.thread.join(5)

    def test_parse_info(self):
        info = parse_info(b"# Server\r\nredis_version:7.0.15\r\n\r\n# CPU\r\nused_cpu_sys:0.5\r\n")
        self.assertEqual(info, {"redis_version": "7.0.15", "used_cpu_sys": "0.5"})

    def test_ping_on_a_closed_port(self):
        self.assertFalse(ping(free_port(), timeout=0.5))


@unittest.skipIf(shutil.which("redis-server") is None, "no redis-server on the PATH")
class RedisServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.workdir = tempfile.TemporaryDirectory()
        cls.port = free_port()
        cls.server = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(cls.port), "--save", "",
             "--appendonly", "no", "--dir", cls.workdir.name],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 5
        while not ping(cls.port, timeout=0.5):
            if time.monotonic() > deadline or cls.server.poll() is not None:
                cls.tearDownClass()
                raise unittest.SkipTest("redis-server did not start")
            time.sleep(0.02)

    @classmethod
    def tearDownClass(cls):
        cls.server.terminate()  # this test's own server, by its pid
        cls.server.wait(5)
        cls.workdir.cleanup()

    def test_commands(self):
        with Connection(self.port, timeout=5) as connection:
            self.assertEqual(connection.call("SET", "k", b"\x00value"), "OK")
            self.assertEqual(connection.call("GET", "k"), b"\x00value")
            self.assertEqual(connection.batch([["INCR", "n"], ["INCR", "n"]]), [1, 2])
            with self.assertRaises(ReplyError):
                connection.call("NO.SUCH.COMMAND")
            self.assertIn("redis_version", connection.info("server"))
            self.assertEqual(connection.call("PING"), "PONG")

    def test_call_once(self):
        self.assertIn(b"used_cpu_user", call_once(self.port, "INFO", "cpu"))


if __name__ == "__main__":
    unittest.main()
