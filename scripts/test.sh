#!/usr/bin/env bash
# Every check of the project, in two tiers. Idempotent; installs what it needs.
#
#   scripts/test.sh          the full run, what CI runs (.ci/run): every check below.
#   scripts/test.sh --fast   the fast tier, for each change: the inventory and import-cycle
#                            checks, formatting, clippy, rustdoc, the Rust tests with the long
#                            ones small (KARY_STRESS_SCALE), the C header's drift check, the
#                            Python package's lint, types and unit tests. Minutes once built.
#   scripts/test.sh --serial [--fast]
#                            the same, one step at a time (to read a failure without the
#                            other steps' load on the machine).
#
# The full run adds: clippy under --cfg loom, the Rust tests at full size, the tch feature
# (device buffers, libtorch from a torch venv outside the clone), the Python drop-ins against
# SB3, TorchRL and tianshou, Ray and the processes examples, the C/C++ tests under valgrind,
# both reference trainers, every benchmark's build, the loom models, Miri and ThreadSanitizer.
#
# Steps that share no build run at once, in lanes (one per target directory): each step's
# output goes to target/test-logs/<step>.log; the console shows each step as it ends, then
# every log in order, then the steps' times. CONTRIBUTING.md says what each step checks.
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

tier=full serial=false
for arg in "$@"; do
  case "$arg" in
    --fast) tier=fast ;;
    --serial) serial=true ;;
    *) echo "scripts/test.sh: unknown argument '$arg' (--fast, --serial, --help)" >&2; exit 2 ;;
  esac
done
# The long tests' size (tests/support/scale.rs): full in the full run, small in the fast one.
if [ "$tier" = fast ]; then export KARY_STRESS_SCALE="${KARY_STRESS_SCALE:-0.05}"; fi

# --- the steps (each runs in its own `set -euo pipefail` subshell) ---------------------------

step_checks() {
  echo "--- the maps: docs/layout.md, scripts/README.md, bench/README.md against the tracked files"
  python3 scripts/lib/check_layout.py
  echo "--- entry points: executable, answering --help"
  local entry
  for entry in scripts/*.sh bench/*.sh examples/cpp_trainer/run.sh examples/cpp_trainer/test.sh \
    examples/rust_trainer/run.sh examples/rust_trainer/test.sh; do
    [ -x "$entry" ] || { echo "$entry is not executable" >&2; return 1; }
    grep -q -- "--help" "$entry" || { echo "$entry does not say --help" >&2; return 1; }
    # The trainers' run scripts pass --help on to the trainer (which needs a build).
    case "$entry" in scripts/run-main.sh | examples/*/run.sh) ;; *) "$entry" --help >/dev/null ;; esac
  done
  echo "--- import cycles (file level) in src/, ffi/src, py/src"
  python3 scripts/lib/import_cycles.py --known scripts/lib/known-cycles.txt src ffi/src py/src
  echo "--- no Rust file in src/ over 900 lines"
  local long
  long=$(git ls-files 'src/*.rs' | xargs wc -l | awk '$2 != "total" && $1 > 900 {print $2 " (" $1 " lines)"}')
  [ -z "$long" ] || { echo "over 900 lines (split by concern): $long" >&2; return 1; }
  echo "--- cargo fmt --check"
  cargo fmt --all -- --check
}

step_clippy() {
  cargo clippy --workspace --all-targets -- -D warnings
}

# The library and the models: the code that --cfg loom changes (the other targets are linted
# as they are built, by step_clippy).
step_clippy_loom() {
  RUSTFLAGS="--cfg loom" cargo clippy -p kary-replay --target-dir target/loom --lib --test loom -- -D warnings
}

step_doc() {
  RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
}

step_cargo_test() {
  cargo test --workspace
}

step_header() {
  scripts/gen-header.sh --verify
}

