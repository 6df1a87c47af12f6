#!/usr/bin/env bash
# The main job: build the buffer and run the actor/learner example (release build).
# Needs only the Rust toolchain; extra arguments go to the example: [steps] [capacity] [fanout].
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }
exec cargo run --release --example actor_learner -- "$@"
