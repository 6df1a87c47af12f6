# Source this file (`. scripts/lib/torch-env.sh`) before building with `--features tch`.
# It creates, once, a virtual environment outside the clone with the PyTorch wheel that tch
# 0.26 expects (torch==2.13.0, about 4.7 GB, reused afterwards), puts its python first on
# PATH and sets LIBTORCH_USE_PYTORCH=1 so that torch-sys takes libtorch from it. Binaries
# built in this package find libtorch through an rpath (build.rs); nothing else is needed
# at run time.
KARY_TORCH_VENV="${KARY_TORCH_VENV:-$HOME/.cache/kary-replay-torch-venv}"
KARY_TORCH_VERSION=2.13.0
if ! "$KARY_TORCH_VENV/bin/python" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$KARY_TORCH_VERSION')" 2>/dev/null; then
  echo "installing torch==$KARY_TORCH_VERSION into $KARY_TORCH_VENV (once)"
  python3 -m venv "$KARY_TORCH_VENV"
  "$KARY_TORCH_VENV/bin/pip" install -q "torch==$KARY_TORCH_VERSION" numpy
fi
export PATH="$KARY_TORCH_VENV/bin:$PATH"
export LIBTORCH_USE_PYTORCH=1

# kary_venv_with_torch DIR: a new venv at DIR that sees this torch venv's packages through a
# .pth file (for the venvs of scripts/lib/py-env.sh, scripts/lib/peers-env.sh, bench/baselines.sh:
# no second download of torch's libraries).
kary_venv_with_torch() {
  python3 -m venv "$1"
  local site
  site="$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  "$KARY_TORCH_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
    >"$site/kary-replay-torch.pth"
}
