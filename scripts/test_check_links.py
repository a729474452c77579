"""Unit tests of scripts/check_links.py: python3 -m unittest discover -s scripts -p 'test_check_links.py'"""
import tempfile
import unittest
from pathlib import Path

import check_links


class Slugs(unittest.TestCase):
    def test_as_github_and_mdbook_make_them(self):
        self.assertEqual(check_links.slug("Named policies"), "named-policies")
        self.assertEqual(check_links.slug("Envoy, Istio and Envoy Gateway"),
                         "envoy-istio-and-envoy-gateway")
        self.assertEqual(check_links.slug("`[server]`"), "server")
        self.assertEqual(check_links.slug("Module: keys that lost their expiry"),
                         "module-keys-that-lost-their-expiry")
        self.assertEqual(check_links.slug("[Rules](rules.md) and more"), "rules-and-more")

    def test_repeated_headings_are_numbered(self):
        ids = check_links.anchors("# A\n## Notes\n## Notes\n```\n# not a heading\n```\n")
        self.assertEqual(ids, {"a", "notes", "notes-1"})


class Links(unittest.TestCase):
    def setUp(self):
        self.dir = Path(tempfile.mkdtemp())
        (self.dir / "other.md").write_text("# Other\n\n## Its part\n")

    def check(self, text: str) -> list:
        page = self.dir / "page.md"
        page.write_text(text)
        return check_links.broken_links(page, {})

    def test_a_good_file_and_anchor_pass(self):
        self.assertEqual(self.check("[a](other.md) [b](other.md#its-part) [c](#top)\n# Top\n"), [])

    def test_a_missing_file_is_named(self):
        [problem] = self.check("see [a](missing.md)\n")
        self.assertIn("missing.md: no such file", problem)
        self.assertIn("page.md:1", problem)

    def test_a_missing_anchor_is_named(self):
        [problem] = self.check("[a](other.md#nowhere)\n")
        self.assertIn("no heading #nowhere", problem)

    def test_a_missing_anchor_of_the_page_itself_is_named(self):
        [problem] = self.check("# Title\n[a](#title) [b](#gone)\n")
        self.assertIn("#gone", problem)

    def test_code_and_external_links_are_not_checked(self):
        text = "`[a](nope.md)`\n```\n[b](nope.md)\n```\n[c](https://example.com/x.md)\n"
        self.assertEqual(self.check(text), [])


class NamedFiles(unittest.TestCase):
    def test_a_file_named_in_code_must_exist(self):
        page = Path(tempfile.mkdtemp()) / "page.md"
        page.write_text("See `scripts/check_links.py` and `DESIGN-NOWHERE.md`.\n"
                        "```\n`src/nowhere.rs` in a block is not checked\n```\n")
        [problem] = check_links.broken_links(page, {})
        self.assertIn("`DESIGN-NOWHERE.md`: no such file", problem)

    def test_words_with_slashes_are_not_files(self):
        self.assertEqual(list(check_links.named_files("`10/1s` and `europe/paris`\n")), [])

    def test_build_output_need_not_exist(self):
        self.assertEqual(list(check_links.named_files("`docs/book/index.html`\n")), [])

    def test_the_makefile_promises_only_files_that_exist(self):
        makefile = Path(tempfile.mkdtemp()) / "Makefile"
        makefile.write_text("x: ## writes bench/NOWHERE-RESULTS.md\n")
        [problem] = check_links.makefile_promises(makefile)
        self.assertIn("Makefile:1: bench/NOWHERE-RESULTS.md", problem)


if __name__ == "__main__":
    unittest.main()
