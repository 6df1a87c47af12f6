#!/usr/bin/env python3
"""Markdown tables of ns per item from criterion's results in target/criterion.

Cell = median time per iteration / elements per iteration (criterion's Throughput).
Run after `cargo bench --bench tree` and `cargo bench --bench buffer`.
"""

import json
import os
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "target", "criterion")
SIZES = [131072, 1048576, 4194304]
SIZE_NAMES = {131072: "2^17", 1048576: "2^20", 4194304: "2^22"}
VARIANTS = ["binary", "baseline", "K2", "K4", "K8", "K16", "K32", "K64"]


def per_item(group, n, variant, param):
    d = os.path.join(ROOT, f"{group}_{n}", variant, param)
    try:
        with open(os.path.join(d, "new", "estimates.json")) as f:
            median = json.load(f)["median"]["point_estimate"]
        with open(os.path.join(d, "new", "benchmark.json")) as f:
            elements = json.load(f)["throughput"]["Elements"]
    except (OSError, KeyError, TypeError):
        return None
    return median / elements


def fmt(v):
    return "-" if v is None else (f"{v:.1f}" if v < 100 else f"{v:.0f}")


def table(title, group, params):
    cols = [(n, p) for n in SIZES for p in params]
    rows = [v for v in VARIANTS if any(per_item(group, n, v, p) is not None for n, p in cols)]
    if not rows:
        return ""
    out = [f"**{title}** (ns per item; N = capacity)", ""]
    out.append("| variant | " + " | ".join(f"N={SIZE_NAMES[n]} {p}" for n, p in cols) + " |")
    out.append("|---" * (len(cols) + 1) + "|")
    for v in rows:
        out.append(f"| {v} | " + " | ".join(fmt(per_item(group, n, v, p)) for n, p in cols) + " |")
    return "\n".join(out) + "\n"


def headline():
    n, p = 1048576, "B256"
    out = ["**Headline: N = 2^20, B = 256** (ns per item, and speed-up over the baseline)", ""]
    out.append(
        "| variant | tree sample | tree update | tree sample+update | buffer sample (+gather, weights) | buffer update (keys) | buffer learner step |"
    )
    out.append("|---|---|---|---|---|---|---|")
    cells = [
        ("tree_sample", "binary"),
        ("tree_update", "binary"),
        ("tree_learner_step", "binary"),
        ("buffer_sample", "baseline"),
        ("buffer_update", "baseline"),
        ("buffer_learner_step", "baseline"),
    ]
    for v in ["K2", "K4", "K8", "K16", "K32", "K64", "baseline"]:
        row = []
        for group, base in cells:
            var = base if v == "baseline" else v
            x = per_item(group, n, var, p)
            b = per_item(group, n, base, p)
            if x is None:
                row.append("-")
            elif v == "baseline" or b is None:
                row.append(fmt(x))
            else:
                row.append(f"{fmt(x)} ({b / x:.1f}x)")
        out.append(f"| {v} | " + " | ".join(row) + " |")
    return "\n".join(out) + "\n"


def main():
    if not os.path.isdir(ROOT):
        sys.exit("no target/criterion: run the benches first")
    parts = [
        headline(),
        table("Tree: sample (stratified targets + batched descent)", "tree_sample", ["B32", "B256", "B4096"]),
        table("Tree: update", "tree_update", ["B32", "B256", "B4096"]),
        table("Tree: learner step (sample 256 + update 256)", "tree_learner_step", ["B256"]),
        table("Buffer: insert (default priority)", "buffer_insert", ["batch1", "batch64"]),
        table("Buffer: sample (keys, weights, gather of 9 f32 per item)", "buffer_sample", ["B32", "B256", "B4096"]),
        table("Buffer: update_priorities by key", "buffer_update", ["B32", "B256", "B4096"]),
        table("Buffer: learner step (sample 256 + update 256)", "buffer_learner_step", ["B256"]),
    ]
    print("\n".join(p for p in parts if p))


if __name__ == "__main__":
    main()
