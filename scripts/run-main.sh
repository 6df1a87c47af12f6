#!/usr/bin/env bash
# The main job: the reference trainer (examples/cpp_trainer, C++ LibTorch actors and learners
# on the buffer through its C ABI) learns CartPole-v1 with DQN + prioritized replay, with a
# progress line every 2 s and a greedy evaluation every 2000 env steps, then draws the
# learning curve. From a fresh machine it installs what it needs (cmake and g++ with apt, the
# torch venv, the C ABI package, matplotlib), builds, and runs. Extra arguments go to the
# trainer (e.g. --env pendulum, --actors 2 --learners 2, --auto; --help lists them).
# Output: target/cpp-trainer/runs/main.csv and main.png.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=target/cpp-trainer/runs
examples/cpp_trainer/run.sh --build-only
mkdir -p "$runs"
target/cpp-trainer/build/kary_trainer --csv "$runs/main.csv" "$@"
. scripts/lib/plot-env.sh
case " $* " in *" pendulum "*) threshold=-200 ;; *) threshold=475 ;; esac
python scripts/lib/plot_curve.py "$runs/main.png" "$runs/main.csv" --threshold "$threshold" \
  --title "kary_trainer ${*:---env cartpole}"
