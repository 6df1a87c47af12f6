#!/usr/bin/env bash
# Our sequence rows (R2D2 and Atari n-step, bench/sequence_bench.py --ours-only) measured for
# this checkout and for an earlier commit, alternating, in one run (docs/performance.md,
# "Sequences": what a change to the layers must leave within noise).
#   bench/sequence-ab.sh REV [--rounds N] [sequence_bench.py's flags]
# REV's wheel is built in a worktree under target/ab/ and installed beside the peers' venv
# with pip --target; this checkout's wheel as bench/peers.sh installs it. Each round runs the
# harness once per side (new, then old); the medians of each row are printed per side.
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ] || [ $# -eq 0 ]; then
  sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"
  [ $# -eq 0 ] && exit 2 || exit 0
fi
cd "$(dirname "$0")/.."
rev="$(git rev-parse --short "$1")"
shift
rounds=3
if [ "${1:-}" = --rounds ]; then rounds="$2"; shift 2; fi
. scripts/lib/py-env.sh >/dev/null
. scripts/lib/peers-env.sh
pip install -q --force-reinstall --no-deps target/wheels/kary_replay-*.whl
ab="target/ab/$rev"
if [ ! -d "$ab/site" ]; then
  rm -rf "$ab"
  mkdir -p "$ab"
  git worktree add -f --detach "$ab/src" "$rev" >/dev/null
  # The old commit builds in this checkout's maturin target dir: only what changed rebuilds.
  "$KARY_PY_VENV/bin/maturin" build --release -q -m "$ab/src/py/Cargo.toml" \
    --target-dir target/maturin -o "$ab/wheel" -i "$(command -v python)"
  pip install -q --no-deps --target "$ab/site" "$ab"/wheel/kary_replay-*.whl
  git worktree remove --force "$ab/src"
fi
out="$(mktemp -d)"
for round in $(seq "$rounds"); do
  echo "round $round: this checkout, then $rev" >&2
  OPENBLAS_NUM_THREADS=1 python bench/sequence_bench.py --ours-only --json "$out/new-$round.json" "$@" >/dev/null
  OPENBLAS_NUM_THREADS=1 PYTHONPATH="$ab/site" python bench/sequence_bench.py --ours-only \
    --json "$out/old-$round.json" "$@" >/dev/null
done
python - "$out" "$rev" <<'EOF'
import glob, json, statistics, sys

out, rev = sys.argv[1], sys.argv[2]
for side, label in (("new", "this checkout"), ("old", rev)):
    runs = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/{side}-*.json"))]
    r2d2 = [r["r2d2"][0] for r in runs if "r2d2" in r]
    nstep = [r["nstep"][0] for r in runs if "nstep" in r]
    line = f"{label:>14}:"
    if r2d2:
        line += f"  R2D2 sample {statistics.median(x['sample_ms'] for x in r2d2):6.2f} ms"
        line += f", 4 writers {statistics.median(x['writer_steps_per_s'] for x in r2d2):8.0f} steps/s"
    if nstep:
        line += f"  n-step sample {statistics.median(x['sample_us'] for x in nstep):5.0f} us"
        line += f", learner step {statistics.median(x['learner_step_us'] for x in nstep):5.0f} us"
    print(line + f"  ({len(runs)} runs)")
EOF
rm -rf "$out"
