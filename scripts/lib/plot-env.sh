# Source this file (`. scripts/lib/plot-env.sh`) before scripts/lib/plot_curve.py: it sources
# scripts/lib/torch-env.sh (the torch venv outside the clone) and installs matplotlib into that
# venv once.
. "$(dirname "${BASH_SOURCE[0]}")/torch-env.sh"
if ! python -c "import matplotlib" 2>/dev/null; then
  echo "installing matplotlib into $KARY_TORCH_VENV (once)"
  pip install -q matplotlib
fi
