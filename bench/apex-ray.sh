#!/usr/bin/env bash
# Ape-X on Ray with the sharded buffer (examples/apex_ray.py): CartPole-v1 solved to a
# greedy return >= 475 by actor tasks on a 2-raylet cluster on this machine, for several
# seeds; prints each run's line and a summary (docs/performance.md, "Ape-X on Ray"). Runs in the
# pinned peers' venv (torch, gymnasium, Ray; scripts/lib/peers-env.sh) with this clone's wheel.
#   bench/apex-ray.sh [--seeds N] [examples/apex_ray.py flags...]   (--smoke: one short run)
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
  python examples/apex_ray.py --seed "$seed" --json "$out/seed-$seed.json" "$@"
  [[ " $* " == *" --smoke "* ]] && exit 0
done
python - "$out" <<'PY'
import glob, json, statistics, sys
runs = [json.load(open(p)) for p in sorted(glob.glob(sys.argv[1] + "/seed-*.json"))]
solved = [r for r in runs if r["solved"]]
print(f"solved {len(solved)} of {len(runs)} seeds", end="")
if solved:
    t = statistics.median(r["evals"][-1]["seconds"] for r in solved)
    steps = statistics.median(r["evals"][-1]["learner_steps"] for r in solved)
    items = statistics.median(r["evals"][-1]["items"] for r in solved)
    rate = statistics.median(r["learner_steps_per_s"] for r in runs)
    print(f"; median time to 475: {t:.1f} s, learner steps {steps:.0f}, items inserted {items:.0f}; learner {rate:.0f} steps/s")
else:
    print()
sys.exit(0 if len(solved) == len(runs) else 1)
PY
