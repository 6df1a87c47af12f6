# Source this file (`. scripts/lib/py-env.sh`) to build the Python package and install it into a
# venv outside the clone (~/.cache/kary-replay-py-venv, made once with maturin, pytest,
# numpy, Ray, ruff and mypy; torch comes from the torch venv of scripts/lib/torch-env.sh through a .pth file, for
# the torch tests). The wheel is built with maturin into target/wheels (its own target dir,
# target/maturin) and reinstalled every time; that venv's python is then first on PATH.
. "$(dirname "${BASH_SOURCE[0]}")/torch-env.sh"
KARY_PY_VENV="${KARY_PY_VENV:-$HOME/.cache/kary-replay-py-venv}"
kary_repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if ! "$KARY_PY_VENV/bin/python" -c "import maturin, pytest, numpy" 2>/dev/null; then
  echo "installing maturin, pytest and numpy into $KARY_PY_VENV (once)"
  kary_venv_with_torch "$KARY_PY_VENV"
  "$KARY_PY_VENV/bin/pip" install -q "maturin==1.16.0" pytest numpy
fi
if ! "$KARY_PY_VENV/bin/ruff" --version 2>/dev/null | grep -q "^ruff 0.17.6$" ||
   ! "$KARY_PY_VENV/bin/mypy" --version 2>/dev/null | grep -q "^mypy 2.4.1 "; then
  echo "installing ruff and mypy into $KARY_PY_VENV (once), for the Python lint and types"
  "$KARY_PY_VENV/bin/pip" install -q "ruff==0.17.6" "mypy==2.4.1"
fi
if ! "$KARY_PY_VENV/bin/python" -c "import ray, psutil" 2>/dev/null; then
  echo "installing Ray into $KARY_PY_VENV (once), for kary_replay.ray and its cluster tests"
  "$KARY_PY_VENV/bin/pip" install -q "ray==2.60.*" psutil
fi
rm -rf "$kary_repo/target/wheels"
"$KARY_PY_VENV/bin/maturin" build --release --locked -q -m "$kary_repo/py/Cargo.toml" \
  --target-dir "$kary_repo/target/maturin" -o "$kary_repo/target/wheels" -i "$KARY_PY_VENV/bin/python"
"$KARY_PY_VENV/bin/pip" install -q --force-reinstall --no-deps "$kary_repo"/target/wheels/kary_replay-*.whl
export PATH="$KARY_PY_VENV/bin:$PATH"
