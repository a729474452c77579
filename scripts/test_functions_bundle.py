"""The committed Functions library is what scripts/functions_bundle.py writes."""

import pathlib
import sys
import tempfile
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import functions_bundle  # noqa: E402


class BundleTest(unittest.TestCase):
    def test_committed_bundle_is_fresh(self):
        committed = functions_bundle.BUNDLE.read_text()
        self.assertEqual(committed, functions_bundle.bundle(),
                         "functions/ratelimit.lua is stale: run python3 scripts/functions_bundle.py")

    def test_first_line_names_the_library_and_version_is_cargos(self):
        text = functions_bundle.bundle()
        self.assertTrue(text.startswith("#!lua name=ratelimit\n"))
        self.assertIn(f"RL.VERSION = '{functions_bundle.cargo_version()}'", text)
        self.assertNotIn("@VERSION@", text)

    def test_a_source_missing_from_the_order_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = pathlib.Path(tmp)
            (src / "a.lua").write_text("local RL = {}\n")
            (src / "stray.lua").write_text("-- forgotten\n")
            with self.assertRaises(SystemExit):
                functions_bundle.bundle(src=src, sources=["a.lua"], version="1.0.0")
            self.assertIn("local RL", functions_bundle.bundle(src=src, sources=["a.lua", "stray.lua"],
                                                              version="1.0.0"))


if __name__ == "__main__":
    unittest.main()
