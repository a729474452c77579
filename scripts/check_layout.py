#!/usr/bin/env python3
"""Checks the shape of the Rust code: no circle of imports between modules, no file over
500 lines of production code, no production function over 80 lines.

Production code is what is left of a file once its `#[cfg(test)]` items are taken out;
files that are only tests (`tests.rs`, `*_tests.rs`, `tests/`, `benches/`, `fuzz/`) and
binaries of examples (`src/bin/`) are not counted. Imports are the `crate::`, `super::`
and `self::` paths a module names; a parent naming its own child is containment, not an
import, and is left out.

    scripts/check_layout.py            report and fail on any finding
    scripts/check_layout.py --report   report only
"""

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = {"redis-ratelimit": "src", "ratelimit-core": "core/src", "rl-gateway": "gateway/src"}
MAX_FILE_LINES = 500
MAX_FN_LINES = 80


def is_test_file(rel):
    name = os.path.basename(rel)
    return name == "tests.rs" or name.endswith("_tests.rs") or "/bin/" in rel


def strip_comments_and_strings(text):
    """Blanks comments and string contents, keeping line breaks, so braces count true."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 8]) and (i == 0 or not text[i - 1].isalnum()):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = '"' + hashes
            j = text.find(end, i + len(hashes) + 2)
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('"' + re.sub(r"[^\n]", " ", text[i + 1:j]) + '"')
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]) or text.startswith("'\\u{", i):
            j = text.find("'", i + 1 if text[i + 1] != "\\" else i + 3)
            out.append(" " * (j + 1 - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def item_end(lines, start):
    """Index of the line that closes the item opened at or after `start` (brace matching)."""
    depth, opened = 0, False
    for k in range(start, len(lines)):
        for ch in lines[k]:
            if ch == "{":
                depth, opened = depth + 1, True
            elif ch == "}":
                depth -= 1
        if opened and depth <= 0:
            return k
        if not opened and lines[k].rstrip().endswith(";"):
            return k
    return len(lines) - 1


def production_lines(clean):
    """The lines of a file with its #[cfg(test)] items blanked out."""
    lines = clean.split("\n")
    keep = list(lines)
    k = 0
    while k < len(lines):
        if re.match(r"\s*#\[cfg\(test\)\]", lines[k]):
            end = item_end(lines, k + 1)
            for m in range(k, end + 1):
                keep[m] = ""
            k = end + 1
        else:
            k += 1
    return keep


def long_functions(rel, lines):
    found = []
    for k, line in enumerate(lines):
        m = re.match(r"\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"\w*\"\s+)?fn\s+(\w+)", line)
        if not m:
            continue
        end = item_end(lines, k)
        length = end - k + 1
        if length > MAX_FN_LINES:
            found.append((rel, k + 1, m.group(7), length))
    return found


def module_path(crate_dir, path):
    rel = os.path.relpath(path, crate_dir)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return tuple(rel)


def resolve(mod, segments, modules):
    """The longest known module that a path names, from module `mod`."""
    base = list(mod)
    segs = list(segments)
    if segs and segs[0] == "crate":
        base, segs = [], segs[1:]
    else:
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    full = base + segs
    for cut in range(len(full), -1, -1):
        if tuple(full[:cut]) in modules:
            return tuple(full[:cut])
    return None


def imports(mod, clean, modules):
    found = set()
    paths = []
    for m in re.finditer(r"\buse\s+((?:crate|super|self)(?:::\w+)*)(?:::\{([^;]*)\})?", clean):
        head = m.group(1).split("::")
        if m.group(2):
            for part in re.split(r",", m.group(2)):
                part = part.strip().split(" as ")[0].strip()
                names = re.findall(r"\w+", part.split("{")[0])
                paths.append(head + [n for n in part.split("::") if re.fullmatch(r"\w+", n.strip())][:len(names)] if part else head)
        else:
            paths.append(head)
    for m in re.finditer(r"\b((?:crate|super)(?:::\w+)+)", clean):
        paths.append(m.group(1).split("::"))
    for segs in paths:
        target = resolve(mod, segs, modules)
        if target is None or target == mod:
            continue
        if target[:len(mod)] == mod:  # a parent naming its own child
            continue
        found.add(target)
    return found


def circles(graph):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def check_crate(crate, src):
    crate_dir = os.path.join(ROOT, src)
    files = []
    for dirpath, _, names in os.walk(crate_dir):
        for name in names:
            if name.endswith(".rs"):
                files.append(os.path.join(dirpath, name))
    modules = {module_path(crate_dir, f): f for f in files}
    big, long_fns, graph = [], [], {}
    for mod, path in sorted(modules.items()):
        rel = os.path.relpath(path, ROOT)
        with open(path, encoding="utf-8") as f:
            clean = strip_comments_and_strings(f.read())
        if "/bin/" in rel:
            continue
        prod = production_lines(clean)
        prod_text = "\n".join(prod)
        graph[mod] = imports(mod, prod_text, modules)
        if is_test_file(rel):
            continue
        count = sum(1 for line in prod if line.strip())
        if count > MAX_FILE_LINES:
            big.append((rel, count))
        long_fns.extend(long_functions(rel, prod))
    named = lambda mod: crate + "::" + "::".join(mod) if mod else crate
    loops = [[named(m) for m in comp] for comp in circles(graph)]
    return big, long_fns, loops


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", action="store_true", help="report only, never fail")
    args = parser.parse_args()
    findings = 0
    for crate, src in CRATES.items():
        big, long_fns, loops = check_crate(crate, src)
        for rel, count in big:
            print(f"file over {MAX_FILE_LINES} production lines: {rel} ({count})")
        for rel, line, name, length in long_fns:
            print(f"function over {MAX_FN_LINES} lines: {rel}:{line} {name} ({length})")
        for comp in loops:
            print("circle of imports: " + " <-> ".join(comp))
        findings += len(big) + len(long_fns) + len(loops)
    print(f"{findings} finding(s)")
    return 0 if args.report or findings == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
