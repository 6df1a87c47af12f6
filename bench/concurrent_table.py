#!/usr/bin/env python3
"""Markdown tables of throughput (million items per second) from benches/concurrent.rs.

Reads target/criterion/concurrent_{workload}_{size}/{variant}/{threads}/new/*.json and
{learner,actor,staged_actor}_rate_{size}/{variant}/{solo,beside}; a cell is elements per
iteration divided by criterion's median time per iteration (the shares beside the other
side are printed once more from criterion's slope, see `run_rate`). First it prints the
core-to-core round trip at the start and the end of each run (core_round_trip/{start,end}). Also prints the target
ratios, the like-for-like insert ratios, the ceilings of the mixed ratios, their bounds for a
learner as fast as the sequential one, and the mixed ratios of `Unsynchronized` (no protocol
at all). Run after
`cargo bench --bench concurrent`.

With directories as arguments (copies of target/criterion, one per full run of the bench),
each table cell is the median of the runs' rates, and each ratio the median of the runs'
ratios (each computed within its own run) followed by the lowest and highest in brackets.
"""

import json
import os
import sys

ROOTS = sys.argv[1:] or [os.path.join(os.path.dirname(__file__), "..", "target", "criterion")]
SIZES = ["36B", "1028B"]
VARIANTS = ["GlobalLock", "GlobalSpinLock", "SplitLock", "LockFree", "Unsynchronized"]
THREADS = os.environ.get("KARY_BENCH_THREADS", "1,2,4").split(",")
EVEN = [t for t in THREADS if int(t) % 2 == 0]
WORKLOADS = [
    ("actors", THREADS),
    ("actors_given", [t for t in THREADS if t == "1"]),
    ("actors_staged", THREADS),
    ("actors_batch32", THREADS),
    ("learners", THREADS),
    ("mixed", EVEN),
    ("mixed_staged", EVEN),
]


def run_rate(root, group, variant, param, estimate="median"):
    """Million items per second in one run, from criterion's `estimate` of the time per
    iteration: the median over the samples, or `slope` (the fit over all samples: the
    whole measurement's rate, which a side starved in bursts pulls down where the median
    leaves its few very long samples out)."""
    d = os.path.join(root, group, variant, param, "new")
    try:
        with open(os.path.join(d, "estimates.json")) as f:
            estimates = json.load(f)
        ns = (estimates.get(estimate) or estimates["mean"])["point_estimate"]
        with open(os.path.join(d, "benchmark.json")) as f:
            elements = json.load(f)["throughput"]["Elements"]
    except (OSError, KeyError, TypeError):
        return None
    return elements / ns * 1e3  # million per second


