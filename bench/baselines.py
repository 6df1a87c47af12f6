#!/usr/bin/env python3
"""The comparison runs for the reference trainer's results table
(examples/cpp_trainer/README.md, "Results"): stable-baselines3's DQN and TD3 with the RL Zoo's tuned settings, and tianshou's
prioritized DQN with the settings of its own CartPole example, timed like kary_trainer.

    bench/baselines.sh sb3-dqn|sb3-perdqn|sb3-td3|tianshou-pdqn SEED

sb3-perdqn is SB3's DQN with the same settings on kary-replay (kary_replay.sb3.PERDQN:
prioritized replay, alpha 0.6, beta 0.4 to 1, the loss weighted by the importance weights).

Protocol (the same as kary_trainer's): every E env steps (2000 CartPole, 1000 Pendulum) the
current policy plays N greedy episodes (20 CartPole, 10 Pendulum) on its own environments;
the run is solved at the first evaluation whose mean return reaches the threshold (475,
-200). Time is wall time from the start of training with the evaluations' own time taken
out (they pause training here, whereas kary_trainer evaluates beside its training threads),
which favours the baselines. Prints one RESULT line in kary_trainer's format.
"""

import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch

# rl_zoo3 2.9.2, hyperparams/dqn.yml and td3.yml (the tuned entries for these tasks).
ZOO_DQN_CARTPOLE: dict[str, Any] = dict(
    n_timesteps=50_000,
    learning_rate=2.3e-3,
    batch_size=64,
    buffer_size=100_000,
    learning_starts=1000,
    gamma=0.99,
    target_update_interval=10,
    train_freq=256,
    gradient_steps=128,
    exploration_fraction=0.16,
    exploration_final_eps=0.04,
    net_arch=[256, 256],
)
ZOO_TD3_PENDULUM: dict[str, Any] = dict(
    n_timesteps=20_000,
    gamma=0.98,
    buffer_size=200_000,
    learning_starts=10_000,
    noise_std=0.1,
    gradient_steps=1,
    train_freq=1,
    learning_rate=1e-3,
    net_arch=[400, 300],
)


class Clock:
    """Wall time since start, minus the time spent evaluating."""

    def __init__(self):
        self.t0 = time.perf_counter()
        self.paused = 0.0

    def now(self):
        return time.perf_counter() - self.t0 - self.paused


class Evaluator:
    def __init__(self, env_id, every, episodes, threshold, seed, act):
        self.env = gym.make(env_id)
        self.every, self.episodes, self.threshold, self.seed = every, episodes, threshold, seed
        self.act = act  # obs (np.float32 array) -> action, greedy
        self.next = every
        self.count = 0
        self.solved = None
        self.later = self.later_ok = 0
        self.clock = Clock()

    def maybe(self, env_steps):
        if env_steps < self.next:
            return
        while self.next <= env_steps:
            self.next += self.every
        start = time.perf_counter()
        total = 0.0
        for e in range(self.episodes):
            obs, _ = self.env.reset(seed=self.seed * 1000003 + self.count * 1009 + e)
            done = False
            while not done:
                obs, r, term, trunc, _ = self.env.step(self.act(obs))
                total += float(r)
                done = term or trunc
        self.count += 1
        mean = total / self.episodes
        t = self.clock.now()
        ok = mean >= self.threshold
        if self.solved is not None:
            self.later += 1
            self.later_ok += ok
        elif ok:
            self.solved = (env_steps, t)
        print(
            f"[{t:7.1f}s] eval at {env_steps} env steps: mean greedy return {mean:.1f}"
            f"{'  SOLVED' if ok and self.later == 0 else ''}",
            flush=True,
        )
        self.clock.paused += time.perf_counter() - start

    def result(self, name, env, algo, seed, env_steps, grad_steps=None, train_s=None):
        s = self.solved
        extra = ""
        if grad_steps is not None:
            extra = f" grad_steps={grad_steps} train_s={train_s:.2f} grad_steps_per_s={grad_steps / train_s:.1f}"
        print(
            f"RESULT trainer={name} env={env} algo={algo} seed={seed} solved={int(s is not None)} "
            f"solved_steps={s[0] if s else -1} solved_s={s[1] if s else -1:.2f} later_ok={self.later_ok} "
            f"later={self.later} wall_s={self.clock.now():.2f} env_steps={env_steps}{extra}",
            flush=True,
        )


class TrainTimer:
    """Wall time inside `train` (the gradient steps: sampling, loss, backward, optimizer,
    priority updates), for gradient steps per second."""

    def __init__(self, model):
        self.seconds = 0.0
        inner = model.train

        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t

        model.train = timed


