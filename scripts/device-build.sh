#!/usr/bin/env bash
# Build, here, what a CUDA host without a Rust toolchain runs (scripts/device-run.sh runs it
# there), into target/device/carry (under 64 MiB, small enough to copy):
#   - concurrent: benches/concurrent.rs (no torch), for the many-core figures;
#   - tch-tests, tch-bench, gpu_sampling, rust_trainer: the `tch` feature built against
#     torch 2.11 (the host's; tch/torch-sys 0.24 in a scratch copy whose pins are
#     changed), for the CUDA tests, the GPU latency table and the Rust trainer;
#   - kary_trainer: the C++ reference trainer (its CMake build) against torch 2.11's LibTorch.
# Usage: scripts/device-build.sh [--no-torch]   (--no-torch: the concurrent bench only)
# Then, on the host, with target/device/carry copied to the same path in a checkout:
# scripts/device-run.sh cuda (and `cores`, `trainer`). Built here, the binaries need glibc 2.34
# there, and the C++ trainer libstdc++'s GLIBCXX_3.4.30 (GCC 12); device-run.sh records a
# failure to load like any other.
# Installs, once: a torch 2.11 venv at $KARY_TORCH211_VENV (about 1.2 GB, --no-deps: headers
# and libraries to build against; it cannot be imported here).
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
carry="$repo/target/device/carry"
rm -rf "$carry"
mkdir -p "$carry"

# 1. The concurrent bench (criterion; plain release build, no torch).
bin=$(cargo bench --bench concurrent --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "concurrent":
        print(m["executable"])')
put() { # name path: copy the executable at path into the carry, without its debug info
  [ -n "$2" ] && [ -f "$2" ] || { echo "no executable for $1" >&2; tail -30 "$repo/target/device/build.log" 2>/dev/null >&2; exit 1; }
  cp "$2" "$carry/$1"
  strip --strip-debug "$carry/$1"
  echo "built $1 ($(du -h "$carry/$1" | cut -f1))"
}
put concurrent "$bin"
[ "${1:-}" = "--no-torch" ] && exit 0

# 2. torch 2.11: headers and libraries only.
venv="${KARY_TORCH211_VENV:-$HOME/.cache/kary-replay-torch211}"
torch="$venv/lib/python3.11/site-packages/torch"
if [ ! -f "$torch/lib/libtorch_cpu.so" ]; then
  echo "installing torch==2.11.0 (--no-deps) into $venv (once)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q torch==2.11.0 --no-deps
fi

# 3. The tch binaries, from a scratch copy pinned to tch/torch-sys 0.24 (torch 2.11).
scratch="$repo/target/device/src"
rm -rf "$scratch"
mkdir -p "$scratch"
git ls-files -z | xargs -0 cp --parents -t "$scratch"
sed -i -e 's/^tch = { version = "0.26"/tch = { version = "0.24"/' \
  -e 's/^torch-sys = { version = "0.26"/torch-sys = { version = "0.24"/' "$scratch/Cargo.toml"
rm -f "$scratch/Cargo.lock"
build() { # cargo subcommand and arguments (release profile; `bench` builds it anyway)
  local release=--release
  [ "$1" = bench ] && release=
  (cd "$scratch" &&
    env -u LIBTORCH_USE_PYTORCH LIBTORCH="$torch" LIBTORCH_CXX11_ABI=1 \
      RUSTFLAGS="-C link-arg=-Wl,--allow-shlib-undefined" \
      CARGO_TARGET_DIR="$repo/target/device/target" \
      cargo "$@" $release --features tch --message-format=json 2>>"$repo/target/device/build.log")
}
: >"$repo/target/device/build.log"
artifact() { # name kind: the executable of target `name` of kind `kind` in the JSON on stdin
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1] and sys.argv[2] in m["target"]["kind"]:
        print(m["executable"])' "$1" "$2"
}
put tch-tests "$(build test --no-run --test tch | artifact tch test)"
put tch-bench "$(build bench --no-run --bench tch | artifact tch bench)"
put gpu_sampling "$(build build --example gpu_sampling | artifact gpu_sampling example)"
put rust_trainer "$(build build --example rust_trainer | artifact rust_trainer example)"

# 4. The C++ trainer, as examples/cpp_trainer/run.sh builds it, against torch 2.11's LibTorch.
scripts/install-c.sh "$repo/target/device/prefix" >/dev/null
cmake -S examples/cpp_trainer -B "$repo/target/device/cpp" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$repo/target/device/prefix;$torch/share/cmake" \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,--allow-shlib-undefined" >"$repo/target/device/cmake.log" 2>&1 ||
  { tail -30 "$repo/target/device/cmake.log"; exit 1; }
cmake --build "$repo/target/device/cpp" -j 2 --target kary_trainer >>"$repo/target/device/cmake.log" 2>&1 ||
  { tail -30 "$repo/target/device/cmake.log"; exit 1; }
put kary_trainer "$repo/target/device/cpp/kary_trainer"
du -sh "$carry"
