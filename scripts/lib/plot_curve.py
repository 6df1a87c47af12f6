#!/usr/bin/env python3
"""Learning-curve PNG from the trainers' CSVs (the C++ and the Rust trainer write the same
columns). One or more CSVs (seeds, variants) are drawn on one figure: greedy evaluation
return (markers) and training return over the last 100 episodes (thin line), against env
steps (left) and wall time (right), with the task's "solved" threshold.

    python3 scripts/lib/plot_curve.py OUT.png RUN.csv [RUN2.csv ...] [--title T] [--threshold X]

Needs matplotlib (scripts/lib/plot-env.sh installs it into the torch venv once). The threshold
defaults to 475 when the title or file name says cartpole and -200 for pendulum.
"""

import argparse
import csv
import sys


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or "eval_return" not in rows[0]:
        sys.exit(f"{path}: not a trainer CSV (no eval_return column)")
    return rows


def num(v):
    return float(v) if v not in ("", None) else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("csvs", nargs="+")
    ap.add_argument("--title", default="")
    ap.add_argument("--threshold", type=float, default=None)
    a = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = " ".join([a.title, *a.csvs]).lower()
    threshold = a.threshold
    if threshold is None:
        threshold = 475.0 if "cartpole" in names else (-200.0 if "pendulum" in names else None)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for i, path in enumerate(a.csvs):
        rows = load(path)
        color = f"C{i % 10}"
        label = path.rsplit("/", 1)[-1].removesuffix(".csv")
        ev = [(num(r["env_steps"]), num(r["wall_s"]), num(r["eval_return"])) for r in rows if r["kind"] == "eval"]
        tr = [
            (num(r["env_steps"]), num(r["wall_s"]), num(r["train_return_100"]))
            for r in rows
            if r["kind"] == "progress" and num(r["train_return_100"]) is not None
        ]
        for ax, k in ((axes[0], 0), (axes[1], 1)):
            if ev:
                ax.plot(
                    [e[k] for e in ev],
                    [e[2] for e in ev],
                    "o-",
                    color=color,
                    ms=3,
                    lw=1.2,
                    label=f"{label}: greedy eval",
                )
            if tr:
                ax.plot(
                    [t[k] for t in tr],
                    [t[2] for t in tr],
                    "-",
                    color=color,
                    lw=0.7,
                    alpha=0.5,
                    label=f"{label}: training (last 100)",
                )
    for ax, xl in ((axes[0], "env steps"), (axes[1], "wall time (s)")):
        if threshold is not None:
            ax.axhline(threshold, color="k", ls="--", lw=0.8, label=f"solved ({threshold:g})")
        ax.set_xlabel(xl)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("episode return")
    axes[1].legend(fontsize=7, loc="lower right")
    fig.suptitle(a.title or "learning curve")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
