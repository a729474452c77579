import unittest

from .report import format_duration, machine_description, markdown_cell


class ReportTest(unittest.TestCase):
    def test_format_duration(self):
        self.assertEqual(format_duration(0), "0m 00s")
        self.assertEqual(format_duration(313.4), "5m 13s")
        self.assertEqual(format_duration(59.6), "1m 00s")

    def test_markdown_cell(self):
        self.assertEqual(markdown_cell(" a|b\nc "), "a\\|b c")

    def test_machine_description(self):
        self.assertRegex(machine_description(), r"^\d+ CPUs \(nproc; .*GiB RAM, Linux ")


if __name__ == "__main__":
    unittest.main()
