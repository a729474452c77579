"""The wrk parser against real wrk 4.1 output (fixtures/, see fixtures/README.md)."""

import unittest
from pathlib import Path

from .wrk import parse_wrk

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


class ParseWrkTest(unittest.TestCase):
    def test_a_clean_run(self):
        summary = parse_wrk(fixture("wrk-ok.txt"))
        self.assertEqual(summary.rps, 22662.52)
        self.assertAlmostEqual(summary.p50_ms, 0.206)
        self.assertAlmostEqual(summary.p99_ms, 4.59)
        self.assertEqual(summary.requests, 22836)
        self.assertEqual(summary.non_2xx, 0)
        self.assertEqual(summary.socket_errors, {})

    def test_non_2xx_responses_are_counted(self):
        summary = parse_wrk(fixture("wrk-non2xx.txt"))
        self.assertEqual(summary.non_2xx, 20378)
        self.assertEqual(summary.requests, 20378)
        self.assertAlmostEqual(summary.p50_ms, 0.226)

    def test_read_errors(self):
        summary = parse_wrk(fixture("wrk-read-errors.txt"))
        self.assertEqual(summary.socket_errors,
                         {"connect": 0, "read": 4945, "write": 0, "timeout": 0})
        self.assertEqual((summary.rps, summary.requests, summary.p99_ms), (0.0, 0, 0.0))

    def test_timeouts(self):
        summary = parse_wrk(fixture("wrk-timeouts.txt"))
        self.assertEqual(summary.socket_errors["timeout"], 4)
        self.assertEqual(sum(summary.socket_errors.values()), 4)

    def test_latencies_in_seconds(self):
        # wrk writes "1.14s " (a space after the unit): still read, and as ms.
        summary = parse_wrk(fixture("wrk-seconds.txt"))
        self.assertAlmostEqual(summary.p50_ms, 1140.0)
        self.assertAlmostEqual(summary.p99_ms, 1150.0)
        self.assertEqual(summary.requests, 4)

    def test_tuple_order_is_the_one_gateway_py_unpacks(self):
        rps, p50, p99, requests, non_2xx, errors = parse_wrk(fixture("wrk-non2xx.txt"))
        self.assertEqual((rps, requests, non_2xx, errors), (20314.92, 20378, 20378, {}))
        self.assertLess(p50, p99)

    def test_output_without_a_latency_distribution_is_refused(self):
        # Without --latency wrk prints no percentiles: the report could not be written.
        text = "\n".join(line for line in fixture("wrk-ok.txt").splitlines()
                         if "%  " not in line or "Latency " in line)
        with self.assertRaises(RuntimeError):
            parse_wrk(text)

    def test_an_error_message_is_refused(self):
        with self.assertRaises(RuntimeError):
            parse_wrk("unable to connect to 127.0.0.1:1 Connection refused\n")


if __name__ == "__main__":
    unittest.main()
