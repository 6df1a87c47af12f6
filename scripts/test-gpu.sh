#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: the device-buffer tests on CUDA (they fail, rather than
# skip, if CUDA is not seen), the example on the GPU, and the latency table with CUDA columns.
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/torch-env.sh
python -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "torch sees no CUDA device")'
KARY_REQUIRE_CUDA=1 cargo test --release --features tch --test tch -- --nocapture
cargo run --release --features tch --example gpu_sampling
cargo bench --features tch --bench tch
bench/tch_table.py
