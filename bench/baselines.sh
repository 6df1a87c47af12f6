#!/usr/bin/env bash
# Run one comparison run of the reference trainer's results table (bench/baselines.py):
#   bench/baselines.sh sb3-dqn|sb3-perdqn|sb3-td3|tianshou-pdqn SEED
# Installs, once, a venv outside the clone (~/.cache/kary-replay-baselines-venv) with
# stable-baselines3, tianshou and gymnasium from PyPI; it reuses the torch of the project's
# torch venv (scripts/lib/torch-env.sh) through a .pth file instead of a second 4.7 GB download.
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
. "$repo/scripts/lib/torch-env.sh"
venv="${KARY_BASELINES_VENV:-$HOME/.cache/kary-replay-baselines-venv}"
if ! "$venv/bin/python" -c "import stable_baselines3, tianshou, gymnasium" 2>/dev/null; then
  echo "installing stable-baselines3, tianshou, gymnasium into $venv (once)"
  kary_venv_with_torch "$venv"
  "$venv/bin/pip" install -q "stable-baselines3==2.9.2" "tianshou==2.0.1" "gymnasium==1.4.0"
fi
if [ "${1:-}" = sb3-perdqn ]; then
  # This clone's Python package (kary_replay.sb3), built and installed into the venv.
  . "$repo/scripts/lib/py-env.sh" >/dev/null
  "$venv/bin/pip" install -q --force-reinstall --no-deps "$repo"/target/wheels/kary_replay-*.whl
fi
exec "$venv/bin/python" "$repo/bench/baselines.py" "$@"
