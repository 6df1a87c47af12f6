"""TorchRL's DQN on CartPole-v1 with prioritized replay: TorchRL's own prioritized buffer, or
the same script with the sampler swapped for kary-replay's (bench/integration.sh).

    python bench/torchrl_dqn.py torchrl|kary|uniform SEED

The script follows TorchRL's DQN tutorial (getting-started-5: GymEnv with StepCounter, an
MLP Q-network through QValueModule, EGreedyModule, a Collector, DQNLoss with a delayed
target, SoftUpdate, Adam) with a prioritized buffer: TensorDictReplayBuffer over a
LazyTensorStorage with ``PrioritizedSampler`` ("torchrl") or ``KarySampler`` ("kary"),
priorities from the loss's ``td_error``; nothing else differs. Every 2000 env steps the greedy
policy plays 20 episodes; the run is solved at the first evaluation averaging >= 475. Time
excludes the evaluations. "uniform" (TorchRL's RandomSampler, no priorities: another
algorithm) is the bound on throughput: a gradient step with no sampler work at all. Prints one RESULT line with gradient steps per second (time inside
the gradient steps: sample, loss, backward, step, priority update).
"""

import sys
import time

import numpy as np
import torch
from tensordict.nn import TensorDictModule as Mod, TensorDictSequential as Seq
from torch.optim import Adam
from torchrl.collectors import Collector
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.data.replay_buffers.samplers import PrioritizedSampler
from torchrl.envs import GymEnv, StepCounter, TransformedEnv
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import MLP, EGreedyModule, QValueModule
from torchrl.objectives import DQNLoss, SoftUpdate

BUFFER, BATCH, ALPHA, BETA = 100_000, 128, 0.6, 0.4
FRAMES_PER_BATCH, INIT_RANDOM, OPTIM_STEPS, TOTAL = (
    100,
    1000,
    10,
    int(__import__("os").environ.get("KARY_DQN_FRAMES", 50_000)),
)
EVAL_EVERY, EVAL_EPISODES, THRESHOLD = 2000, 20, 475.0


def main():
    which, seed = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(seed)
    np.random.seed(seed)
    torch.set_num_threads(1)
    env = TransformedEnv(GymEnv("CartPole-v1"), StepCounter())
    env.set_seed(seed)
    value_mlp = MLP(out_features=env.action_spec.shape[-1], num_cells=[64, 64])
    value_net = Mod(value_mlp, in_keys=["observation"], out_keys=["action_value"])
    policy = Seq(value_net, QValueModule(spec=env.action_spec))
    exploration = EGreedyModule(env.action_spec, annealing_num_steps=20_000, eps_init=1.0, eps_end=0.05)
    policy_explore = Seq(policy, exploration)
    collector = Collector(
        env,
        policy_explore,
        frames_per_batch=FRAMES_PER_BATCH,
        total_frames=TOTAL,
        init_random_frames=INIT_RANDOM,
        auto_register_policy_transforms=False,
    )
    if which == "kary":
        from kary_replay.torchrl import KarySampler

        sampler = KarySampler(BUFFER, alpha=ALPHA, beta=BETA)
    elif which == "uniform":
        from torchrl.data.replay_buffers.samplers import RandomSampler

        sampler = RandomSampler()
    else:
        sampler = PrioritizedSampler(BUFFER, alpha=ALPHA, beta=BETA)
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(BUFFER), sampler=sampler, priority_key="td_error", batch_size=BATCH
    )
    loss = DQNLoss(value_network=policy, action_space=env.action_spec, delay_value=True, double_dqn=True)
    optim = Adam(loss.parameters(), lr=1e-3)
    updater = SoftUpdate(loss, eps=0.99)
    eval_env = GymEnv("CartPole-v1")

    grad_s = 0.0
    grad_steps = 0
    paused = 0.0
    t0 = time.perf_counter()
    next_eval = EVAL_EVERY
    solved = None
    later = later_ok = 0
    evals = 0
    total = 0
    for data in collector:
        rb.extend(data)
        total += data.numel()
        exploration.step(data.numel())
        if total > INIT_RANDOM:
            t = time.perf_counter()
            for _ in range(OPTIM_STEPS):
                sample = rb.sample()
                loss_vals = loss(sample)
                loss_vals["loss"].backward()
                optim.step()
                optim.zero_grad()
                rb.update_tensordict_priority(sample)
                updater.step()
                grad_steps += 1
            grad_s += time.perf_counter() - t
        if total >= next_eval:
            next_eval += EVAL_EVERY
            t = time.perf_counter()
            returns = []
            with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
                for e in range(EVAL_EPISODES):
                    eval_env.set_seed(seed * 1000003 + evals * 1009 + e)
                    roll = eval_env.rollout(500, policy)
                    returns.append(roll["next", "reward"].sum().item())
            evals += 1
            paused += time.perf_counter() - t
            mean = float(np.mean(returns))
            now = time.perf_counter() - t0 - paused
            ok = mean >= THRESHOLD
            if solved is not None:
                later += 1
                later_ok += ok
            elif ok:
                solved = (total, now)
            print(
                f"[{now:7.1f}s] eval at {total} env steps: mean greedy return {mean:.1f}"
                f"{'  SOLVED' if ok and later == 0 else ''}",
                flush=True,
            )
    wall = time.perf_counter() - t0 - paused
    print(
        f"RESULT trainer=torchrl-{which} env=cartpole algo=dqn seed={seed} solved={int(solved is not None)} "
        f"solved_steps={solved[0] if solved else -1} solved_s={solved[1] if solved else -1:.2f} "
        f"later_ok={later_ok} later={later} wall_s={wall:.2f} env_steps={total} grad_steps={grad_steps} "
        f"train_s={grad_s:.2f} grad_steps_per_s={grad_steps / grad_s:.1f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
