#!/usr/bin/env bash
# The host libraries' own replay-buffer test suites, run twice in the pinned peers' venv:
# once as they are, once with kary-replay's drop-ins swapped in by a pytest plugin
# (py/tests/hosts/kary_swap_*.py: TorchRL's PrioritizedSampler, PrioritizedSliceSampler and
# TensorDictPrioritizedReplayBuffer, tianshou's PrioritizedReplayBuffer and
# PrioritizedVectorReplayBuffer, at every name tests and the hosts' own constructors reach
# them by). Fails when a test that passes with the host's classes fails with ours and is
# not one of the differences docs/python.md lists ("Drop-ins").
#
# The suites are not in any package registry: pass checkouts of the hosts' repositories at
# the pinned versions (TorchRL 0.14, tianshou v2.0.1):
#   scripts/host-suites.sh --torchrl ~/src/rl --tianshou ~/src/tianshou
set -euo pipefail
usage="usage: $0 [--torchrl RL_CHECKOUT] [--tianshou TIANSHOU_CHECKOUT] (at least one; --help: this)"
cd "$(dirname "$0")/.."
root=$PWD
torchrl="" tianshou=""
while [ $# -gt 0 ]; do
  case "$1" in
    --torchrl) torchrl=$(realpath "$2"); shift 2 ;;
    --tianshou) tianshou=$(realpath "$2"); shift 2 ;;
    -h | --help) echo "$usage"; exit 0 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
[ -n "$torchrl$tianshou" ] || { echo "$usage" >&2; exit 2; }
. scripts/lib/peers-env.sh
pip install -q --force-reinstall --no-deps target/wheels/kary_replay-*.whl
out="${TMPDIR:-/tmp}/kary-replay-host-suites"
rm -rf "$out" && mkdir -p "$out"

# suite NAME DIR PLUGIN ALLOWED TESTS...: both runs, then the comparison. ALLOWED is a
# regular expression of the test ids whose failure with ours is a documented difference.
suite() {
  local name=$1 dir=$2 plugin=$3 allowed=$4
  shift 4
  echo "--- $name: the host's classes"
  (cd "$dir" && python -m pytest -q -p no:cacheprovider -rA "$@" >"$out/$name.host.txt" 2>&1) || true
  tail -1 "$out/$name.host.txt"
  echo "--- $name: kary-replay's classes"
  (cd "$dir" && PYTHONPATH="$root/py/tests/hosts" python -m pytest -q -p no:cacheprovider -p "$plugin" -rA "$@" \
    >"$out/$name.ours.txt" 2>&1) || true
  tail -1 "$out/$name.ours.txt"
  python - "$out/$name.host.txt" "$out/$name.ours.txt" "$allowed" <<'PY'
import re, sys
def outcomes(path):
    return {m[2]: m[1] for m in re.finditer(r"^(PASSED|FAILED|ERROR) (\S+)", open(path).read(), re.M)}
# Parametrized ids name the classes: ours under the names they stand in for.
RENAMES = {
    "KaryPrioritizedReplayBuffer": "TensorDictPrioritizedReplayBuffer",
    "KaryPrioritizedSliceSampler": "PrioritizedSliceSampler",
    "KarySampler": "PrioritizedSampler",
}
def theirs(test):
    for a, b in RENAMES.items():
        test = test.replace(a, b)
    return test
host, allowed = outcomes(sys.argv[1]), re.compile(sys.argv[3])
ours = {theirs(t): o for t, o in outcomes(sys.argv[2]).items()}
if not host:
    sys.exit(f"no test outcomes in {sys.argv[1]}: did the suite run?")
lost = sorted(t for t, o in host.items() if o == "PASSED" and ours.get(t) != "PASSED")
documented = [t for t in lost if allowed.search(t)]
undocumented = [t for t in lost if not allowed.search(t)]
passed = sum(o == "PASSED" for o in host.values())
print(f"{passed - len(lost)} of the {passed} tests that pass with the host's classes pass with ours; "
      f"{len(documented)} fail by a documented difference, {len(undocumented)} otherwise")
for t in undocumented:
    print("  undocumented:", t)
sys.exit(1 if undocumented else 0)
PY
}

status=0
if [ -n "$torchrl" ]; then
  # A sampler smaller than its storage: ours refuses the write past its capacity.
  suite torchrl "$torchrl/test/rb" kary_swap_torchrl 'test_prioritized\.py::test_ptdrb\[|test_samplers\.py::TestSamplers::test_slice_sampler_prioritized\[True-.*-2\]' \
    test_prioritized.py test_samplers.py test_rb_core.py test_storages.py test_composable.py \
    test_writers.py test_ensemble.py || status=1
fi
if [ -n "$tianshou" ]; then
  suite tianshou "$tianshou" kary_swap_tianshou '^$' \
    test/base/test_buffer.py test/base/test_collector.py \
    test/discrete/test_dqn.py::test_pdqn test/discrete/test_rainbow.py || status=1
fi
exit $status
