#!/usr/bin/env bash
# The loom models (loom_tests/), exhaustive up to LOOM_MAX_PREEMPTIONS (default 2), in
# release with debug assertions, in their own target directory (the --cfg changes every
# crate's build). Includes the expected-failure models of deliberately broken buffers.
set -euo pipefail
cd "$(dirname "$0")/.."
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
export RUSTFLAGS="--cfg loom ${RUSTFLAGS:-}"
export CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true
exec cargo test --release --target-dir target/loom --test loom -- --test-threads=2 "$@"
