"""What the CartPole DQN examples share (examples/apex_ray.py, examples/cartpole_processes.py):
the transitions' schema, the Q-network, the double-DQN step on a prioritized batch, the greedy
evaluation, and the flags they take alike."""

import argparse
from typing import Any

import numpy as np

GAMMA, N_STEP = 0.99, 3
# An n-step transition: the reward is its return, the discount gamma^n (n: the steps in it).
SCHEMA = {
    "obs": ("float32", (4,)),
    "action": ("int64", ()),
    "reward": ("float32", ()),
    "next_obs": ("float32", (4,)),
    "done": ("bool", ()),
    "discount": ("float32", ()),
}


def make_net(torch: Any, hidden: int) -> Any:
    """CartPole's Q-network: 4 observations in, 2 action values out."""
    return torch.nn.Sequential(
        torch.nn.Linear(4, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 2),
    )


def dqn_step(torch: Any, net: Any, target: Any, opt: Any, batch: dict[str, Any], weights: Any) -> Any:
    """One double-DQN step on `batch` (numpy columns obs, action, reward, next_obs, done,
    discount: the reward an n-step return, the discount gamma^n) with the importance
    `weights`; returns the new priorities (|TD error| + 1e-3) as a numpy array."""
    t = {k: torch.from_numpy(np.ascontiguousarray(batch[k])) for k in ("obs", "action", "reward", "next_obs", "done")}
    discount = torch.from_numpy(np.ascontiguousarray(batch["discount"]))
    q = net(t["obs"]).gather(1, t["action"][:, None]).squeeze(1)
    with torch.no_grad():
        best_next = net(t["next_obs"]).argmax(1, keepdim=True)
        q_next = target(t["next_obs"]).gather(1, best_next).squeeze(1)
        y = t["reward"] + discount * (1.0 - t["done"].float()) * q_next
    td = y - q
    loss = (
        torch.from_numpy(np.ascontiguousarray(weights)) * torch.nn.functional.smooth_l1_loss(q, y, reduction="none")
    ).mean()
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 10.0)
    opt.step()
    return td.detach().abs().numpy() + 1e-3


def evaluate(torch: Any, net: Any, episodes: int, seed: int) -> float:
    """The mean return of `episodes` greedy CartPole-v1 episodes."""
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    returns = []
    for e in range(episodes):
        obs, _ = env.reset(seed=seed + e)
        total, done = 0.0, False
        while not done:
            with torch.no_grad():
                a = int(net(torch.from_numpy(obs.astype(np.float32))).argmax())
            obs, r, terminated, truncated, _ = env.step(a)
            total += float(r)
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def add_flags(p: argparse.ArgumentParser, max_seconds: float) -> None:
    """The learner's and the run's flags."""
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--target-every", type=int, default=250)
    p.add_argument("--publish-every", type=int, default=50)
    p.add_argument("--sync-every", type=int, default=4, help="batches between an actor's weight copies")
    p.add_argument("--learning-starts", type=int, default=2000)
    p.add_argument("--eval-every", type=int, default=1000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--max-seconds", type=float, default=max_seconds)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="a short run that need not solve")
    p.add_argument("--json", default="")
