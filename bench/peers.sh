#!/usr/bin/env bash
# One harness of bench/ beside the Python peers, in one run, in the pinned peers' venv
# (scripts/lib/peers-env.sh; versions in scripts/lib/peers-requirements.txt):
#   bench/peers.sh checkpoint_peers [--items N] [--repeats R] [--dir DIR]
#       checkpoints beside cpprb's and TorchRL's and plain file I/O (docs/performance.md,
#       "Checkpoints"); builds our side, examples/checkpoint_io.rs
#   bench/peers.sh python_bench [--items N] [--dims 4,128] [--repeats R] [--only NAMES] [--json PATH]
#       the buffers through Python beside cpprb, TorchRL, tianshou and rlox ("Through Python")
#   bench/peers.sh ray_bench [--items N] [--shards 1,2,4] [--seconds S] [--repeats R] [--only ...] [--json PATH]
#       replay through Ray beside TorchRL's RayReplayBuffer ("Through Ray")
#   bench/peers.sh ray_sequence_bench [--steps N] [--shards 1,2,4] [--seconds S] [--repeats R] [--only kary,torchrl] [--json PATH]
#       windows over lanes through Ray beside TorchRL's RayReplayBuffer with its
#       PrioritizedSliceSampler ("Sequences through Ray")
#   bench/peers.sh rate_limit [--rounds N] [--seconds S] [--repeats R] [--json PATH]
#       wake latency beside a threading.Condition limiter, the ratio held under a 4:1
#       mismatch ("Rate limiting")
#   bench/peers.sh sequence_bench [--steps N] [--flat N] [--draws N] [--repeats R] [--only r2d2|nstep] [--json PATH]
#       windows over lanes of steps beside TorchRL's prioritized slice sampler, cpprb's and
#       SB3's n-step buffers and the flat stacked layout ("Sequences")
#   bench/peers.sh shm_bench [--kinds f32x4,u8x84x84] [--actors N] [--seconds S] [--only ...] [--json PATH]
#       actor processes and a learner on one SharedReplayBuffer beside cpprb's
#       MPPrioritizedReplayBuffer and a multiprocessing.Queue ("Processes")
#   bench/peers.sh shm_sequence_bench [--steps N] [--seconds S] [--repeats R] [--json PATH]
#       an actor process writing a lane and a learner sampling windows of one
#       SharedSequenceReplayBuffer at the R2D2 shape, each one's share of its solo rate
#       ("Sequences across processes")
#   bench/peers.sh sequence_flashbax [--steps N] [--draws N] [--repeats R] [--json PATH]
#       the R2D2 shape beside flashbax's prioritised trajectory buffer (JAX on the CPU), in
#       its own venv (scripts/lib/flashbax-env.sh)
#   bench/peers.sh reverb_bench [--batches 64,256] [--items N] [--reverb-items N] [--repeats R] [--only ...] [--json PATH]
#       an IMPALA-style queue (FIFO, consume after one draw, a Queue limit) through Python
#       beside a dm-reverb queue table, in its own venv (scripts/lib/reverb-env.sh)
# The last nine build this clone's wheel and install it beside the peers.
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ] || [ $# -eq 0 ]; then
  sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"
  [ $# -eq 0 ] && exit 2 || exit 0
fi
cd "$(dirname "$0")/.."
harness="$1"
shift
case "$harness" in
  checkpoint_peers) cargo build -q --release --example checkpoint_io ;;
  python_bench | ray_bench | ray_sequence_bench | rate_limit | sequence_bench | shm_bench | shm_sequence_bench | sequence_flashbax | reverb_bench) . scripts/lib/py-env.sh >/dev/null ;;
  *) echo "bench/peers.sh: no harness '$harness' (checkpoint_peers, python_bench, ray_bench, ray_sequence_bench, rate_limit, sequence_bench, shm_bench, shm_sequence_bench, sequence_flashbax, reverb_bench)" >&2; exit 2 ;;
esac
if [ "$harness" = sequence_flashbax ]; then
  . scripts/lib/flashbax-env.sh
  pip install -q --force-reinstall --no-deps target/wheels/kary_replay-*.whl
  exec python bench/sequence_bench.py --only r2d2 --peers ours,flashbax "$@"
fi
if [ "$harness" = reverb_bench ]; then
  . scripts/lib/reverb-env.sh
  pip install -q --force-reinstall --no-deps target/wheels/kary_replay-*.whl
  exec python bench/reverb_bench.py "$@"
fi
. scripts/lib/peers-env.sh
if [ "$harness" != checkpoint_peers ]; then
  pip install -q --force-reinstall --no-deps target/wheels/kary_replay-*.whl
fi
exec python "bench/$harness.py" "$@"
