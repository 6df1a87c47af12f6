#!/usr/bin/env python3
"""The maps of the code against the tree git tracks (run from the repository root).

    check_layout.py

- docs/layout.md: every file git tracks under a mapped folder has a line (a table row whose
  first cell is the file's path in backticks), and every line names a tracked file, or a
  folder (ending in `/`) that has its own README.md and whose files it then covers;
- scripts/README.md and bench/README.md: their tables list exactly the files tracked in
  their folder (paths relative to it), no more, no fewer.

Exit status 1 on any difference, with each one named.
"""

from __future__ import annotations

import re
import subprocess
import sys

# The folders whose every file needs a line in docs/layout.md.
MAPPED = (
    "src/",
    "ffi/src/",
    "ffi/tests/",
    "ffi/benches/",
    "include/",
    "py/src/",
    "py/python/",
    "py/tests/",
    "tests/",
    "loom_tests/",
    "benches/",
    "examples/",
)
ROW = re.compile(r"^\| `([^`]+)` \|", re.M)


def tracked(prefix: str = "") -> list[str]:
    args = ["git", "ls-files"] + ([prefix] if prefix else [])
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout.split()


def rows(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return ROW.findall(f.read())


def check_map(problems: list[str]) -> None:
    entries = rows("docs/layout.md")
    every = set(tracked())
    folders = [e for e in entries if e.endswith("/")]
    for entry in entries:
        if entry.endswith("/"):
            if entry + "README.md" not in every:
                problems.append(f"docs/layout.md: folder {entry} has no README.md of its own")
        elif entry not in every:
            problems.append(f"docs/layout.md names {entry}, which git does not track")
    duplicates = {e for e in entries if entries.count(e) > 1}
    for entry in sorted(duplicates):
        problems.append(f"docs/layout.md lists {entry} more than once")
    listed = set(entries)
    for name in sorted(every):
        if not name.startswith(MAPPED) or name in listed:
            continue
        if any(name.startswith(folder) for folder in folders):
            continue
        problems.append(f"{name} has no line in docs/layout.md")


def check_readme(readme: str, folder: str, problems: list[str]) -> None:
    listed = set(rows(readme))
    files = {n[len(folder) + 1 :] for n in tracked(folder)} - {"README.md"}
    for name in sorted(files - listed):
        problems.append(f"{folder}/{name} has no line in {readme}")
    for name in sorted(listed - files):
        problems.append(f"{readme} lists {name}, which git does not track in {folder}/")


def main() -> int:
    problems: list[str] = []
    check_map(problems)
    check_readme("scripts/README.md", "scripts", problems)
    check_readme("bench/README.md", "bench", problems)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print("docs/layout.md, scripts/README.md and bench/README.md match the tracked files")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
