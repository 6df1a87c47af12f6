#!/usr/bin/env python3
"""The C ABI's overhead over the Rust API, from ffi/benches/ffi.rs.

  scripts/ffi_table.py --append RUNS.jsonl   record the latest criterion medians as one run
  scripts/ffi_table.py --table RUNS.jsonl    markdown table: per op and variant, the median
                                             over runs of each time and of the per-run ratio

Reads target/criterion/ffi_{sample,update}/{rust,c_abi}/{variant}/new/estimates.json.
"""
import json
import os
import statistics
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "target", "criterion")
OPS = ["sample", "update"]
VARIANTS = ["GlobalLock", "SplitLock", "LockFree"]


def median_us(op, api, variant):
    path = os.path.join(ROOT, f"ffi_{op}", api, variant, "new", "estimates.json")
    with open(path) as f:
        return json.load(f)["median"]["point_estimate"] / 1e3


def append(runs_file):
    run = {f"{op}/{api}/{v}": median_us(op, api, v)
           for op in OPS for api in ["rust", "c_abi"] for v in VARIANTS}
    with open(runs_file, "a") as f:
        f.write(json.dumps(run) + "\n")


def table(runs_file):
    with open(runs_file) as f:
        runs = [json.loads(line) for line in f if line.strip()]
    print(f"Median of {len(runs)} runs; overhead = C ABI time / Rust time - 1, per run, then the median.\n")
    print("| op (B = 256) | variant | Rust API (µs) | C ABI (µs) | overhead | target ≤ 5% |")
    print("|---|---|---|---|---|---|")
    for op in OPS:
        for v in VARIANTS:
            rust = [r[f"{op}/rust/{v}"] for r in runs]
            c = [r[f"{op}/c_abi/{v}"] for r in runs]
            over = statistics.median(ci / ri - 1 for ci, ri in zip(c, rust))
            verdict = "met" if over <= 0.05 else "**missed**"
            print(f"| {op} | {v} | {statistics.median(rust):.2f} | {statistics.median(c):.2f} "
                  f"| {over * 100:+.1f}% | {verdict} |")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("--append", "--table"):
        sys.exit(__doc__)
    (append if sys.argv[1] == "--append" else table)(sys.argv[2])