def median(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def rate(group, variant, param):
    """The median over the runs of one cell's rate."""
    return median(run_rate(root, group, variant, param) for root in ROOTS)


def fmt(v):
    return "-" if v is None else f"{v:.2f}"


def fmt_ratio(per_run):
    """A ratio's median over the runs, with its range when there are several."""
    values = [v for v in per_run if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return fmt(values[0])
    return f"{fmt(median(values))} [{min(values):.2f}-{max(values):.2f}]"


def quotient(x, b):
    return None if x is None or not b else x / b


def ratio(group, variant, param, base, base_group=None):
    """Per run: the variant's rate over the base's (in `base_group`, default `group`)."""
    return [
        quotient(run_rate(root, group, variant, param), run_rate(root, base_group or group, base, param))
        for root in ROOTS
    ]


def ceiling(size, learner, workload, base):
    """Per run: 2 x `learner`'s solo learner rate over `base`'s mixed 1+1 rate in `workload`.
    A mixed 1+1 iteration ends when its learner has done its 64-item step, so 128 items per
    step of that learner is the most a mixed pair can do."""
    return [
        quotient(2 * solo if solo else None, run_rate(root, f"concurrent_{workload}_{size}", base, "2"))
        for root in ROOTS
        for solo in [run_rate(root, f"learner_rate_{size}", learner, "solo")]
    ]


def round_trip_ns(root, when):
    """Nanoseconds per core-to-core round trip at `when` (start, end) of the run in `root`."""
    try:
        with open(os.path.join(root, "core_round_trip", when, "new", "estimates.json")) as f:
            return json.load(f)["median"]["point_estimate"]
    except (OSError, KeyError, TypeError):
        return None


def main():
    for root in ROOTS:
        if not os.path.isdir(root):
            sys.exit(f"no {root}: run `cargo bench --bench concurrent` first")
    trips = [(round_trip_ns(root, "start"), round_trip_ns(root, "end")) for root in ROOTS]
    print(
        "Core-to-core round trip, ns, at the start / end of each run (about 65-85 on the "
        "2-vCPU VM in a near placement, 370 in a far one; the two-thread cells follow it): "
        + "; ".join(
            f"run {i + 1}: {'-' if a is None else f'{a:.0f}'} / {'-' if b is None else f'{b:.0f}'}"
            for i, (a, b) in enumerate(trips)
        )
        + "\n"
    )
    runs = (
        "same run" if len(ROOTS) == 1 else f"median of {len(ROOTS)} runs, each ratio within its run; [lowest-highest]"
    )
    for size in SIZES:
        print(f"**Items of {size}** (million items per second; T = threads; mixed = T/2 actors + T/2 learners)\n")
        print("| workload | T | " + " | ".join(VARIANTS) + " |")
        print("|---" * (len(VARIANTS) + 2) + "|")
        for w, ts in WORKLOADS:
            for t in ts:
                cells = [fmt(rate(f"concurrent_{w}_{size}", v, t)) for v in VARIANTS]
                print(f"| {w} | {t} | " + " | ".join(cells) + " |")
        print()
        print("| one side, alone and beside the other | " + " | ".join(VARIANTS) + " |")
        print("|---" * (len(VARIANTS) + 1) + "|")
        for group, who in [
            ("learner_rate", "learner"),
            ("actor_rate", "actor (own priorities)"),
            ("staged_actor_rate", "staged actor (writer of 32)"),
        ]:
            for label in ["solo", "beside"]:
                cells = []
                for v in VARIANTS:
                    x = rate(f"{group}_{size}", v, label)
                    # The share of solo, per run (beside over solo of the same run).
                    share = median(
                        quotient(
                            run_rate(root, f"{group}_{size}", v, "beside"), run_rate(root, f"{group}_{size}", v, "solo")
                        )
                        for root in ROOTS
                    )
                    extra = f" ({share:.2f} of solo)" if label == "beside" and share is not None else ""
                    cells.append(fmt(x) + extra)
                print(f"| {who} {label} | " + " | ".join(cells) + " |")
        print()
        # The same shares over each whole measurement (see `run_rate`).
        shares = []
        for v in VARIANTS:
            for group, who in [
                ("learner_rate", "learner"),
                ("actor_rate", "actor"),
                ("staged_actor_rate", "staged actor"),
            ]:
                shares.append(
                    (
                        f"{v} {who}",
                        [
                            quotient(
                                run_rate(root, f"{group}_{size}", v, "beside", "slope"),
                                run_rate(root, f"{group}_{size}", v, "solo", "slope"),
                            )
                            for root in ROOTS
                        ],
                    )
                )
        print(
            f"Shares of solo over each whole measurement (criterion's slope; {runs}): "
            + "; ".join(f"{name}: {fmt_ratio(r)}" for name, r in shares)
            + "\n"
        )
        targets = [
            (
                "LockFree 1-thread insert vs GlobalLock (>= 0.5)",
                ratio(f"concurrent_actors_{size}", "LockFree", "1", "GlobalLock"),
            ),
            (
                "SplitLock 2 staged actors vs GlobalSpinLock direct (>= 1.0)",
                ratio(
                    f"concurrent_actors_staged_{size}", "SplitLock", "2", "GlobalSpinLock", f"concurrent_actors_{size}"
                ),
            ),
            (
                "LockFree 2 staged actors vs GlobalSpinLock direct (>= 1.0)",
                ratio(
                    f"concurrent_actors_staged_{size}", "LockFree", "2", "GlobalSpinLock", f"concurrent_actors_{size}"
                ),
            ),
        ]
        for w in ["mixed", "mixed_staged"]:
            for v in ["SplitLock", "LockFree"]:
                for base, want in [("GlobalSpinLock", 1.3), ("GlobalLock", 1.6)]:
                    targets.append(
                        (f"{v} {w} 1+1 vs {base} {w} (>= {want})", ratio(f"concurrent_{w}_{size}", v, "2", base))
                    )
        print(f"Ratios ({runs}): " + "; ".join(f"{name}: {fmt_ratio(r)}" for name, r in targets) + "\n")
        # The 16-core targets, where the run has 8 and 16 threads.
        if "16" in EVEN and "8" in THREADS:
            big = []
            for w in ["mixed", "mixed_staged"]:
                for v in ["SplitLock", "LockFree"]:
                    for base, want in [("GlobalLock", 3.0), ("GlobalSpinLock", 2.0)]:
                        big.append(
                            (f"{v} {w} 8+8 vs {base} {w} (>= {want})", ratio(f"concurrent_{w}_{size}", v, "16", base))
                        )
            for v in ["SplitLock", "LockFree"]:
                big.append(
                    (
                        f"{v} 8 staged actors vs GlobalLock direct (>= 2.0)",
                        ratio(f"concurrent_actors_staged_{size}", v, "8", "GlobalLock", f"concurrent_actors_{size}"),
                    )
                )
            print(f"16-core ratios ({runs}): " + "; ".join(f"{name}: {fmt_ratio(r)}" for name, r in big) + "\n")
        # Context for the insert target: the same comparison with each item's own priority
        # (in a full buffer a default priority replaces a leaf by the same value), and with
        # both sides staged or batched (like-for-like views; the target is the direct one).
        alike = [
            (f"LockFree 1-thread {w} vs GlobalLock {w}", ratio(f"concurrent_{w}_{size}", "LockFree", "1", "GlobalLock"))
            for w in ["actors_given", "actors_staged", "actors_batch32"]
        ]
        print(f"Like for like ({runs}): " + "; ".join(f"{name}: {fmt_ratio(r)}" for name, r in alike) + "\n")
        # A mixed 1+1 iteration ends when its learner has done its 64-item step, so a
        # variant's mixed rate is at most 128 items per learner step at its solo rate:
        # 2 x learner_rate solo. Divided by the baseline's mixed rate, that is the best
        # ratio the variant could reach in this run whatever its actor does.
        ceilings = [
            (f"{v} {w} vs {base}", ceiling(size, v, w, base))
            for v in ["SplitLock", "LockFree"]
            for w in ["mixed", "mixed_staged"]
            for base in ["GlobalSpinLock", "GlobalLock"]
        ]
        print(
            f"Ceilings of the mixed 1+1 ratios (2 x the variant's solo learner rate / the baseline's mixed rate; {runs}): "
            + "; ".join(f"{name}: {fmt_ratio(r)}" for name, r in ceilings)
            + "\n"
        )
        # The same ceiling for a slot learner with no protocol cost at all: one as fast as
        # the sequential buffer's (GlobalSpinLock's learner alone: the sequential code and an
        # uncontended lock). Where this is below a target, no variant whose learner costs
        # at least the sequential learner's work can meet that target in that run.
        bounds = [
            (f"{w} vs {base} (target {want})", ceiling(size, "GlobalSpinLock", w, base))
            for w in ["mixed", "mixed_staged"]
            for base, want in [("GlobalSpinLock", 1.3), ("GlobalLock", 1.6)]
        ]
        print(
            f"Bounds of the mixed 1+1 ratios for a learner as fast as the sequential one (2 x GlobalSpinLock's solo learner rate / the baseline's mixed rate; {runs}): "
            + "; ".join(f"{name}: {fmt_ratio(r)}" for name, r in bounds)
            + "\n"
        )
        # And measured: `Unsynchronized` runs the same mixed workload with no protocol at
        # all (wrong results), so its ratio is what the two sides' work and the machine
        # allow; a learner beside a busy actor loses its share of the core there too. Its
        # learner is slower than the sequential one (Relaxed atomics), hence also the ratio
        # scaled by GlobalSpinLock's solo learner over its own.
        speed_up = ratio(f"learner_rate_{size}", "GlobalSpinLock", "solo", "Unsynchronized")
        unsync = []
        for w in ["mixed", "mixed_staged"]:
            for base in ["GlobalSpinLock", "GlobalLock"]:
                measured = ratio(f"concurrent_{w}_{size}", "Unsynchronized", "2", base)
                unsync.append((f"{w} vs {base}", measured))
                unsync.append(
                    (
                        f"{w} vs {base}, scaled",
                        [None if r is None or f is None else r * f for r, f in zip(measured, speed_up, strict=True)],
                    )
                )
        print(
            f"No protocol at all: Unsynchronized's mixed 1+1 ratios (scaled: times GlobalSpinLock's solo learner rate / Unsynchronized's; {runs}): "
            + "; ".join(f"{name}: {fmt_ratio(r)}" for name, r in unsync)
            + "\n"
        )


if __name__ == "__main__":
    main()
