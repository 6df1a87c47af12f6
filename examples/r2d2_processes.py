"""R2D2's shape with actor processes on one kary-replay buffer (`kr.SharedSequenceReplayBuffer`):
a recurrent Q-network learns CartPole-v1 with the velocities hidden (the observation is the
cart's position and the pole's angle only, so the agent must remember to act well).

- The learner (this process) makes the buffer and a block of shared memory for its
  network's weights, then starts A actor processes (spawned; each attaches to the buffer
  by unpickling it, which carries only its name).
- Each actor steps E environments epsilon-greedily (Ape-X's per-actor epsilons) with its own
  copy of the LSTM Q-network, one lane per environment: every step pushes the observation,
  the action, the reward and the LSTM state the actor had before the step (R2D2's stored
  state), and an episode's end stores its final observation. Every `--sync-every` x 64 steps
  it copies the learner's latest weights.
- The buffer holds sequences of `--burn-in` + `--train` steps starting every `--period`
  steps of an episode (R2D2: 40 + 80 every 40; here 8 + 24 every 16), prioritized; a
  sequence cut by its episode's end is kept shorter (masked).
- The learner samples B sequences, unrolls both networks from each one's stored state over
  the burn-in without gradients, then over the rest; one-step double-Q targets along the
  sequence (the step after the last one is the sample's `next_obs`; a sequence that ended
  its episode ends in a terminal), importance weights on the loss, and sets each
  sequence's priority to `kr.sequence_priorities(|td|, mask, eta=0.9)` by key.
- Every `--eval-every` learner steps it plays `--eval-episodes` greedy episodes; the run
  succeeds when their mean return reaches `--target` (195 by default: CartPole-v0's bar,
  on the harder partially observed task).

Prints one line per evaluation and a final line; `--json PATH` writes the run's figures.
Exit status 0 when the target is reached (with `--smoke`: when the learner stepped and the
actors wrote).
"""

import argparse
import json
import multiprocessing as mp
import sys
import time
from typing import Any

import numpy as np
from cartpole_processes import Weights

GAMMA = 0.99
OBS = 2  # position and angle: CartPole-v1's observation without its velocities


def masked(obs: Any) -> Any:
    return np.asarray(obs, np.float32)[[0, 2]]


def make_net(torch: Any, hidden: int) -> Any:
    class Recurrent(torch.nn.Module):  # type: ignore[misc]
        """Observation -> linear -> LSTM -> 2 action values."""

        def __init__(self) -> None:
            super().__init__()
            self.inp = torch.nn.Linear(OBS, hidden)
            self.lstm = torch.nn.LSTM(hidden, hidden, batch_first=True)
            self.out = torch.nn.Linear(hidden, 2)

        def forward(self, obs: Any, state: tuple[Any, Any]) -> tuple[Any, tuple[Any, Any]]:
            """obs (B, T, OBS), state ((1, B, H), (1, B, H)) -> q (B, T, 2), the state after."""
            x = torch.relu(self.inp(obs))
            y, state = self.lstm(x, state)
            return self.out(y), state

    return Recurrent()


def schema(hidden: int) -> dict[str, Any]:
    return {
        "obs": ("float32", (OBS,)),
        "action": ("int64", ()),
        "reward": ("float32", ()),
        "h": ("float32", (hidden,)),
        "c": ("float32", (hidden,)),
    }


def act(index: int, replay: Any, weights: Weights, stop: Any, env_steps: Any, cfg: dict[str, Any]) -> None:
    """One actor process: E environments, one lane each, a fixed epsilon."""
    import gymnasium as gym
    import torch

    torch.set_num_threads(1)
    hidden = cfg["hidden"]
    net = make_net(torch, hidden)
    version = weights.load(torch, net, -1)
    rng = np.random.default_rng(cfg["seed"])
    envs = [gym.make("CartPole-v1") for _ in range(cfg["envs"])]
    obs = np.stack([masked(e.reset(seed=cfg["seed"] * 1000 + i)[0]) for i, e in enumerate(envs)])
    h = torch.zeros(1, len(envs), hidden)
    c = torch.zeros(1, len(envs), hidden)
    lanes = [replay.lane(cfg["first_lane"] + i) for i in range(len(envs))]
    steps = 0
    while not stop.is_set():
        if steps % (64 * cfg["sync_every"]) < len(envs):
            version = weights.load(torch, net, version)
        with torch.no_grad():
            q, (h2, c2) = net(torch.from_numpy(obs)[:, None], (h, c))
        greedy = q[:, 0].argmax(1).numpy()
        explore = rng.random(len(envs)) < cfg["eps"]
        actions = np.where(explore, rng.integers(0, 2, len(envs)), greedy)
        for i, env in enumerate(envs):
            next_obs, reward, terminated, truncated, _ = env.step(int(actions[i]))
            lanes[i].push(
                obs=obs[i], action=int(actions[i]), reward=np.float32(reward), h=h[0, i].numpy(), c=c[0, i].numpy()
            )
            if terminated or truncated:
                lanes[i].end_episode(truncated and not terminated, obs=masked(next_obs))
                next_obs, _ = env.reset()
                h2[0, i] = 0.0
                c2[0, i] = 0.0
            obs[i] = masked(next_obs)
        h, c = h2, c2
        steps += len(envs)
    with env_steps.get_lock():
        env_steps.value += steps


