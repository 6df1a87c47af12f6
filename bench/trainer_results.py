#!/usr/bin/env python3
"""Tables for docs/performance.md, "Trainers", from the RESULT lines of kary_trainer, rust_trainer and bench/baselines.py.

    python3 bench/trainer_results.py solved LOG...      time and env steps to the threshold
    python3 bench/trainer_results.py throughput LOG...  env steps/s and gradient steps/s

`solved`: one row per (trainer, env, algo): each seed's env steps and seconds to the first
greedy evaluation at the threshold, the median over seeds (an unsolved seed counts as
infinite, so a median of "not solved" means most seeds failed), and stability (later
evaluations at the threshold / later evaluations, summed over seeds).
`throughput`: one row per (variant, actors, learners): env steps and gradient steps per
second over the whole run.
"""

import statistics
import sys


def results(paths):
    out: list[dict[str, str]] = []
    for p in paths:
        with open(p) as lines:
            out.extend(
                dict(kv.split("=", 1) for kv in line.split()[1:]) for line in lines if line.startswith("RESULT ")
            )
    return out


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def fmt(x, unit=""):
    return "not solved" if x == float("inf") else f"{x:.1f}{unit}" if unit == " s" else f"{x:.0f}"


def label(r):
    """The trainer's row label; the Rust trainer's says which buffer its learners used."""
    n = r.get("nstep", "1")
    if r["trainer"] != "rust":
        if r.get("variant") == "shared":
            return f"{r['trainer']} --processes"
        return r["trainer"] if n == "1" else f"{r['trainer']} --nstep {n}"
    if n != "1":
        return f"rust --nstep {n} (SequenceBuffer, {r.get('device', 'cpu')})"
    sampler = "DeviceBuffer" if r["variant"] == "device" else f"HybridBuffer {r['variant']}"
    return f"rust ({sampler}, {r.get('device', 'cpu')})"


def solved(rs):
    groups: dict[tuple[str, str, str], list[dict[str, str]]] = {}
    for r in rs:
        groups.setdefault((label(r), r["env"], r["algo"]), []).append(r)
    print(
        "| trainer | task | seeds: env steps / s to threshold | median env steps | median wall s | later evals at threshold |"
    )
    print("|---|---|---|---|---|---|")
    for (trainer, env, algo), g in sorted(groups.items()):
        g.sort(key=lambda r: int(r["seed"]))
        steps = [int(r["solved_steps"]) if r["solved"] == "1" else float("inf") for r in g]
        secs = [float(r["solved_s"]) if r["solved"] == "1" else float("inf") for r in g]
        per = ", ".join(
            f"{fmt(a)} / {fmt(b, ' s')}"
            if a != float("inf")
            else f"not solved ({float(r['wall_s']):.0f} s, {r['env_steps']} steps)"
            for a, b, r in zip(steps, secs, g, strict=True)
        )
        later = sum(int(r["later_ok"]) for r in g)
        total = sum(int(r["later"]) for r in g)
        print(
            f"| {trainer} | {env} {algo} | {per} | {fmt(median(steps))} | {fmt(median(secs), ' s')} | {later}/{total} |"
        )


def throughput(rs):
    print("| variant | actors | learners | env steps/s | gradient steps/s | samples/s |")
    print("|---|---|---|---|---|---|")
    for r in sorted(rs, key=lambda r: (r["variant"], int(r["actors"]), int(r["learners"]))):
        wall = float(r["wall_s"])
        es = int(r["env_steps"]) / wall
        gs = int(r["grad_steps"]) / wall
        print(
            f"| {r['variant']} | {r['actors']} | {r['learners']} | {es:.0f} | {gs:.0f} | "
            f"{int(r['priority_updates']) / wall:.0f} |"
        )


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("solved", "throughput"):
        sys.exit(__doc__)
    rs = results(sys.argv[2:])
    (solved if sys.argv[1] == "solved" else throughput)(rs)
