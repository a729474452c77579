#!/usr/bin/env python3
"""Checks every relative link and #anchor of the project's Markdown: README.md and the other
top-level pages, bench/README.md and the book's sources (docs/src/**/*.md).

A link is `[text](target)` outside code; `http:`, `https:` and `mailto:` targets are not
fetched. A target's file (or folder) must exist, relative to the page that links it, and an
`#anchor` must be the id of one of its headings as GitHub and mdBook make it (lower case,
punctuation dropped, spaces as hyphens, a repeated heading with -1, -2 ...).

A file named in inline code, such as `gateway/rules.example.toml` or `DESIGN.md` (a path
under one of the repository's top folders, or an upper-case page name), must exist too,
relative to the repository's root or to the page; so must every `bench/*.md` file that the
Makefile's help promises.

Usage: scripts/check_links.py [FILE ...]   (default: every page above). Exit status 1 and one
line per broken link when any is broken.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP_PAGES = ["README.md", "CONTRIBUTING.md", "CHANGELOG.md", "SECURITY.md", "bench/README.md"]

LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^()\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+).*?\1")
EXTERNAL = ("http://", "https://", "mailto:")
CODE_SPAN = re.compile(r"`([^`\s]+)`")
TOP_FOLDERS = ("src", "core", "gateway", "tests", "bench", "scripts", "fuzz", "docs", "examples")
NAMED_FILE = re.compile(r"^(?:(?:%s)/[\w./-]*|[A-Z][A-Z-]*\.md)$" % "|".join(TOP_FOLDERS))
# Build output, absent until something builds it.
BUILT = ("docs/book", "target")
PROMISED = re.compile(r"bench/[\w.-]+\.md")


def slug(heading: str) -> str:
    """The id GitHub and mdBook give a heading's text."""
    text = re.sub(r"<[^>]+>", "", heading)  # inline HTML is not part of the id
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text only
    text = text.strip().lower()
    kept = "".join(c for c in text if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def prose_lines(text: str):
    """(line number, line) of every line outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def anchors(text: str) -> set:
    """Every heading id of a page, repeated headings numbered as the renderers do."""
    seen = {}
    ids = set()
    for _, line in prose_lines(text):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        ids.add(base if count == 0 else f"{base}-{count}")
    return ids


def links(text: str):
    """(line number, target) of every link and image outside code."""
    for number, line in prose_lines(text):
        line = INLINE_CODE.sub("", line)
        for pattern in (LINK, IMAGE):
            for match in pattern.finditer(line):
                yield number, match.group(1)


def named_files(text: str):
    """(line number, path) of every file named in inline code outside code blocks."""
    for number, line in prose_lines(text):
        for match in CODE_SPAN.finditer(line):
            name = match.group(1).rstrip("/")
            if NAMED_FILE.match(name) and not name.startswith(BUILT):
                yield number, name


def makefile_promises(makefile: Path) -> list:
    """One message per `bench/*.md` file the Makefile names and the checkout lacks."""
    if not makefile.exists():
        return []
    problems = []
    for number, line in enumerate(makefile.read_text(encoding="utf-8").split("\n"), 1):
        help_text = line.partition(" ## ")[2]  # a target's help, which `make help` prints
        for name in PROMISED.findall(help_text):
            if not (makefile.parent / name).exists():
                problems.append(f"Makefile:{number}: {name}: no such file")
    return problems


def broken_links(page: Path, cache: dict) -> list:
    """One message per broken link of `page`."""
    text = page.read_text(encoding="utf-8")
    problems = []
    for number, target in links(text):
        if target.startswith(EXTERNAL):
            continue
        path_part, _, anchor = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        where = f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page}:{number}"
        if not linked.exists():
            problems.append(f"{where}: {target}: no such file")
            continue
        if anchor and linked.suffix == ".md" and linked.is_file():
            if linked not in cache:
                cache[linked] = anchors(linked.read_text(encoding="utf-8"))
            if anchor not in cache[linked]:
                problems.append(f"{where}: {target}: no heading #{anchor} there")
    for number, name in named_files(text):
        if not ((ROOT / name).exists() or (page.parent / name).exists()):
            where = f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page}:{number}"
            problems.append(f"{where}: `{name}`: no such file")
    return problems


def default_pages() -> list:
    pages = [ROOT / name for name in TOP_PAGES if (ROOT / name).exists()]
    return pages + sorted((ROOT / "docs" / "src").rglob("*.md"))


def main(argv: list) -> int:
    pages = [Path(arg).resolve() for arg in argv] or default_pages()
    cache = {}
    problems = [problem for page in pages for problem in broken_links(page, cache)]
    if not argv:
        problems += makefile_promises(ROOT / "Makefile")
    for problem in problems:
        print(problem)
    checked = sum(1 for page in pages for _ in links(page.read_text(encoding="utf-8")))
    print(f"check_links: {len(pages)} pages, {checked} links, {len(problems)} broken",
          file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
