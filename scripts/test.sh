#!/usr/bin/env bash
# Every check of the project, in the order CI runs them. Idempotent; installs what it needs.
#   formatting, clippy (-D warnings, also under --cfg loom), rustdoc (-D warnings), all tests (unit, integration,
#   property, statistical, soak, stress, doc tests), the tch feature (device buffers, with
#   libtorch from a reused venv), the Python package's tests (pytest against the built wheel),
#   the C ABI's C/C++ tests, the reference trainers' tests and
#   smoke runs (examples/cpp_trainer/test.sh, examples/rust_trainer/test.sh), a build of every benchmark, the
#   loom models (loom_tests/run.sh), Miri and ThreadSanitizer (nightly).
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

# Each step's heading, and how long the one before it took (where the run's time goes).
step_name="" step_started=$SECONDS
step() {
  [ -z "$step_name" ] || printf '(%d s: %.60s)\n' $((SECONDS - step_started)) "$step_name"
  step_name="$*" step_started=$SECONDS
  printf '\n==> %s\n' "$*"
}

step "toolchain components (rustfmt, clippy)"
for c in rustfmt clippy; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^$c"; then
    rustup component add "$c"
  fi
done

step "scripts/ and bench/ inventory: their READMEs, CONTRIBUTING's layout and the tree agree; entry points executable, answering --help"
inventory() { # the files a README's table lists, against those git tracks in its folder
  local readme="$1" dir="$2" listed tracked
  listed="$(sed -n 's/^| `\([^`]*\)` |.*/\1/p' "$readme" | sort)"
  tracked="$(git ls-files "$dir" | sed "s|^$dir/||" | grep -v '^README.md$' | sort)"
  if [ "$listed" != "$tracked" ]; then
    echo "$readme and the files in $dir/ disagree:" >&2
    diff <(echo "$listed") <(echo "$tracked") >&2 || true
    return 1
  fi
  for name in $tracked; do
    grep -q -- "$(basename "$name")" CONTRIBUTING.md || { echo "CONTRIBUTING.md does not list $dir/$name" >&2; return 1; }
  done
}
inventory scripts/README.md scripts
inventory bench/README.md bench
for entry in scripts/*.sh bench/*.sh examples/cpp_trainer/run.sh examples/cpp_trainer/test.sh \
  examples/rust_trainer/run.sh examples/rust_trainer/test.sh; do
  [ -x "$entry" ] || { echo "$entry is not executable" >&2; exit 1; }
  grep -q -- "--help" "$entry" || { echo "$entry does not say --help" >&2; exit 1; }
  # The trainers' run scripts pass --help on to the trainer (which needs a build); the rest
  # answer it themselves, at once.
  case "$entry" in scripts/run-main.sh | examples/*/run.sh) ;; *) "$entry" --help >/dev/null ;; esac
done

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
RUSTFLAGS="--cfg loom" cargo clippy -p kary-replay --target-dir target/loom --all-targets -- -D warnings

step "cargo doc (rustdoc -D warnings: broken intra-doc links fail; missing_docs is deny)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps

step "cargo test (unit, integration, property, statistical, soak, stress, doc; the C ABI from Rust)"
cargo test --workspace

step "feature tch (libtorch from the torch 2.13.0 wheel, installed once outside the clone): clippy, device-buffer tests, the example, the bench build"
(
  . scripts/lib/torch-env.sh
  cargo clippy --features tch --all-targets -- -D warnings
  # The CUDA tests run (not skip) where tch::Cuda::is_available().
  cargo test --features tch --lib --test tch
  # The numpy reader of docs/checkpoint.md, with the venv's numpy.
  KARY_NUMPY_PYTHON="$(command -v python)" cargo test --test checkpoint the_documented_numpy_reader
  cargo build --profile test --features tch --example gpu_sampling
  example=target/debug/examples/gpu_sampling
  [ -x "$example" ] || example=target/test/examples/gpu_sampling
  # Found at run time through the rpath alone, and libtorch_cuda kept linked for CUDA.
  env -u LD_LIBRARY_PATH "$example"
  if [ -e "$(python -c 'import torch, os; print(os.path.dirname(torch.__file__))')/lib/libtorch_cuda.so" ]; then
    readelf -d "$example" | grep -q 'NEEDED.*libtorch_cuda.so' ||
      { echo "libtorch_cuda.so is not linked: CUDA would not be seen" >&2; exit 1; }
  fi
  # A build check: in the test profile (optimized, as the bench profile), whose artifacts the
  # tests above built, not the bench profile's own second build of libtorch's bindings.
  cargo bench --features tch --bench tch --no-run --profile test
)

