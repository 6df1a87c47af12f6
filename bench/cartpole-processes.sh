#!/usr/bin/env bash
# CartPole-v1 by actor processes sharing one buffer (examples/cartpole_processes.py), beside
# the same example with its actors as threads: each mode solved to a greedy return >= 475
# for several seeds; prints each run's line and a summary per mode (docs/performance.md,
# "Processes"). Runs in the pinned peers' venv (torch, gymnasium;
# scripts/lib/peers-env.sh) with this clone's wheel.
#   bench/cartpole-processes.sh [--seeds N] [examples/cartpole_processes.py flags...]
#   (--smoke: one short run of each mode)
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=3
if [[ "${1:-}" == "--seeds" ]]; then seeds="$2"; shift 2; fi
. scripts/lib/py-env.sh >/dev/null
. scripts/lib/peers-env.sh
pip install -q --force-reinstall --no-deps target/wheels/kary_replay-*.whl
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for seed in $(seq 1 "$seeds"); do
  for mode in processes threads; do
    python examples/cartpole_processes.py --mode "$mode" --seed "$seed" --json "$out/$mode-$seed.json" "$@" |
      tail -n 1
  done
  [[ " $* " == *" --smoke "* ]] && exit 0
done
python - "$out" <<'PY'
import glob, json, statistics, sys
ok = True
for mode in ("processes", "threads"):
    runs = [json.load(open(p)) for p in sorted(glob.glob(f"{sys.argv[1]}/{mode}-*.json"))]
    solved = [r for r in runs if r["solved"]]
    ok = ok and len(solved) == len(runs)
    line = f"{mode}: solved {len(solved)} of {len(runs)} seeds"
    if solved:
        t = statistics.median(r["solved_seconds"] for r in solved)
        steps = statistics.median(r["evals"][-1]["learner_steps"] for r in solved)
        line += f"; median time to 475: {t:.1f} s, learner steps {steps:.0f}"
    learner = statistics.median(r["learner_steps_per_s"] for r in runs)
    env = statistics.median(r["env_steps_per_s"] for r in runs)
    print(f"{line}; learner {learner:.0f} steps/s, actors {env:.0f} env steps/s (medians)")
sys.exit(0 if ok else 1)
PY