def learner_step(torch: Any, net: Any, target: Any, opt: Any, b: Any, burn_in: int) -> Any:
    """One step on a batch of sequences; returns their new priorities."""
    import kary_replay as kr

    obs = torch.from_numpy(b["obs"])  # (B, W, OBS)
    mask = torch.from_numpy(b["mask"])  # (B, W)
    lengths = torch.from_numpy(b["lengths"].astype(np.int64))
    action = torch.from_numpy(b["action"])
    reward = torch.from_numpy(b["reward"])
    state = (torch.from_numpy(b["h"][:, 0])[None], torch.from_numpy(b["c"][:, 0])[None])
    # Each sequence followed by the step after it: its next observation.
    seq = torch.cat([obs, torch.from_numpy(b["next_obs"])[:, None]], 1)
    with torch.no_grad():
        _, online_state = net(seq[:, :burn_in], state)
        _, target_state = target(seq[:, :burn_in], state)
        q_next_online, _ = net(seq[:, burn_in:], online_state)
        q_next_target, _ = target(seq[:, burn_in:], target_state)
    q_all, _ = net(seq[:, burn_in:-1], online_state)
    w = seq.shape[1] - 1 - burn_in
    q = q_all.gather(2, action[:, burn_in:, None]).squeeze(2)  # (B, w)
    # Double Q: the online network picks the next action, the target values it.
    best = q_next_online[:, 1:].argmax(2, keepdim=True)
    q_next = q_next_target[:, 1:].gather(2, best).squeeze(2)  # (B, w)
    # The step after the last of a sequence cut by its episode's end is a terminal; in a
    # shorter sequence, the steps past its length are masked out.
    steps = torch.arange(burn_in, burn_in + w)[None]
    last = lengths[:, None] - 1
    terminal = (steps == last) & (lengths[:, None] < seq.shape[1] - 1)
    y = reward[:, burn_in:] + GAMMA * (~terminal).float() * q_next
    m = mask[:, burn_in:].float()
    td = (y - q) * m
    weights = torch.from_numpy(b["weights"].astype(np.float32))
    loss = (weights[:, None] * torch.nn.functional.smooth_l1_loss(q, y, reduction="none") * m).sum() / m.sum().clamp(
        min=1.0
    )
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 10.0)
    opt.step()
    # R2D2's priority: eta max + (1 - eta) mean of |td| over each sequence's trained steps.
    td_full = np.zeros(b["mask"].shape, np.float32)
    td_full[:, burn_in:] = td.detach().abs().numpy()
    mask_trained = b["mask"].copy()
    mask_trained[:, :burn_in] = False
    mask_trained[:, burn_in] |= ~mask_trained.any(1)  # a sequence all burn-in: its first trained step
    return kr.sequence_priorities(td_full, mask_trained, eta=0.9) + 1e-3


