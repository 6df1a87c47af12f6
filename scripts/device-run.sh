#!/usr/bin/env bash
# On a CUDA host, in a checkout's root, with the binaries that scripts/device-build.sh put in
# target/device/carry (copied there). Everything it measures goes under $OUT (default
# target/device/out). Modes, one or more per call, each bounded in time:
#   cuda     the CUDA tests (they fail, not skip, without CUDA), the gpu_sampling example,
#            the tch latency table (at most 6.5 minutes: each step has a timeout)
#   cores    the many-core figures: benches/concurrent.rs at T = 4, 8, 16 (36 B:
#            actors, staged actors, mixed; 1028 B: the target rows); about 6 minutes, at
#            most 8
#   trainer  the C++ trainer's --auto on all cores, the Rust trainer on CUDA with both
#            samplers (at most 6.5 minutes)
# One call per mode, in that order (what matters most first, where host time is short).
# Nothing is built there. The tch binaries find the machine's torch
# 2.11 (the one they were built against) through LD_LIBRARY_PATH.
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
set -uo pipefail
cd "$(dirname "$0")/.."
carry=target/device/carry
out="${OUT:-target/device/out}"
mkdir -p "$out"
[ -x "$carry/concurrent" ] || { echo "no $carry: run scripts/device-build.sh here first and carry it" >&2; exit 1; }
{ nproc; free -g; nvidia-smi 2>&1 | head -15; } >"$out/machine.txt" 2>&1
torch_dir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))' 2>/dev/null)
export LD_LIBRARY_PATH="${torch_dir:+$torch_dir/lib:}${LD_LIBRARY_PATH:-}"
status=0
step() { # name command...: run one step, its output in $OUT/name.txt, its status noted
  local name=$1
  shift
  echo "== $name: $*"
  "$@" >"$out/$name.txt" 2>&1
  local rc=$?
  echo "   rc=$rc ($(tail -1 "$out/$name.txt"))"
  [ "$rc" = 0 ] || status=1
}
[ $# -gt 0 ] || { echo "usage: scripts/device-run.sh cuda|trainer|cores..." >&2; exit 2; }
for mode in "$@"; do
  case "$mode" in
    cuda)
      step tch-tests timeout 150 env KARY_REQUIRE_CUDA=1 "$carry/tch-tests" --test-threads 1
      step gpu_sampling timeout 40 "$carry/gpu_sampling"
      # The CUDA columns and the CPU tree beside them (the tch_cpu columns are this
      # machine's business): the targets' N = 2^22 rows come last, so leave out what is
      # known rather than let the timeout cut them.
      step tch-bench timeout 200 env CRITERION_HOME="$out/criterion-tch" "$carry/tch-bench" \
        --bench '/(cpu_tree|tch_cuda|tch_cuda_rebuild_all)/'
      # The latency table reads target/criterion.
      rm -rf target/criterion && mkdir -p target && cp -r "$out/criterion-tch" target/criterion &&
        python3 bench/tch_table.py >"$out/tch-table.md" 2>&1
      ;;
    trainer)
      step trainer-auto timeout 200 "$carry/kary_trainer" --auto --max-threads "$(nproc)" --max-seconds 90 \
        --csv "$out/trainer-auto.csv"
      for sampler in hybrid device; do
        step "rust-trainer-cuda-$sampler" timeout 90 "$carry/rust_trainer" --device cuda --sampler "$sampler" \
          --max-seconds 30 --csv "$out/rust-trainer-cuda-$sampler.csv"
      done
      ;;
    cores)
      threads=4,8,16
      filter='^(concurrent_(actors|actors_staged|mixed|mixed_staged)_36B/.*|concurrent_(actors|actors_staged)_1028B/.*/8|concurrent_(mixed|mixed_staged)_1028B/.*/16)$|core_round_trip'
      step concurrent timeout 480 env KARY_BENCH_THREADS=$threads CRITERION_HOME="$out/criterion-concurrent" \
        "$carry/concurrent" --bench "$filter" --warm-up-time 1 --measurement-time 2
      KARY_BENCH_THREADS=$threads python3 bench/concurrent_table.py "$out/criterion-concurrent" \
        >"$out/concurrent-table.md" 2>&1
      ;;
    *)
      echo "unknown mode $mode (cuda, trainer, cores)" >&2
      status=2
      ;;
  esac
done
exit $status