def sb3(algo, seed):
    from stable_baselines3 import DQN, TD3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.noise import NormalActionNoise

    if algo in ("dqn", "perdqn"):
        env_id, h, every, episodes, threshold = "CartPole-v1", ZOO_DQN_CARTPOLE, 2000, 20, 475.0
        env = gym.make(env_id)
        if algo == "perdqn":
            from kary_replay.sb3 import PERDQN as DQN  # the same settings, prioritized
        model: DQN | TD3 = DQN(
            "MlpPolicy",
            env,
            learning_rate=h["learning_rate"],
            batch_size=h["batch_size"],
            buffer_size=h["buffer_size"],
            learning_starts=h["learning_starts"],
            gamma=h["gamma"],
            target_update_interval=h["target_update_interval"],
            train_freq=h["train_freq"],
            gradient_steps=h["gradient_steps"],
            exploration_fraction=h["exploration_fraction"],
            exploration_final_eps=h["exploration_final_eps"],
            policy_kwargs=dict(net_arch=h["net_arch"]),
            seed=seed,
            verbose=0,
            device="cpu",
        )
    else:
        env_id, h, every, episodes, threshold = "Pendulum-v1", ZOO_TD3_PENDULUM, 1000, 10, -200.0
        env = gym.make(env_id)
        noise = NormalActionNoise(mean=np.zeros(1), sigma=h["noise_std"] * np.ones(1))
        model = TD3(
            "MlpPolicy",
            env,
            gamma=h["gamma"],
            buffer_size=h["buffer_size"],
            learning_starts=h["learning_starts"],
            action_noise=noise,
            gradient_steps=h["gradient_steps"],
            train_freq=h["train_freq"],
            learning_rate=h["learning_rate"],
            policy_kwargs=dict(net_arch=h["net_arch"]),
            seed=seed,
            verbose=0,
            device="cpu",
        )
    ev = Evaluator(env_id, every, episodes, threshold, seed, lambda obs: model.predict(obs, deterministic=True)[0])

    class Cb(BaseCallback):
        def _on_step(self):
            ev.maybe(self.num_timesteps)
            return True

    ev.clock = Clock()
    timer = TrainTimer(model)
    model.learn(total_timesteps=h["n_timesteps"], callback=Cb())
    ev.result(
        "sb3",
        "pendulum" if algo == "td3" else "cartpole",
        algo,
        seed,
        h["n_timesteps"],
        model._n_updates,
        timer.seconds,
    )


def tianshou_pdqn(seed):
    """tianshou 2.0's DQN on a PrioritizedVectorReplayBuffer, with the settings of tianshou's
    CartPole DQN example (test/discrete/test_dqn.py, --prioritized-replay): 4 x 128 MLP, lr
    1e-3, gamma 0.9, 3-step returns, target net every 320 updates, buffer 20000, alpha 0.6,
    beta 0.4, 10 training envs, 10 env steps per collect, 0.1 gradient steps per env step,
    batch 64, epsilon 0.1 for 10k steps then decaying to 0.01 by 50k."""
    from tianshou.algorithm.modelfree.dqn import DQN, DiscreteQLearningPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import Collector, PrioritizedVectorReplayBuffer
    from tianshou.env import DummyVectorEnv
    from tianshou.utils.net.common import Net
    from tianshou.utils.torch_utils import policy_within_training_step

    torch.manual_seed(seed)
    np.random.seed(seed)
    env_id, n_train, total = "CartPole-v1", 10, 50_000
    train_envs = DummyVectorEnv([lambda: gym.make(env_id) for _ in range(n_train)])
    train_envs.seed(seed)
    env = gym.make(env_id)
    assert isinstance(env.observation_space, gym.spaces.Box) and isinstance(env.action_space, gym.spaces.Discrete)
    net = Net(
        state_shape=env.observation_space.shape, action_shape=int(env.action_space.n), hidden_sizes=[128, 128, 128, 128]
    )
    policy = DiscreteQLearningPolicy(
        model=net,
        action_space=env.action_space,
        observation_space=env.observation_space,
        eps_training=0.1,
        eps_inference=0.0,
    )
    algo = DQN(
        policy=policy,
        optim=AdamOptimizerFactory(lr=1e-3),
        gamma=0.9,
        n_step_return_horizon=3,
        target_update_freq=320,
        is_double=True,
    )
    buf = PrioritizedVectorReplayBuffer(20_000, buffer_num=n_train, alpha=0.6, beta=0.4)
    collector: Collector[Any] = Collector(algo, train_envs, buf, exploration_noise=True)

    def greedy(obs):
        with torch.no_grad():
            q, _ = net(torch.as_tensor(obs[None], dtype=torch.float32))
        return int(q.argmax(-1)[0])

    ev = Evaluator(env_id, 2000, 20, 475.0, seed, greedy)
    collector.reset()
    with policy_within_training_step(policy):
        collector.collect(n_step=64 * n_train)  # tianshou's example fills a batch's worth first
    steps = 64 * n_train
    ev.clock = Clock()
    updates_due = 0.0
    while steps < total:
        eps = 0.1 if steps <= 10_000 else (0.1 - (steps - 10_000) / 40_000 * 0.09 if steps <= 50_000 else 0.01)
        policy.set_eps_training(eps)
        # What tianshou's Trainer does per training step: collect with exploration, then
        # update, both inside the training-step context.
        with policy_within_training_step(policy):
            collector.collect(n_step=10)
            steps += 10
            updates_due += 10 * 0.1
            while updates_due >= 1:
                algo.update(sample_size=64, buffer=buf)
                updates_due -= 1
        ev.maybe(steps)
    ev.result("tianshou", "cartpole", "pdqn", seed, steps)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("sb3-dqn", "sb3-perdqn", "sb3-td3", "tianshou-pdqn"):
        sys.exit(__doc__)
    which, seed = sys.argv[1], int(sys.argv[2])
    if which == "sb3-dqn":
        sb3("dqn", seed)
    elif which == "sb3-perdqn":
        sb3("perdqn", seed)
    elif which == "sb3-td3":
        sb3("td3", seed)
    else:
        tianshou_pdqn(seed)


if __name__ == "__main__":
    main()