step_tch() {
  . scripts/lib/torch-env.sh
  # In the test profile, as every tch build here: one run of torch-sys's build script (a
  # C++ compile of minutes) serves clippy, the tests, the example and the bench build.
  # The targets the feature changes (the library, and those that need it); step_clippy lints
  # every other target, whose code no cfg of the feature touches.
  cargo clippy --profile test --features tch --lib --test tch --example gpu_sampling \
    --example rust_trainer --bench tch -- -D warnings
  # The CUDA tests run (not skip) where tch::Cuda::is_available().
  cargo test --features tch --lib --test tch
  # The numpy reader of docs/checkpoint.md, with the venv's numpy, on step_cargo_test's build
  # (the feature changes nothing it reads).
  KARY_NUMPY_PYTHON="$(command -v python)" cargo test --test checkpoint the_documented_numpy_reader
  cargo build --profile test --features tch --example gpu_sampling
  local example=target/debug/examples/gpu_sampling
  # Found at run time through the rpath alone, and libtorch_cuda kept linked for CUDA.
  env -u LD_LIBRARY_PATH "$example"
  if [ -e "$(python -c 'import torch, os; print(os.path.dirname(torch.__file__))')/lib/libtorch_cuda.so" ]; then
    readelf -d "$example" | grep -q 'NEEDED.*libtorch_cuda.so' ||
      { echo "libtorch_cuda.so is not linked: CUDA would not be seen" >&2; return 1; }
  fi
  # A build check in the test profile, whose artifacts the tests above built.
  cargo bench --features tch --bench tch --no-run --profile test
}

# The package's wheel, lint, types and own tests (the fast tier skips the Ray cluster tests).
step_python() {
  . scripts/lib/py-env.sh
  export MYPY_CACHE_DIR="$HOME/.cache/kary-replay-mypy/package"
  ruff check .
  ruff format --check .
  mypy
  MYPYPATH=py/python python -m mypy.stubtest kary_replay._native
  if [ "$tier" = fast ]; then
    python -m pytest -q -p no:cacheprovider py/tests --ignore=py/tests/test_ray.py
  else
    python -m pytest -q -p no:cacheprovider --durations=8 py/tests
  fi
  local package
  package="$(python -c 'import kary_replay, os; print(os.path.dirname(kary_replay.__file__))')"
  python -m pytest -q -p no:cacheprovider --doctest-modules "$package/__init__.py" "$package/_flat.py" \
    "$package/_sequence.py" "$package/rate.py"
}

