# Source this file (`. scripts/lib/flashbax-env.sh`) before the flashbax benchmark
# (`bench/peers.sh sequence_flashbax`). It creates, once, a venv outside the clone
# (~/.cache/kary-replay-flashbax-venv) with JAX on the CPU and flashbax at pinned versions,
# apart from the peers' venv (JAX pins its own numpy), and puts its python first on PATH.
KARY_FLASHBAX_VENV="${KARY_FLASHBAX_VENV:-$HOME/.cache/kary-replay-flashbax-venv}"
kary_flashbax_pins="jax[cpu]==0.10.2 jaxlib==0.10.2 flashbax==0.1.3 chex==0.1.92"
if [ "$(cat "$KARY_FLASHBAX_VENV/.installed" 2>/dev/null)" != "$kary_flashbax_pins" ]; then
  echo "installing JAX and flashbax into $KARY_FLASHBAX_VENV (once)"
  python3 -m venv "$KARY_FLASHBAX_VENV"
  # shellcheck disable=SC2086
  "$KARY_FLASHBAX_VENV/bin/pip" install -q $kary_flashbax_pins
  echo "$kary_flashbax_pins" >"$KARY_FLASHBAX_VENV/.installed"
fi
export PATH="$KARY_FLASHBAX_VENV/bin:$PATH"
