#!/usr/bin/env bash
# The Rust trainer's tests (part of scripts/test.sh; about a minute once built):
#   1. its unit tests (flags, rate control, equation 5, the native policy, Adam against
#      torch's, the parameter server's averaging) and the environments against gymnasium's
#      trajectories (tests/trainer_envs.rs, bit for bit);
#   2. a bad flag exits with code 2 and says why;
#   3. smoke runs on the CPU device: DQN on CartPole and TD3 on Pendulum, through
#      HybridBuffer (every CPU variant) and DeviceBuffer, 2 actors + 2 learners, a priority
#      delay, --auto, --nstep on lanes of a sequence buffer: the loop runs, priorities are
#      written back, the CSV has rows, and the PNG tool (the C++ trainer's) draws it;
#   4. checkpoints: runs killed with SIGKILL after a checkpoint and resumed (--resume), on
#      both samplers, with 2 actors + 2 learners, and with --nstep's lanes.
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/torch-env.sh
out="${TMPDIR:-/tmp}/kary-rust-trainer-smoke"
rm -rf "$out"
mkdir -p "$out"

echo "--- 1. unit tests and environments"
cargo test --features tch --example rust_trainer --test trainer_envs >"$out/unit.log" 2>&1 || {
  cat "$out/unit.log" >&2
  exit 1
}
grep -E "^test result" "$out/unit.log"
# The test profile (optimized, debug assertions on), whose build the tch tests share: no
# second optimized build of libtorch's bindings in CI. examples/rust_trainer/run.sh builds --release.
cargo build --profile test --features tch --example rust_trainer >"$out/build.log" 2>&1 || {
  cat "$out/build.log" >&2
  exit 1
}
bin=target/debug/examples/rust_trainer
cargo build --profile test --bin kary-replay-ckpt >"$out/build-ckpt.log" 2>&1 || {
  cat "$out/build-ckpt.log" >&2
  exit 1
}
ckpt=target/debug/kary-replay-ckpt

echo "--- 2. bad flags"
trainer=("$bin" --device cpu)
name=rust_trainer
. scripts/lib/trainer-checks.sh
bad_flags "--actors 0" "--env mountaincar" "--variant mutex" "--frobnicate" "--env pendulum --algo dqn" "--sampler gpu" \
  "--nstep 0" "--nstep 3 --auto" "--nstep 3 --sampler device"

echo "--- 3. smoke runs (CPU device)"
. scripts/lib/plot-env.sh
smoke cartpole-dqn-hybrid --env cartpole --steps 3000 --warmup 500 --eval-every 1000 --eval-episodes 3
# No warm-up: batches are granted before the first staged insert lands (the learner waits).
smoke cartpole-no-warmup --env cartpole --steps 1500 --warmup 0 --eval-every 1000 --eval-episodes 2
smoke cartpole-no-warmup-device --sampler device --steps 1500 --warmup 0 --eval-every 1000 --eval-episodes 2
smoke cartpole-dqn-device --sampler device --steps 3000 --warmup 500 --eval-every 1000 --eval-episodes 3
smoke pendulum-td3-hybrid --env pendulum --steps 800 --warmup 300 --eval-every 400 --eval-episodes 2 --replay-ratio 32
smoke pendulum-td3-device-2x2 --env pendulum --sampler device --actors 2 --learners 2 --steps 600 --warmup 300 \
  --eval-every 300 --eval-episodes 2 --replay-ratio 32 --priority-delay 1
smoke cartpole-2x2-lockfree --actors 2 --learners 2 --variant lockfree --priority-delay 2 --steps 3000 \
  --warmup 500 --eval-every 1500 --eval-episodes 3
smoke cartpole-2x2-global --actors 2 --learners 2 --variant global --steps 2000 --warmup 500 \
  --eval-every 1000 --eval-episodes 3
smoke cartpole-auto --auto --profile-seconds 0.2 --steps 2000 --warmup 500 --eval-every 1000 --eval-episodes 3
grep -q "^--auto: choose" "$out/cartpole-auto.log" || { echo "--auto printed no choice" >&2; exit 1; }
smoke cartpole-nstep --nstep 3 --actors 2 --learners 2 --steps 3000 --warmup 500 --eval-every 1500 --eval-episodes 2
smoke pendulum-nstep --env pendulum --nstep 4 --steps 800 --warmup 300 --eval-every 400 --eval-episodes 2 \
  --replay-ratio 32
grep -q "SequenceBuffer (2 lanes, n = 3)" "$out/cartpole-nstep.log" || { echo "--nstep 3 ran without lanes" >&2; exit 1; }

echo "--- 4. checkpoints: kill, resume"
resume 20000 resume-cartpole --warmup 500 --eval-every 5000 --eval-episodes 2
resume 12000 resume-cartpole-device-2x2 --sampler device --actors 2 --learners 2 --variant lockfree \
  --priority-delay 1 --warmup 500 --eval-every 6000 --eval-episodes 2
resume 3000 resume-pendulum --env pendulum --warmup 300 --eval-every 3000 --eval-episodes 1 --replay-ratio 32
resume 12000 resume-cartpole-nstep --nstep 3 --actors 2 --learners 2 --warmup 500 --eval-every 6000 --eval-episodes 2
echo "Rust trainer tests passed"