# The drop-ins against the real SB3, TorchRL and tianshou, in the pinned peers' venv, with the
# wheel step_python built; Ape-X on a 2-raylet Ray cluster; CartPole with actor processes and
# with actor threads (short runs: bench/apex-ray.sh and bench/cartpole-processes.sh solve it).
step_peers() {
  . scripts/lib/peers-env.sh
  export MYPY_CACHE_DIR="$HOME/.cache/kary-replay-mypy/peers"
  pip install -q --force-reinstall --no-deps target/wheels/kary_replay-*.whl
  mypy py/python/kary_replay/sb3.py py/python/kary_replay/torchrl.py py/python/kary_replay/tianshou.py \
    py/tests/hosts/*.py examples/*.py bench/*.py
  python -m pytest -q -p no:cacheprovider py/tests/test_dropins.py py/tests/test_torchrl_conformance.py \
    py/tests/test_tianshou_conformance.py py/tests/test_sb3_conformance.py
  python examples/apex_ray.py --smoke
  python examples/apex_ray.py --lanes --smoke
  python examples/cartpole_processes.py --smoke
  python examples/cartpole_processes.py --lanes --smoke
  python examples/r2d2_processes.py --smoke
  python examples/cartpole_processes.py --smoke --mode threads
}

# Decisions beside a real Reverb table (dm-reverb in a venv of its own), with the wheel
# step_python built.
step_reverb() {
  . scripts/lib/reverb-env.sh
  pip install -q --force-reinstall --no-deps target/wheels/kary_replay-*.whl
  python -m pytest -q -p no:cacheprovider py/tests/test_reverb_anchor.py
}

step_c_abi() {
  ffi/tests/run.sh
}

step_cpp_trainer() {
  examples/cpp_trainer/test.sh
}

step_rust_trainer() {
  examples/rust_trainer/test.sh
}

step_bench_build() {
  cargo bench --workspace --no-run --profile test
}

step_loom() {
  loom_tests/run.sh
}

# Miri and ThreadSanitizer need the nightly toolchain with miri and rust-src; installed here
# when rustup can, else one loud SKIPPED line. A finding fails the run.
nightly_ready() {
  if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal --component miri,rust-src >/dev/null 2>&1 || return 1
  fi
  local c
  for c in miri rust-src; do
    if ! rustup +nightly component list --installed 2>/dev/null | grep -q "^$c"; then
      rustup +nightly component add "$c" >/dev/null 2>&1 || return 1
    fi
  done
}

step_miri() {
  if ! $nightly; then
    echo "!!!!! SKIPPED Miri: the nightly toolchain with miri and rust-src is not installed and rustup could not install it !!!!!"
    return 0
  fi
  cargo +nightly miri setup >/dev/null
  # Built first, unbounded (a slow machine compiles slowly); then each interpreted run is
  # bounded: a hang fails in minutes, not at CI's limit.
  # Unloaded they take about 2.5, 2, 0.7 and 2 minutes; the bound leaves room for a machine
  # that the other lanes load threefold.
  cargo +nightly miri test --no-run --target-dir target/miri --test loom --test stress --test sequence --lib
  timeout 1500 cargo +nightly miri test --target-dir target/miri --test loom
  # The slot-protocol variants on real threads (the global-lock ones are the sequential
  # buffer behind a lock, which the loom scenarios above run under Miri too).
  KARY_STRESS_SCALE=0.0002 MIRIFLAGS="-Zmiri-env-forward=KARY_STRESS_SCALE" \
    timeout 1500 cargo +nightly miri test --target-dir target/miri --test stress -- split_lock_under_stress lock_free_under_stress
  timeout 1500 cargo +nightly miri test --target-dir target/miri --lib -- sync:: spin:: mem:: storage:: buffer::slots:: tree::tests::simd_group
  # The sequence buffer's row copies: the named window regressions and the n-step cases.
  timeout 1500 cargo +nightly miri test --target-dir target/miri --test sequence -- regression nstep updates bad_input
}

step_tsan() {
  if ! $nightly; then
    echo "!!!!! SKIPPED ThreadSanitizer: the nightly toolchain with rust-src is not installed and rustup could not install it !!!!!"
    return 0
  fi
  export KARY_STRESS_SCALE=0.25 RUSTFLAGS="-Zsanitizer=thread" RUSTDOCFLAGS="-Zsanitizer=thread"
  local tsan=(cargo +nightly test -Zbuild-std --target x86_64-unknown-linux-gnu --target-dir target/tsan)
  local threaded=(--test stress --test rate --test rate_buffer --test loom --test sequence)
  # Built first, unbounded (with the standard library, instrumented); then the runs bounded.
  "${tsan[@]}" --no-run "${threaded[@]}" --test sequence_checkpoint
  timeout 1200 "${tsan[@]}" "${threaded[@]}"
  timeout 600 "${tsan[@]}" --test sequence_checkpoint -- saves_while_lanes_write
}

# --- the plan: lanes of steps (one lane per build it owns), and the order logs replay in -----

declare -A title
title[checks]="the maps, entry points, import cycles, cargo fmt --check"
title[clippy]="cargo clippy --workspace --all-targets -D warnings"
title[clippy_loom]="cargo clippy under --cfg loom: the library and the loom models (target/loom)"
title[doc]="cargo doc (rustdoc -D warnings; missing_docs is deny)"
title[cargo_test]="cargo test --workspace (unit, integration, property, statistical, soak, stress, doc; the C ABI from Rust)"
title[header]="C header: regenerated with the pinned cbindgen, no drift"
title[tch]="feature tch (libtorch from the torch 2.13.0 wheel, outside the clone): clippy, device-buffer tests, the example, the bench build"
title[python]="Python package: the abi3 wheel (maturin, target/maturin), ruff, mypy --strict, stubtest, pytest, doctests"
title[peers]="Python drop-ins against SB3, TorchRL and tianshou; Ape-X on a Ray cluster; CartPole with actor processes and threads"
title[reverb]="FIFO, LIFO, consume after k and deletions beside a real dm-reverb 0.14 table, call by call"
title[c_abi]="C ABI: C/C++ tests against the installed package, natively and under valgrind"
title[cpp_trainer]="reference trainer (examples/cpp_trainer): environments bit-equal to gymnasium, framework tests, bad flags, smoke runs, kills and resumes"
title[rust_trainer]="Rust trainer (examples/rust_trainer, tch): unit tests, environments, bad flags, smoke runs, kills and resumes"
title[bench_build]="cargo bench --no-run (every benchmark builds, in the test profile)"
title[loom]="loom models (LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-2}), broken twins included (target/loom)"
title[miri]="Miri: the slot protocol and storage copies (target/miri)"
title[tsan]="ThreadSanitizer: stress, rate limiter, sequence lanes, loom scenarios on real threads (target/tsan)"

if [ "$tier" = fast ]; then
  lanes=(
    "checks clippy doc cargo_test"
    "header python"
  )
else
  lanes=(
    "checks clippy doc cargo_test bench_build tch rust_trainer"
    "header python reverb peers c_abi cpp_trainer"
    "miri"
    "clippy_loom loom tsan"
  )
fi

# The toolchain's parts, once, before the lanes (two lanes must not run rustup at once).
for c in rustfmt clippy; do
  rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
done
nightly=false
if [ "$tier" = full ] && nightly_ready; then nightly=true; fi

logs=target/test-logs
rm -rf "$logs"
mkdir -p "$logs"
started=$SECONDS

# The CPU seconds (user and system) that this shell's finished children took between the two
# `times` outputs in files $1 and $2 (`times` runs in the lane's shell, not in a `$(...)`
# subshell, which has no children of its own).
cpu_between() {
  awk 'FNR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] }
                  d = (FNR == NR) ? -t : d + t }
       END { printf "%d", d }' "$1" "$2"
}

run_step() {
  local id="$1" t0=$SECONDS rc=0
  times >"$logs/$id.times0"
  # Not in a tested context, so `set -e` holds inside the subshell.
  set +e
  (
    set -euo pipefail
    "step_$id"
  ) >"$logs/$id.log" 2>&1
  rc=$?
  set -e
  times >"$logs/$id.times1"
  echo "$rc $((SECONDS - t0)) $(cpu_between "$logs/$id.times0" "$logs/$id.times1")" >"$logs/$id.result"
  printf '[%4d s] %-13s %s in %d s\n' $((SECONDS - started)) "$id" \
    "$([ "$rc" = 0 ] && echo ok || echo "FAILED (exit $rc)")" $((SECONDS - t0))
}

run_lane() {
  local id
  for id in $1; do run_step "$id"; done
}

echo "scripts/test.sh: the $tier tier, $([ "$serial" = true ] && echo "one step at a time" || echo "${#lanes[@]} lanes at once"); logs in $logs/"
pids=()
for lane in "${lanes[@]}"; do
  if $serial; then run_lane "$lane"; else
    run_lane "$lane" &
    pids+=($!)
  fi
done
for pid in "${pids[@]}"; do wait "$pid"; done

# --- the logs in order, then the times --------------------------------------------------------

failed=()
for lane in "${lanes[@]}"; do
  for id in $lane; do
    printf '\n==> %s\n' "${title[$id]}"
    cat "$logs/$id.log"
    read -r rc secs _ <"$logs/$id.result"
    printf '(%d s: %s)\n' "$secs" "$id"
    [ "$rc" = 0 ] || failed+=("$id")
  done
done
# CPU: the step's processes' user and system seconds (a daemon it leaves running not counted);
# their sum over the machine's cores bounds the wall clock from below.
printf '\n%-13s %7s %7s  %s\n' step seconds cpu lane
lane_no=0 cpu_total=0
for lane in "${lanes[@]}"; do
  lane_no=$((lane_no + 1))
  for id in $lane; do
    read -r rc secs cpu <"$logs/$id.result"
    cpu_total=$((cpu_total + cpu))
    printf '%-13s %7d %7d  %d%s\n' "$id" "$secs" "$cpu" "$lane_no" "$([ "$rc" = 0 ] || echo "  FAILED")"
  done
done
printf '%-13s %7d %7d  (wall clock; CPU seconds over %d cores)\n' total $((SECONDS - started)) "$cpu_total" "$(nproc)"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]} (their logs: $logs/<step>.log, replayed above)" >&2
  exit 1
fi
echo "all checks of the $tier tier passed"