step "Python package (py/): the abi3 wheel built by maturin into a venv outside the clone, ruff, mypy (strict on the package, drop-ins included) and stubtest, its pytest suite (Ray shards on a local runtime and a 3-raylet cluster included) and doctests; the drop-ins against SB3, TorchRL and tianshou; a short Ape-X run on Ray; short CartPole runs with actor processes and actor threads"
(
  . scripts/lib/py-env.sh
  # Python held to Rust's standard: lint and format (ruff.toml), strict types (mypy.ini),
  # and the compiled module's stub against the module (stubtest); any finding fails.
  ruff check .
  ruff format --check .
  mypy
  MYPYPATH=py/python python -m mypy.stubtest kary_replay._native
  python -m pytest -q py/tests
  package="$(python -c 'import kary_replay, os; print(os.path.dirname(kary_replay.__file__))')"
  python -m pytest -q --doctest-modules "$package/__init__.py" "$package/rate.py"
  # The drop-ins against the real SB3, TorchRL and tianshou, in the pinned peers' venv.
  . scripts/lib/peers-env.sh
  pip install -q --force-reinstall --no-deps target/wheels/kary_replay-*.whl
  # What imports the hosts and the peers, type-checked where they are installed: the
  # drop-ins strictly, as the package; examples and bench/ with every body checked.
  mypy py/python/kary_replay/sb3.py py/python/kary_replay/torchrl.py py/python/kary_replay/tianshou.py py/tests/hosts/*.py examples/*.py bench/*.py
  python -m pytest -q py/tests/test_dropins.py py/tests/test_torchrl_conformance.py py/tests/test_tianshou_conformance.py \
    py/tests/test_sb3_conformance.py
  # Ape-X on a 2-raylet Ray cluster with the sharded buffer: actors insert, the learner
  # samples and updates (a short run; bench/apex-ray.sh solves CartPole with it).
  python examples/apex_ray.py --smoke
  # CartPole with actor processes sharing one buffer, and the same with actor threads (a
  # short run of each; bench/cartpole-processes.sh solves it with both).
  python examples/cartpole_processes.py --smoke
  python examples/cartpole_processes.py --smoke --mode threads
)

step "C ABI: header regenerated with the pinned cbindgen (no drift); C/C++ tests against the installed package, under valgrind"
scripts/gen-header.sh --verify
ffi/tests/run.sh

step "reference trainer (examples/cpp_trainer): environments bit-equal to gymnasium, framework tests, bad flags, smoke runs of DQN and TD3, PNG"
examples/cpp_trainer/test.sh

step "Rust trainer (examples/rust_trainer, tch): unit tests, environments bit-equal to gymnasium, bad flags, smoke runs on the CPU device (HybridBuffer and DeviceBuffer), PNG"
examples/rust_trainer/test.sh

step "cargo bench --no-run (every benchmark builds; in the test profile, reusing the tests' build)"
cargo bench --workspace --no-run --profile test

step "loom models (LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-2}), broken variants included"
loom_tests/run.sh

# Miri and ThreadSanitizer need the nightly toolchain with miri and rust-src. Install them
# if rustup can; where it cannot, say so loudly and go on. A finding fails the run.
nightly_ok=true
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  rustup toolchain install nightly --profile minimal --component miri,rust-src >/dev/null 2>&1 || nightly_ok=false
fi
if $nightly_ok; then
  for c in miri rust-src; do
    if ! rustup +nightly component list --installed 2>/dev/null | grep -q "^$c"; then
      rustup +nightly component add "$c" >/dev/null 2>&1 || nightly_ok=false
    fi
  done
fi
if $nightly_ok; then
  step "Miri: the slot protocol and storage copies (loom scenarios on real threads, a small stress run, unit tests)"
  cargo +nightly miri setup >/dev/null
  # Each interpreted step is bounded (a hang fails in minutes, not at CI's limit); the
  # three take about 1, 4 and 1 minutes here.
  timeout 900 cargo +nightly miri test --target-dir target/miri --test loom
  KARY_STRESS_SCALE=0.0004 MIRIFLAGS="-Zmiri-env-forward=KARY_STRESS_SCALE" \
    timeout 900 cargo +nightly miri test --target-dir target/miri --test stress
  timeout 900 cargo +nightly miri test --target-dir target/miri --lib -- sync:: spin:: mem:: storage:: buffer::slots:: tree::tests::simd_group
  # The sequence buffer's row copies: the named window regressions and the n-step cases
  # (about 1 minute).
  timeout 900 cargo +nightly miri test --target-dir target/miri --test sequence -- regression nstep updates bad_input

  step "ThreadSanitizer: stress tests, the rate limiter's threads alone and in the buffers, the sequence buffer's lanes and its saves while they write, and loom scenarios on real threads"
  KARY_STRESS_SCALE=0.25 RUSTFLAGS="-Zsanitizer=thread" RUSTDOCFLAGS="-Zsanitizer=thread" \
    timeout 1200 cargo +nightly test -Zbuild-std --target x86_64-unknown-linux-gnu \
    --target-dir target/tsan --test stress --test rate --test rate_buffer --test loom --test sequence
  KARY_STRESS_SCALE=0.25 RUSTFLAGS="-Zsanitizer=thread" RUSTDOCFLAGS="-Zsanitizer=thread" \
    timeout 600 cargo +nightly test -Zbuild-std --target x86_64-unknown-linux-gnu \
    --target-dir target/tsan --test sequence_checkpoint -- saves_while_lanes_write
else
  echo "!!!!! SKIPPED Miri and ThreadSanitizer: the nightly toolchain with miri and rust-src is not installed and rustup could not install it !!!!!"
fi

step "all checks passed"
