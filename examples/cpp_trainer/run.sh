#!/usr/bin/env bash
# Build the reference trainer (examples/cpp_trainer: C++17, LibTorch, the C ABI) and run it.
#   examples/cpp_trainer/run.sh [trainer flags...]     e.g. --env pendulum --seed 2
#   examples/cpp_trainer/run.sh --build-only
# Installs what it needs, once: cmake and g++ (apt), the torch venv (scripts/lib/torch-env.sh),
# the C ABI package (scripts/install-c.sh into target/cpp-trainer/prefix). The binary is
# target/cpp-trainer/build/kary_trainer; its flags: --help.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
command -v cargo >/dev/null || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }

missing=()
for pair in cmake:cmake g++:g++ make:make; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing with apt: ${missing[*]}"
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

. scripts/lib/torch-env.sh
out="$repo/target/cpp-trainer"
mkdir -p "$out"
scripts/install-c.sh "$out/prefix" >/dev/null
torch_cmake="$(python -c 'import torch; print(torch.utils.cmake_prefix_path)')"
# Quiet unless it fails (LibTorch's config warns about kineto, which the trainer does not use).
log="$out/build.log"
if [ ! -f "$out/build/CMakeCache.txt" ]; then
  cmake -S examples/cpp_trainer -B "$out/build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$out/prefix;$torch_cmake" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
fi
cmake --build "$out/build" -j 2 >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
if [ "${1:-}" = "--build-only" ]; then
  echo "built $out/build/kary_trainer"
  exit 0
fi
exec "$out/build/kary_trainer" "$@"
