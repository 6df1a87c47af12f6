#!/usr/bin/env python3
"""Markdown tables of median latency (µs) from benches/tch.rs, one row per (N, B).

Reads target/criterion/tch_{sample,update}_{N}/{backend}/B{b}/new/estimates.json; a backend
that was not measured (tch_cuda without a GPU) shows as "-". Run after
`cargo bench --features tch --bench tch`.
"""

import json
import os

ROOT = os.path.join(os.path.dirname(__file__), "..", "target", "criterion")
SIZES = [1 << 17, 1 << 20, 1 << 22]
BATCHES = [32, 256, 4096, 65536]
BACKENDS = {
    "sample": ["cpu_tree", "tch_cpu", "tch_cuda"],
    "update": ["cpu_tree", "tch_cpu", "tch_cpu_rebuild_all", "tch_cuda", "tch_cuda_rebuild_all"],
}


def median_us(op, n, backend, b):
    # criterion turns the group name "tch_{op}/{N}" into the directory "tch_{op}_{N}".
    path = os.path.join(ROOT, f"tch_{op}_{n}", backend, f"B{b}", "new", "estimates.json")
    try:
        with open(path) as f:
            return json.load(f)["median"]["point_estimate"] / 1e3
    except OSError:
        return None


def fmt(v):
    if v is None:
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


for op, backends in BACKENDS.items():
    print(f"\n{op} (median µs per call)\n")
    print("| N | B | " + " | ".join(backends) + " |")
    print("|---|---|" + "---|" * len(backends))
    for n in SIZES:
        for b in BATCHES:
            cells = [median_us(op, n, be, b) for be in backends]
            if all(c is None for c in cells):
                continue
            print(f"| 2^{n.bit_length() - 1} | {b} | " + " | ".join(fmt(c) for c in cells) + " |")
