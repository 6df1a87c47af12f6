#!/usr/bin/env bash
# Build the Rust half of the reference trainer (examples/rust_trainer: tch, the crate's API,
# learners sampling through gpu::HybridBuffer or gpu::DeviceBuffer) and run it.
#   examples/rust_trainer/run.sh [trainer flags...]     e.g. --env pendulum --sampler device
#   examples/rust_trainer/run.sh --build-only
# Installs what it needs, once: the torch venv (scripts/lib/torch-env.sh). The binary is
# target/release/examples/rust_trainer (it finds libtorch through its rpath); flags: --help.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
command -v cargo >/dev/null || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }
. scripts/lib/torch-env.sh
log="$repo/target/rust-trainer-build.log"
mkdir -p target
cargo build --release --features tch --example rust_trainer >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
if [ "${1:-}" = "--build-only" ]; then
  echo "built target/release/examples/rust_trainer"
  exit 0
fi
exec target/release/examples/rust_trainer "$@"
