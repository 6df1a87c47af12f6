# Source this file (`. scripts/lib/peers-env.sh`) before a benchmark against the Python peers.
# It creates, once, a venv outside the clone (~/.cache/kary-replay-peers-venv) with the
# peers pinned in scripts/lib/peers-requirements.txt, reusing the CUDA libraries of the torch
# venv (scripts/lib/torch-env.sh) through a .pth file, so that only torch 2.14.1 itself and the
# libraries it adds are downloaded; then it puts that venv's python first on PATH.
. "$(dirname "${BASH_SOURCE[0]}")/torch-env.sh"
KARY_PEERS_VENV="${KARY_PEERS_VENV:-$HOME/.cache/kary-replay-peers-venv}"
kary_peers_lock="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/peers-requirements.txt"
if ! cmp -s "$kary_peers_lock" "$KARY_PEERS_VENV/.installed" 2>/dev/null; then
  echo "installing the Python peers into $KARY_PEERS_VENV (once)"
  kary_venv_with_torch "$KARY_PEERS_VENV"
  "$KARY_PEERS_VENV/bin/pip" install -q --upgrade "setuptools>=77.0.3" pip
  "$KARY_PEERS_VENV/bin/pip" install -q -r "$kary_peers_lock"
  cp "$kary_peers_lock" "$KARY_PEERS_VENV/.installed"
fi
export PATH="$KARY_PEERS_VENV/bin:$PATH"
