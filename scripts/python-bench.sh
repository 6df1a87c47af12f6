#!/usr/bin/env bash
# The buffers through Python, side by side in one run (scripts/python_bench.py;
# docs/performance.md, "Through Python"): cpprb, TorchRL, tianshou, rlox and kary-replay in
# each variant, with the peers pinned in scripts/peers-requirements.txt (installed once by
# scripts/peers-env.sh) and this clone's wheel built and installed beside them.
#   scripts/python-bench.sh [--items N] [--dims 4,128] [--repeats R] [--only NAMES] [--json PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/py-env.sh >/dev/null
. scripts/peers-env.sh
pip install -q --force-reinstall --no-deps target/wheels/kary_replay-*.whl
exec python scripts/python_bench.py "$@"
