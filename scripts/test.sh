#!/usr/bin/env bash
# Every check of the project, in the order CI runs them. Idempotent; installs what it needs.
#   formatting, clippy (-D warnings), all tests (unit, integration, property, statistical,
#   soak, doc tests), and a build of every benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

step() { printf '\n==> %s\n' "$*"; }

step "toolchain components (rustfmt, clippy)"
for c in rustfmt clippy; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^$c"; then
    rustup component add "$c"
  fi
done

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --all-targets -- -D warnings

step "cargo test (unit, integration, property, statistical, soak, doc)"
cargo test

step "cargo bench --no-run"
cargo bench --no-run

step "all checks passed"