def evaluate(torch: Any, net: Any, hidden: int, episodes: int, seed: int) -> float:
    """The mean return of `episodes` greedy episodes of the masked task."""
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    returns = []
    for e in range(episodes):
        obs, _ = env.reset(seed=seed + e)
        state = (torch.zeros(1, 1, hidden), torch.zeros(1, 1, hidden))
        total, done = 0.0, False
        while not done:
            with torch.no_grad():
                q, state = net(torch.from_numpy(masked(obs))[None, None], state)
            obs, reward, terminated, truncated, _ = env.step(int(q[0, 0].argmax()))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--actors", type=int, default=1)
    p.add_argument("--envs", type=int, default=8, help="environments (lanes) per actor")
    p.add_argument("--steps-per-lane", type=int, default=8192)
    p.add_argument("--burn-in", type=int, default=8)
    p.add_argument("--train", type=int, default=24, help="trained steps per sequence")
    p.add_argument("--period", type=int, default=16)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--target-every", type=int, default=200)
    p.add_argument("--publish-every", type=int, default=20)
    p.add_argument("--sync-every", type=int, default=2)
    p.add_argument("--learning-starts", type=int, default=64, help="sequences before the first step")
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--target", type=float, default=195.0)
    p.add_argument("--max-seconds", type=float, default=600.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="a short run that need not succeed")
    p.add_argument("--json", default="")
    a = p.parse_args()
    if a.smoke:
        a.max_seconds, a.eval_every, a.eval_episodes = 10, 100, 2

    import kary_replay as kr
    import torch

    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    start = time.time()
    ctx = mp.get_context("spawn")
    window = a.burn_in + a.train
    replay = kr.SharedSequenceReplayBuffer(
        a.actors * a.envs,
        a.steps_per_lane // a.period * a.period,
        schema(a.hidden),
        window=window,
        period=a.period,
        next_of=("obs",),
        alpha=0.9,  # R2D2's priority exponent
    )
    net, target = make_net(torch, a.hidden), make_net(torch, a.hidden)
    target.load_state_dict(net.state_dict())
    opt = torch.optim.Adam(net.parameters(), lr=a.lr)
    weights = Weights(ctx, sum(p.numel() for p in net.parameters()))
    weights.publish(torch, net)
    stop, env_steps = ctx.Event(), ctx.Value("q", 0)
    n = a.actors * a.envs
    epsilons = [0.4 ** (1 + 7 * i / max(1, n - 1)) for i in range(n)]
    actors = []
    for i in range(a.actors):
        cfg = dict(
            hidden=a.hidden,
            envs=a.envs,
            eps=float(np.mean(epsilons[i * a.envs : (i + 1) * a.envs])),
            seed=a.seed * 100 + i,
            sync_every=a.sync_every,
            first_lane=i * a.envs,
        )
        worker = ctx.Process(target=act, args=(i, replay, weights, stop, env_steps, cfg))
        worker.start()
        actors.append(worker)

    rng = kr.Rng(a.seed)
    steps, reached, evals, best = 0, None, [], 0.0
    try:
        warmup_seconds = max(a.max_seconds, 300.0) if a.smoke else a.max_seconds
        while len(replay) < a.learning_starts and time.time() - start < warmup_seconds:
            time.sleep(0.02)
        learning_started = time.time() - start
        clock = time.time() if a.smoke else start
        while time.time() - clock < a.max_seconds:
            b = replay.sample(a.batch, 0.6, rng=rng)
            replay.update_priorities(b["keys"], learner_step(torch, net, target, opt, b, a.burn_in))
            steps += 1
            if steps % a.target_every == 0:
                target.load_state_dict(net.state_dict())
            if steps % a.publish_every == 0:
                weights.publish(torch, net)
            if steps % a.eval_every == 0:
                score = evaluate(torch, net, a.hidden, a.eval_episodes, 10_000 + steps)
                now = time.time() - start
                evals.append(dict(seconds=now, learner_steps=steps, steps_written=replay.steps_written, score=score))
                best = max(best, score)
                print(
                    f"{now:7.1f} s  learner step {steps:6d}  steps written {replay.steps_written:8d}  "
                    f"sequences {len(replay):6d}  greedy return {score:6.1f}",
                    flush=True,
                )
                if score >= a.target:
                    reached = evals[-1]
                    break
    finally:
        stop.set()
        for worker in actors:
            worker.join()
    seconds = time.time() - start
    result = dict(
        reached=reached is not None,
        target=a.target,
        seconds=seconds,
        reached_seconds=reached["seconds"] if reached else None,
        best=best,
        learner_steps=steps,
        learner_steps_per_s=steps / max(1e-9, seconds - learning_started),
        env_steps=int(env_steps.value),
        env_steps_per_s=int(env_steps.value) / seconds,
        evals=evals,
        seed=a.seed,
    )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
    if reached:
        print(
            f"reached {a.target:.0f} in {reached['seconds']:.1f} s (learner steps {steps}, "
            f"{result['learner_steps_per_s']:.0f} steps/s; actors {result['env_steps_per_s']:.0f} env steps/s)"
        )
        return 0
    print(
        f"not reached in {seconds:.1f} s (best {best:.1f}; learner steps {steps}; "
        f"actors {result['env_steps_per_s']:.0f} env steps/s)"
    )
    return 0 if a.smoke and steps > 0 and env_steps.value > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
