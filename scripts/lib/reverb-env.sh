# Source this file (`. scripts/lib/reverb-env.sh`) before the comparisons with DeepMind's
# Reverb (the test command's `reverb` step, `bench/peers.sh reverb_bench`). It creates, once,
# a venv outside the clone (~/.cache/kary-replay-reverb-venv) with dm-reverb and the
# TensorFlow it pins (a stack of its own, apart from the peers' venv), and puts its python
# first on PATH. The caller installs this clone's wheel into it.
KARY_REVERB_VENV="${KARY_REVERB_VENV:-$HOME/.cache/kary-replay-reverb-venv}"
kary_reverb_pins="dm-reverb==0.14.0 tensorflow-cpu==2.15.1 numpy==1.26.4 pytest"
if [ "$(cat "$KARY_REVERB_VENV/.installed" 2>/dev/null)" != "$kary_reverb_pins" ]; then
  echo "installing dm-reverb and TensorFlow into $KARY_REVERB_VENV (once)"
  python3 -m venv "$KARY_REVERB_VENV"
  # shellcheck disable=SC2086
  "$KARY_REVERB_VENV/bin/pip" install -q $kary_reverb_pins
  echo "$kary_reverb_pins" >"$KARY_REVERB_VENV/.installed"
fi
export PATH="$KARY_REVERB_VENV/bin:$PATH"
