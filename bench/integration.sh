#!/usr/bin/env bash
# The paper's integration result, redone with today's libraries (docs/performance.md,
# "Integration"): three seeds each of
#   - TorchRL's DQN on CartPole with TorchRL's PrioritizedSampler and with KarySampler, the
#     rest of the script unchanged, and with a uniform sampler as the throughput bound
#     (bench/torchrl_dqn.py, in the pinned peers' venv);
#   - Stable-Baselines3's DQN with the RL Zoo settings (uniform replay) and the same settings
#     on kary_replay.sb3.PERDQN (bench/baselines.py sb3-dqn / sb3-perdqn).
# Logs in target/integration/, then the table (bench/integration_table.py).
#   bench/integration.sh [SEEDS...]      (default: 1 2 3)
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/integration
mkdir -p "$out"
[ $# -gt 0 ] && seeds=("$@") || seeds=(1 2 3)
. scripts/lib/py-env.sh >/dev/null
(
  . scripts/lib/peers-env.sh
  pip install -q --force-reinstall --no-deps target/wheels/kary_replay-*.whl
  for seed in "${seeds[@]}"; do
    for which in torchrl kary uniform; do
      echo "torchrl_dqn.py $which $seed"
      python bench/torchrl_dqn.py "$which" "$seed" >"$out/torchrl-$which-$seed.log" 2>&1
    done
  done
)
for seed in "${seeds[@]}"; do
  for which in sb3-dqn sb3-perdqn; do
    echo "baselines.sh $which $seed"
    bench/baselines.sh "$which" "$seed" >"$out/$which-$seed.log" 2>&1
  done
done
python3 bench/integration_table.py "$out"/*.log
