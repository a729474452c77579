"""The commandstats reader against real INFO commandstats output (fixtures/, see
fixtures/README.md): Redis 7.0 with the module and the Functions library loaded."""

import unittest
from pathlib import Path

from .commandstats import calls_between, calls_of, ratelimit_calls
from .resp import parse_info

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "info-commandstats.txt"


class CommandstatsTest(unittest.TestCase):
    def test_the_module_and_the_library_only(self):
        calls = ratelimit_calls(parse_info(FIXTURE.read_text()))
        # GET, SET, TIME and PEXPIRETIME ran inside the library's functions: not counted,
        # their FCALL is; FUNCTION LOAD and PING are not rate-limit commands.
        self.assertEqual(calls, {"rl.hit": 3, "rl.take": 1, "rl.refund": 1, "fcall": 1,
                                 "fcall_ro": 1})

    def test_between_two_readings(self):
        before = {"rl.hit": 3, "rl.take": 1}
        after = {"rl.hit": 10, "rl.take": 1, "rl.refund": 2}
        self.assertEqual(calls_between(before, after), {"rl.hit": 7, "rl.refund": 2})

    def test_a_line_without_calls(self):
        self.assertEqual(calls_of("usec=3,calls=42,usec_per_call=0.07"), 42)
        with self.assertRaises(ValueError):
            calls_of("usec=3")


if __name__ == "__main__":
    unittest.main()
