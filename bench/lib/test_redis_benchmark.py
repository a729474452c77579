"""The redis-benchmark parsers against real redis-benchmark 7.0 output, in each form the
scripts ask for (fixtures/, see fixtures/README.md)."""

import unittest
from pathlib import Path

from .redis_benchmark import parse_csv, parse_quiet, server_errors

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def fixture(name: str) -> str:
    # As the scripts read it: text mode, which turns redis-benchmark's "\r" into "\n".
    return (FIXTURES / name).read_text()


class CsvTest(unittest.TestCase):
    def test_run_py_csv(self):
        result = parse_csv(fixture("redis-benchmark-csv.txt"))
        self.assertEqual(result, (176991.16, 3.631, 7.663))
        self.assertEqual(result.p99_ms, 7.663)

    def test_instructions_py_quiet_csv_is_the_same_format(self):
        self.assertEqual(parse_csv(fixture("redis-benchmark-quiet-csv.txt")),
                         (70422.53, 7.559, 45.279))

    def test_the_last_test_counts(self):
        text = fixture("redis-benchmark-csv.txt")
        second = '"GET k","1000.00","1.0","0.5","0.9","1.5","2.5","3.0"'
        self.assertEqual(parse_csv(text.rstrip("\n") + "\n" + second + "\n"), (1000.0, 0.9, 2.5))

    def test_without_latency_columns(self):
        # redis-benchmark before 7.0 prints only "test","rps".
        self.assertEqual(parse_csv('"test","rps"\n"SET k","123.45"\n'), (123.45, None, None))

    def test_an_error_reply_leaves_no_result(self):
        text = fixture("redis-benchmark-csv-error.txt")
        with self.assertRaises(RuntimeError):
            parse_csv(text)
        errors = server_errors(text)
        self.assertEqual(len(errors), 1)
        self.assertTrue(errors[0].startswith("Error from server: ERR unknown command 'RL.HIT'"))

    def test_no_errors_in_a_clean_run(self):
        self.assertEqual(server_errors(fixture("redis-benchmark-csv.txt")), [])


class QuietTest(unittest.TestCase):
    def test_one_node(self):
        self.assertEqual(parse_quiet(fixture("redis-benchmark-quiet.txt")), 155038.77)

    def test_cluster(self):
        # --cluster prints the masters first, then the same result line.
        self.assertEqual(parse_quiet(fixture("redis-benchmark-quiet-cluster.txt")), 75757.58)

    def test_progress_lines_are_not_results(self):
        text = fixture("redis-benchmark-quiet.txt")
        progress_only = "\n".join(line for line in text.splitlines()
                                  if "requests per second" not in line)
        self.assertIn("rps=", progress_only)
        self.assertIsNone(parse_quiet(progress_only))

    def test_csv_output_has_no_quiet_result(self):
        self.assertIsNone(parse_quiet(fixture("redis-benchmark-quiet-csv.txt")))


if __name__ == "__main__":
    unittest.main()
