#!/usr/bin/env bash
# Checkpoint save and load beside cpprb's and TorchRL's, and plain file I/O, in one run
# (scripts/checkpoint_peers.py; docs/performance.md, "Checkpoints"):
#   scripts/checkpoint-peers.sh [--items N] [--repeats R] [--dir DIR]
# Installs the pinned peers once (scripts/peers-env.sh) and builds our side
# (examples/checkpoint_io.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release --example checkpoint_io
. scripts/peers-env.sh
exec python scripts/checkpoint_peers.py "$@"
