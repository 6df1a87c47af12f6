#!/usr/bin/env python3
"""File-level import cycles in Rust source trees, checked against a list of known ones.

    import_cycles.py [--known FILE] DIR...

A file depends on another when it names a path into it (`use crate::a::b::C`, `super::x`,
`crate::a::f()` in an expression, a `use` group `crate::a::{b, c::D}`); a path is resolved to the
deepest module file that exists (`src/a/b.rs` or `src/a/b/mod.rs`). A module naming its own
submodules is structure, not dependence, and is not counted; unit-test files (`tests.rs`,
`*_tests.rs`) and `src/bin/` are left out. A cycle is a strongly connected component of more
than one file.

Every cycle found must be listed in FILE (one line per cycle: its files, sorted, separated by
spaces; `#` starts a comment), and every listed cycle must still exist, so the list can only
shrink. Exit status 1 on any difference, with the cycles named.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import defaultdict

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
GROUP = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*?)\}\s*;", re.S)


def module_files(root: str) -> dict[tuple[str, ...], str]:
    files: dict[tuple[str, ...], str] = {}
    for here, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not (here == root and d == "bin"))
        for name in sorted(names):
            if not name.endswith(".rs") or name == "tests.rs" or name.endswith("_tests.rs"):
                continue
            parts = os.path.relpath(os.path.join(here, name), root)[:-3].split(os.sep)
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            files[tuple(parts)] = os.path.join(here, name)
    return files


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def group_items(inner: str) -> list[str]:
    """The paths of a `use` group, nested groups flattened (`a::{b, c}` -> `a::b`, `a::c`)."""
    items, depth, current = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        current += ch
    items.append(current)
    out = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        m = re.match(r"([A-Za-z0-9_:]*?)::\{(.*)\}$", item, re.S)
        if m:
            out += [m.group(1) + "::" + sub for sub in group_items(m.group(2))]
        else:
            out.append(item.split(" as ")[0].strip())
    return out


def edges_of(files: dict[tuple[str, ...], str]) -> dict[tuple[str, ...], set[tuple[str, ...]]]:
    def resolve(parts: list[str]) -> tuple[str, ...] | None:
        for k in range(len(parts), 0, -1):
            if tuple(parts[:k]) in files:
                return tuple(parts[:k])
        return None

    edges: dict[tuple[str, ...], set[tuple[str, ...]]] = defaultdict(set)
    for module, path in files.items():
        with open(path, encoding="utf-8", errors="replace") as f:
            text = strip_comments(f.read())

        def absolute(head: str, rest: str, module: tuple[str, ...] = module) -> list[str]:
            names = [r for r in rest.split("::") if r]
            if head == "crate":
                return names
            base = list(module)
            if head == "super":
                base = base[:-1]
            while names and names[0] == "super":
                base, names = base[:-1], names[1:]
            return base + names

        targets = []
        for m in GROUP.finditer(text):
            for item in group_items(m.group(3)):
                rest = m.group(2) if item == "self" else m.group(2) + "::" + item
                targets.append(absolute(m.group(1), rest))
        for m in PATH.finditer(text):
            targets.append(absolute(m.group(1), m.group(2)))
        for target in targets:
            found = resolve(target)
            if found is None or found == module or found[: len(module)] == module:
                continue
            edges[module].add(found)
    return edges


def cycles(files: dict[tuple[str, ...], str]) -> list[list[tuple[str, ...]]]:
    edges = edges_of(files)
    index: dict[tuple[str, ...], int] = {}
    low: dict[tuple[str, ...], int] = {}
    stack: list[tuple[str, ...]] = []
    on_stack: set[tuple[str, ...]] = set()
    found = []
    sys.setrecursionlimit(10000)

    def visit(v: tuple[str, ...]) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(files):
        if v not in index:
            visit(v)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--known", help="the file of known cycles (none known when absent)")
    parser.add_argument("dirs", nargs="+", help="source roots (src, ffi/src, ...)")
    args = parser.parse_args()
    known: set[str] = set()
    if args.known:
        with open(args.known, encoding="utf-8") as f:
            for line in f:
                line = line.split("#")[0].strip()
                if line:
                    known.add(" ".join(sorted(line.split())))
    seen: set[str] = set()
    for root in args.dirs:
        files = module_files(root)
        for component in cycles(files):
            seen.add(" ".join(sorted(os.path.normpath(files[m]) for m in component)))
    new, gone = sorted(seen - known), sorted(known - seen)
    for line in sorted(seen & known):
        print(f"known cycle ({len(line.split())} files): {line}")
    for line in new:
        print(f"NEW import cycle ({len(line.split())} files): {line}", file=sys.stderr)
    for line in gone:
        print(f"cycle listed as known but gone (delete its line from {args.known}): {line}", file=sys.stderr)
    print(f"{len(seen)} cycles in {', '.join(args.dirs)}; {len(new)} new, {len(gone)} listed but gone")
    return 1 if new or gone else 0


if __name__ == "__main__":
    sys.exit(main())
