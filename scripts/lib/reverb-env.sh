# Source this file (`. scripts/lib/reverb-env.sh`) before the comparisons with DeepMind's
# Reverb (the test command's `reverb` step, `bench/peers.sh reverb_bench`). It creates, once,
# a venv outside the clone (~/.cache/kary-replay-reverb-venv) with dm-reverb and the
# TensorFlow it pins (a stack of its own, apart from the peers' venv), and puts its python
# first on PATH. The caller installs this clone's wheel into it.
. "$(dirname "${BASH_SOURCE[0]}")/pinned-venv.sh"
KARY_REVERB_VENV="${KARY_REVERB_VENV:-$HOME/.cache/kary-replay-reverb-venv}"
kary_pinned_venv "$KARY_REVERB_VENV" "dm-reverb and TensorFlow" \
  "dm-reverb==0.14.0 tensorflow-cpu==2.15.1 numpy==1.26.4 pytest"
