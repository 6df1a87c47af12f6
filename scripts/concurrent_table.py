#!/usr/bin/env python3
"""Markdown tables of throughput (million items per second) from benches/concurrent.rs.

Reads target/criterion/concurrent_{workload}_{size}/{variant}/{threads}/new/*.json and
learner_rate_{size}/{variant}/{solo,with_actor}; a cell is elements per iteration divided
by criterion's median time per iteration. Run after `cargo bench --bench concurrent`.
"""
import json
import os
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "target", "criterion")
SIZES = ["36B", "1028B"]
VARIANTS = ["GlobalLock", "GlobalSpinLock", "SplitLock", "LockFree", "Unsynchronized"]
WORKLOADS = [("actors", ["1", "2", "4"]), ("learners", ["1", "2", "4"]), ("mixed", ["2", "4"])]


def rate(group, variant, param):
    d = os.path.join(ROOT, group, variant, param, "new")
    try:
        with open(os.path.join(d, "estimates.json")) as f:
            median_ns = json.load(f)["median"]["point_estimate"]
        with open(os.path.join(d, "benchmark.json")) as f:
            elements = json.load(f)["throughput"]["Elements"]
    except (OSError, KeyError, TypeError):
        return None
    return elements / median_ns * 1e3  # million per second


def fmt(v):
    return "-" if v is None else f"{v:.2f}"


def main():
    if not os.path.isdir(ROOT):
        sys.exit("no target/criterion: run `cargo bench --bench concurrent` first")
    for size in SIZES:
        cols = [(w, t) for w, ts in WORKLOADS for t in ts]
        print(f"**Items of {size}** (million items per second; T = threads; mixed = T/2 actors + T/2 learners)\n")
        print("| variant | " + " | ".join(f"{w} T={t}" for w, t in cols) + " | learner solo | learner beside an actor |")
        print("|---" * (len(cols) + 3) + "|")
        for v in VARIANTS:
            cells = [fmt(rate(f"concurrent_{w}_{size}", v, t)) for w, t in cols]
            solo = rate(f"learner_rate_{size}", v, "solo")
            beside = rate(f"learner_rate_{size}", v, "with_actor")
            cells += [fmt(solo), fmt(beside) + (f" ({(beside / solo - 1) * 100:+.0f}%)" if solo and beside else "")]
            print(f"| {v} | " + " | ".join(cells) + " |")
        base = rate(f"concurrent_mixed_{size}", "GlobalLock", "2")
        ratios = []
        for v in ["GlobalSpinLock", "SplitLock", "LockFree", "Unsynchronized"]:
            x = rate(f"concurrent_mixed_{size}", v, "2")
            if x and base:
                ratios.append(f"{v} {x / base:.2f}x")
        print(f"\nMixed, 1 actor + 1 learner, against GlobalLock: {', '.join(ratios)} (target >= 1.6x for SplitLock and LockFree).\n")


if __name__ == "__main__":
    main()
