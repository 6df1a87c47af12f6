#!/usr/bin/env bash
# Generate include/kary_replay.h from ffi/src/lib.rs with the pinned cbindgen (installed
# here if missing). `--verify` instead fails when the committed header differs.
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
CBINDGEN_VERSION=0.29.4
export PATH="$HOME/.cargo/bin:$PATH"
if [ "$(cbindgen --version 2>/dev/null)" != "cbindgen $CBINDGEN_VERSION" ]; then
  cargo install cbindgen --locked --version "$CBINDGEN_VERSION"
fi
cd ffi
exec cbindgen --config cbindgen.toml --crate kary-replay-ffi --output ../include/kary_replay.h "$@"
