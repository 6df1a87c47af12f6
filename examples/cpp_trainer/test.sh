#!/usr/bin/env bash
# The reference trainer's tests (part of scripts/test.sh; seconds once built):
#   1. env_test: the native CartPole-v1 and Pendulum-v1 replay gymnasium's trajectories
#      (examples/data/*_reference.csv) bit for bit;
#   2. framework_test: flags, rate control, equation 5, the native policy;
#   3. a bad flag exits with code 2 and says why;
#   4. smoke runs of both algorithms (DQN on CartPole, TD3 on Pendulum; 2 actors + 2
#      learners, every buffer variant, a priority delay, --auto, --nstep on lanes, actors as
#      processes): the loop runs, priorities are written back, the CSV has rows, and the PNG
#      tool draws it; an actor process killed mid-run ends the run with its name and exit 1;
#   5. checkpoints: runs killed with SIGKILL after a checkpoint and resumed (--resume), with
#      1 and 2 + 2 threads, TD3, and --nstep's lanes.
# The convergence runs are documented commands (examples/cpp_trainer/README.md), not part of this.
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/../.."
examples/cpp_trainer/run.sh --build-only
build=target/cpp-trainer/build
out="${TMPDIR:-/tmp}/kary-trainer-smoke"
rm -rf "$out"
mkdir -p "$out"

echo "--- 1. environments against gymnasium"
"$build/env_test" examples/data
echo "--- 2. framework"
"$build/framework_test"

echo "--- 3. bad flags"
trainer=("$build/kary_trainer")
name=kary_trainer
. scripts/lib/trainer-checks.sh
bad_flags "--actors 0" "--env mountaincar" "--variant mutex" "--frobnicate" "--env pendulum --algo dqn" \
  "--nstep 0" "--nstep 3 --auto" "--processes --variant split" "--processes --nstep 3" \
  "--processes --checkpoint $out/no-checkpoints"

echo "--- 4. smoke runs"
. scripts/lib/plot-env.sh
smoke cartpole-dqn --env cartpole --steps 3000 --warmup 500 --eval-every 1000 --eval-episodes 3
# No warm-up: batches are granted before the first staged insert lands (the learner waits).
smoke cartpole-no-warmup --env cartpole --steps 1500 --warmup 0 --eval-every 1000 --eval-episodes 2
smoke pendulum-td3 --env pendulum --steps 800 --warmup 300 --eval-every 400 --eval-episodes 2 --replay-ratio 32
smoke cartpole-2x2-lockfree --actors 2 --learners 2 --variant lockfree --priority-delay 2 --steps 3000 \
  --warmup 500 --eval-every 1500 --eval-episodes 3
smoke pendulum-2x2-global --env pendulum --actors 2 --learners 2 --variant global --steps 600 --warmup 300 \
  --eval-every 300 --eval-episodes 2 --replay-ratio 32
smoke cartpole-auto --auto --profile-seconds 0.2 --steps 2000 --warmup 500 --eval-every 1000 --eval-episodes 3
grep -q "^--auto: choose" "$out/cartpole-auto.log" || { echo "--auto printed no choice" >&2; exit 1; }
# n-step returns on lanes: 2 actors (2 lanes) + 2 learners, both algorithms.
smoke cartpole-nstep --nstep 3 --actors 2 --learners 2 --steps 3000 --warmup 500 --eval-every 1500 --eval-episodes 2
smoke pendulum-nstep --env pendulum --nstep 4 --steps 800 --warmup 300 --eval-every 400 --eval-episodes 2 \
  --replay-ratio 32
grep -q "n-step 3" "$out/cartpole-nstep.log" || { echo "--nstep 3 ran without lanes" >&2; exit 1; }
# Actors as processes on the shared buffer, its rate limit holding the replay ratio.
smoke cartpole-processes --processes --actors 2 --steps 3000 --warmup 500 --eval-every 1500 --eval-episodes 2
smoke pendulum-processes --env pendulum --processes --actors 2 --learners 2 --steps 800 --warmup 300 \
  --eval-every 400 --eval-episodes 2 --replay-ratio 32
grep -q "buffer shared" "$out/cartpole-processes.log" || { echo "--processes ran without the shared buffer" >&2; exit 1; }
# An actor process killed mid-run: the trainer says which and exits 1, and no process stays.
"${trainer[@]}" --processes --actors 2 --steps 100000000 >"$out/processes-killed.log" 2>&1 &
pid=$!
until grep -q "eval at" "$out/processes-killed.log"; do sleep 0.05; done
kill -KILL "$(pgrep -P "$pid" | head -n 1)"
status=0
wait "$pid" || status=$?
if [ "$status" != 1 ] || ! grep -q "actor process [0-9] (pid [0-9]*) killed by signal 9" "$out/processes-killed.log" ||
  [ -n "$(pgrep -P "$pid" || true)" ]; then
  cat "$out/processes-killed.log" >&2
  echo "a killed actor process: exit $status (want 1, the process named, no process left)" >&2
  exit 1
fi
echo "an actor process killed mid-run: the trainer names it and exits 1"

echo "--- 5. checkpoints: kill, resume"
cargo build --profile test --bin kary-replay-ckpt >"$out/build-ckpt.log" 2>&1 || {
  cat "$out/build-ckpt.log" >&2
  exit 1
}
ckpt=target/debug/kary-replay-ckpt
resume 20000 resume-cartpole --warmup 500 --eval-every 5000 --eval-episodes 2
resume 12000 resume-cartpole-2x2 --actors 2 --learners 2 --variant lockfree --priority-delay 1 --warmup 500 \
  --eval-every 6000 --eval-episodes 2
resume 3000 resume-pendulum --env pendulum --warmup 300 --eval-every 3000 --eval-episodes 1 --replay-ratio 32
resume 12000 resume-cartpole-nstep --nstep 3 --actors 2 --learners 2 --warmup 500 --eval-every 6000 --eval-episodes 2
echo "reference trainer tests passed"
