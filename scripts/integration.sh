#!/usr/bin/env bash
# The paper's integration result, redone with today's libraries (docs/python.md,
# "Integration"): three seeds each of
#   - TorchRL's DQN on CartPole with TorchRL's PrioritizedSampler and with KarySampler, the
#     rest of the script unchanged, and with a uniform sampler as the throughput bound
#     (scripts/torchrl_dqn.py, in the pinned peers' venv);
#   - Stable-Baselines3's DQN with the RL Zoo settings (uniform replay) and the same settings
#     on kary_replay.sb3.PERDQN (scripts/baselines.py sb3-dqn / sb3-perdqn).
# Logs in target/integration/, then the table (scripts/integration_table.py).
#   scripts/integration.sh [SEEDS...]      (default: 1 2 3)
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/integration
mkdir -p "$out"
[ $# -gt 0 ] && seeds=("$@") || seeds=(1 2 3)
. scripts/py-env.sh >/dev/null
(
  . scripts/peers-env.sh
  pip install -q --force-reinstall --no-deps target/wheels/kary_replay-*.whl
  for seed in "${seeds[@]}"; do
    for which in torchrl kary uniform; do
      echo "torchrl_dqn.py $which $seed"
      python scripts/torchrl_dqn.py "$which" "$seed" >"$out/torchrl-$which-$seed.log" 2>&1
    done
  done
)
for seed in "${seeds[@]}"; do
  for which in sb3-dqn sb3-perdqn; do
    echo "baselines.sh $which $seed"
    scripts/baselines.sh "$which" "$seed" >"$out/$which-$seed.log" 2>&1
  done
done
python3 scripts/integration_table.py "$out"/*.log
