#!/usr/bin/env bash
# Each side's share of its solo rate beside the other side working non-stop: one actor
# (single inserts, each item its own priority; or a staged writer of 32) and one learner
# (sample + update of 64), on every concurrent buffer, from benches/concurrent.rs's
# `*_rate_*` groups. Prints one line per side and variant with the share over each whole
# measurement (criterion's slope) against the bound of 0.5, median of RUNS runs
# [lowest-highest]. A measurement of the clock: a script and a bench row, not a test.
#   bench/fairness.sh [RUNS]     (default 3; about 1.5 minutes per run)
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
out=target/fairness-runs
rm -rf "$out"
mkdir -p "$out"
for i in $(seq 1 "$runs"); do
  cargo bench --bench concurrent -- '_rate_' >/dev/null
  cp -r target/criterion "$out/run$i"
done
python3 - "$out"/run* <<'PY'
import os, sys
sys.path.insert(0, "bench")
from concurrent_table import run_rate, quotient, SIZES, VARIANTS
roots = sys.argv[1:]
print("share of solo rate beside the other side (slope; median [lowest-highest] of %d runs; bound 0.5)" % len(roots))
for size in SIZES:
    for group in ["learner_rate", "actor_rate", "staged_actor_rate"]:
        for v in VARIANTS:
            shares = [quotient(run_rate(r, f"{group}_{size}", v, "beside", "slope"),
                               run_rate(r, f"{group}_{size}", v, "solo", "slope")) for r in roots]
            shares = sorted(s for s in shares if s is not None)
            if not shares:
                continue
            m = shares[len(shares) // 2]
            verdict = "ok" if m >= 0.5 else "BELOW"
            print(f"{size:6} {group:18} {v:15} {m:.2f} [{shares[0]:.2f}-{shares[-1]:.2f}] {verdict}")
PY
