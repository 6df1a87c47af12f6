#!/usr/bin/env python3
"""The C ABI's overhead over the Rust API, and each side's share beside the other through
the C ABI, from ffi/benches/ffi.rs.

  bench/ffi_table.py --append RUNS.jsonl   record the latest criterion medians as one run
  bench/ffi_table.py --table RUNS.jsonl    markdown tables: per op and variant, the median
                                             over runs of each time and of the per-run ratio;
                                             per variant, each side alone and beside the other

Reads target/criterion/ffi_{sample,update}/{rust,c_abi}/{variant}/new/estimates.json and
target/criterion/ffi_beside/{side}/{variant}/new/estimates.json.
"""

import json
import os
import statistics
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "target", "criterion")
OPS = ["sample", "update"]
VARIANTS = ["GlobalLock", "SplitLock", "LockFree"]
# ffi_beside's sides and the items of one iteration of each (64 inserts; sample+update 256).
SIDES = {"actor": 64, "learner": 256}
BOUND = 0.5


def median_us(group, api, variant, estimate="median"):
    """Criterion's estimate of the time per iteration, µs: by default the median over the
    samples; `slope` (the fit over all samples, i.e. the whole measurement's rate) for the
    sides beside each other, where a side starved in bursts (a global lock's actor) makes
    some samples long and the median would hide them."""
    path = os.path.join(ROOT, group, api, variant, "new", "estimates.json")
    with open(path) as f:
        estimates = json.load(f)
    return (estimates.get(estimate) or estimates["mean"])["point_estimate"] / 1e3


def append(runs_file):
    run = {
        f"{op}/{api}/{v}": median_us(f"ffi_{op}", api, v) for op in OPS for api in ["rust", "c_abi"] for v in VARIANTS
    }
    run.update(
        {
            f"beside/{side}_{when}/{v}": median_us("ffi_beside", f"{side}_{when}", v, "slope")
            for side in SIDES
            for when in ["solo", "beside"]
            for v in VARIANTS
        }
    )
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
            over = statistics.median(ci / ri - 1 for ci, ri in zip(c, rust, strict=True))
            verdict = "met" if over <= 0.05 else "**missed**"
            print(
                f"| {op} | {v} | {statistics.median(rust):.2f} | {statistics.median(c):.2f} "
                f"| {over * 100:+.1f}% | {verdict} |"
            )
    if not all(k in r for r in runs for k in [f"beside/actor_solo/{v}" for v in VARIANTS]):
        return
    print(
        f"\nThrough the C ABI, one side alone and beside the other working non-stop ("
        f"M items/s over each whole measurement (criterion's slope), median of "
        f"{len(runs)} runs; share = rate beside / rate alone, per run, then the median "
        f"[lowest-highest]; bound: at least {BOUND}).\n"
    )
    print("| variant | actor alone | actor beside | actor share | learner alone | learner beside | learner share |")
    print("|---|---|---|---|---|---|---|")
    for v in VARIANTS:
        cells = [v]
        for side, items in SIDES.items():
            solo = [r[f"beside/{side}_solo/{v}"] for r in runs]
            beside = [r[f"beside/{side}_beside/{v}"] for r in runs]
            shares = [s / b for s, b in zip(solo, beside, strict=True)]
            share = statistics.median(shares)
            mark = "" if share >= BOUND else "**"
            cells += [
                f"{items / statistics.median(solo):.2f}",
                f"{items / statistics.median(beside):.2f}",
                f"{mark}{share:.2f}{mark} [{min(shares):.2f}-{max(shares):.2f}]",
            ]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("--append", "--table"):
        sys.exit(__doc__)
    (append if sys.argv[1] == "--append" else table)(sys.argv[2])
