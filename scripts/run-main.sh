#!/usr/bin/env bash
# The main job: build the buffer and run the actor/learner loop, first on one thread with the
# sequential buffer, then with 2 actor and 2 learner threads on each concurrent buffer
# (release builds). Needs only the Rust toolchain; arguments go to both examples:
# [steps] [capacity] [fanout].
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }
cargo run --release --example actor_learner -- "$@"
echo
cargo run --release --example parallel_actors_learners -- "$@"
