#!/usr/bin/env bash
# The reference trainers' results (docs/performance.md, "Trainers"), on this machine:
#   bench/trainer-results.sh [ours|rust|baselines|throughput|nstep|processes|all]     (default all)
#   ours:       kary_trainer, CartPole DQN+PER and Pendulum TD3+PER, seeds 1 2 3, defaults
#               (1 actor + 1 learner on 2 cores), CSVs and learning-curve PNGs;
#   rust:       rust_trainer, the same tasks and seeds, on the default device (CUDA where
#               available, else CPU), its learners sampling through HybridBuffer (SplitLock)
#               and through DeviceBuffer, CSVs and PNGs;
#   baselines:  stable-baselines3 DQN / TD3 (RL Zoo settings) and tianshou's prioritized DQN,
#               seeds 1 2 3 (bench/baselines.sh installs them once, outside the clone);
#   throughput: env and gradient steps/s for the three variants with A = L = 1..4, 80k
#               CartPole steps each;
#   nstep:      kary_trainer and rust_trainer with --nstep 3 (lanes of a sequence buffer)
#               beside --nstep 1, both tasks, seeds 1 2 3;
#   processes:  kary_trainer with its actors as processes (--processes, the shared buffer)
#               beside threads, both tasks, seeds 1 2 3.
# Logs, CSVs and PNGs go to target/trainer-results/; the tables are printed at the end.
# Run it on a quiet machine: it measures wall time. About 45 minutes on 2 cores.
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
out=target/trainer-results
mkdir -p "$out"
examples/cpp_trainer/run.sh --build-only
. scripts/lib/plot-env.sh
bin=target/cpp-trainer/build/kary_trainer
if [ "$what" = rust ] || [ "$what" = nstep ] || [ "$what" = all ]; then
  examples/rust_trainer/run.sh --build-only
fi
rbin=target/release/examples/rust_trainer

if [ "$what" = ours ] || [ "$what" = all ]; then
  for env in cartpole pendulum; do
    for seed in 1 2 3; do
      "$bin" --env "$env" --seed "$seed" --csv "$out/cpp-$env-$seed.csv" | tee "$out/cpp-$env-$seed.log" | grep -E "SOLVED|^solved|^not solved"
    done
    python scripts/lib/plot_curve.py "$out/cpp-$env.png" "$out/cpp-$env-"{1,2,3}.csv \
      --title "kary_trainer (C++): $env, seeds 1-3"
  done
fi
if [ "$what" = rust ] || [ "$what" = all ]; then
  for sampler in hybrid device; do
    for env in cartpole pendulum; do
      for seed in 1 2 3; do
        "$rbin" --env "$env" --seed "$seed" --sampler "$sampler" --csv "$out/rust-$sampler-$env-$seed.csv" |
          tee "$out/rust-$sampler-$env-$seed.log" | grep -E "SOLVED|^solved|^not solved"
      done
      python scripts/lib/plot_curve.py "$out/rust-$sampler-$env.png" "$out/rust-$sampler-$env-"{1,2,3}.csv \
        --title "rust_trainer ($sampler sampler): $env, seeds 1-3"
    done
  done
fi
if [ "$what" = baselines ] || [ "$what" = all ]; then
  for which in sb3-dqn sb3-td3 tianshou-pdqn; do
    for seed in 1 2 3; do
      bench/baselines.sh "$which" "$seed" | tee "$out/$which-$seed.log" | grep -E "SOLVED|^RESULT"
    done
  done
fi
if [ "$what" = throughput ] || [ "$what" = all ]; then
  for variant in global split lockfree; do
    for n in 1 2 3 4; do
      "$bin" --variant "$variant" --actors "$n" --learners "$n" --steps 80000 --eval-every 100000000 \
        --progress-seconds 100 >"$out/throughput-$variant-$n.log"
      grep '^RESULT' "$out/throughput-$variant-$n.log"
    done
  done
fi
if [ "$what" = nstep ] || [ "$what" = all ]; then
  for n in 1 3; do
    for env in cartpole pendulum; do
      for seed in 1 2 3; do
        "$bin" --env "$env" --seed "$seed" --nstep "$n" >"$out/nstep$n-$env-$seed.log"
        grep '^RESULT' "$out/nstep$n-$env-$seed.log"
        "$rbin" --env "$env" --seed "$seed" --nstep "$n" >"$out/nstep$n-rust-$env-$seed.log"
        grep '^RESULT' "$out/nstep$n-rust-$env-$seed.log"
      done
    done
  done
  echo
  python3 bench/trainer_results.py solved "$out"/nstep*.log
fi
if [ "$what" = processes ] || [ "$what" = all ]; then
  for env in cartpole pendulum; do
    for seed in 1 2 3; do
      for mode in threads processes; do
        flags=()
        [ "$mode" = processes ] && flags=(--processes)
        "$bin" --env "$env" --seed "$seed" "${flags[@]}" >"$out/$mode-$env-$seed.log"
        grep '^RESULT' "$out/$mode-$env-$seed.log"
      done
    done
  done
  echo
  python3 bench/trainer_results.py solved "$out"/threads-*.log "$out"/processes-*.log
fi
echo
# The time-to-solve table of whatever runs are there (a mode alone may have made none).
solved_logs=$(ls "$out"/cpp-*.log "$out"/rust-*.log "$out"/sb3-*.log "$out"/tianshou-*.log 2>/dev/null || true)
if [ -n "$solved_logs" ]; then
  python3 bench/trainer_results.py solved $solved_logs
fi
echo
if ls "$out"/throughput-*.log >/dev/null 2>&1; then
  python3 bench/trainer_results.py throughput "$out"/throughput-*.log
fi
