#!/usr/bin/env bash
# Replay through Ray, side by side in one run (scripts/ray_bench.py; docs/performance.md,
# "Through Ray"): kary-replay's ShardedReplay with 1, 2 and 4 shards (exact, one round trip,
# and per-shard RLlib-style sampling) beside TorchRL's RayReplayBuffer, in the pinned peers'
# venv (scripts/peers-env.sh, which has Ray and TorchRL) with this clone's wheel.
#   scripts/ray-bench.sh [--items N] [--shards 1,2,4] [--seconds S] [--repeats R] [--only kary,torchrl,bound] [--json PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/py-env.sh >/dev/null
. scripts/peers-env.sh
pip install -q --force-reinstall --no-deps target/wheels/kary_replay-*.whl
exec python scripts/ray_bench.py "$@"
