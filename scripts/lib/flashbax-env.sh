# Source this file (`. scripts/lib/flashbax-env.sh`) before the flashbax benchmark
# (`bench/peers.sh sequence_flashbax`). It creates, once, a venv outside the clone
# (~/.cache/kary-replay-flashbax-venv) with JAX on the CPU and flashbax at pinned versions,
# apart from the peers' venv (JAX pins its own numpy), and puts its python first on PATH.
. "$(dirname "${BASH_SOURCE[0]}")/pinned-venv.sh"
KARY_FLASHBAX_VENV="${KARY_FLASHBAX_VENV:-$HOME/.cache/kary-replay-flashbax-venv}"
kary_pinned_venv "$KARY_FLASHBAX_VENV" "JAX and flashbax" \
  "jax[cpu]==0.10.2 jaxlib==0.10.2 flashbax==0.1.3 chex==0.1.92"
