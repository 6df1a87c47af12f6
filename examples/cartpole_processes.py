"""CartPole-v1 solved by actor processes that share one kary-replay buffer with a torch
learner (`kr.SharedReplayBuffer`); `--mode threads` runs the same actors as threads of the
learner's process with an in-process `kr.PrioritizedReplayBuffer`, for comparison
(bench/cartpole-processes.sh runs both).

- The learner (this process) makes the buffer and a block of shared memory for its
  network's weights, then starts A actors: processes (spawned; each attaches to the buffer
  by unpickling it, which carries only its name) or threads.
- Each actor steps E CartPole environments epsilon-greedily with its own copy of the
  network and its own fixed epsilon (Ape-X's eps_i = 0.4^(1 + 7 i / (A - 1))), builds
  3-step transitions and pushes them through a `Writer` (inserted in batches of 64, at the
  buffer's running-maximum priority). Every `--sync-every` batches it copies the learner's
  latest weights.
- The learner samples B transitions by priority, takes a double-DQN step with the
  importance weights and sets the sampled items' priorities to their TD errors by key. It
  publishes its weights every `--publish-every` steps.
- Every `--eval-every` learner steps it plays `--eval-episodes` greedy episodes; CartPole-v1
  is solved when their mean return reaches 475 (the maximum is 500).

With `--lanes` the buffer builds the n-step transitions instead (Ape-X with n-step across
processes): the replay is a `kr.SharedSequenceReplayBuffer` of windows of one step with
`nstep=(3, gamma, "reward")` and `next_obs`, each environment of an actor writes its raw
steps to a lane of its own (`replay.lane(...)`, one writer per lane across every process)
and ends its episodes with their final observation; the learner takes the n-step return,
its discount and the observation to bootstrap from as the buffer computed them.

Prints one line per evaluation and a final `solved in S s (...)` or `not solved`; `--json
PATH` writes the run's figures. Exit status 0 when solved (with `--smoke`: when the learner stepped and the actors
inserted).
"""

import argparse
import collections
import json
import multiprocessing as mp
import sys
import threading
import time
from typing import Any

import numpy as np
from cartpole_dqn import GAMMA, N_STEP, SCHEMA, add_flags, dqn_step, evaluate, make_net

# With --lanes: one raw step of an environment (the buffer builds the n-step windows).
STEP_SCHEMA = {"obs": ("float32", (4,)), "action": ("int64", ()), "reward": ("float32", ())}


class Weights:
    """The learner's weights as one float32 vector in shared memory, with a version that
    tells an actor whether there is anything new to copy. Works between processes and
    between threads alike (the lock is a semaphore)."""

    def __init__(self, ctx: Any, size: int) -> None:
        self.array = ctx.Array("f", size)
        self.version = ctx.Value("q", 0)

    def publish(self, torch: Any, net: Any) -> None:
        flat = torch.nn.utils.parameters_to_vector(net.parameters()).detach().numpy()
        with self.array.get_lock():
            np.frombuffer(self.array.get_obj(), dtype=np.float32)[:] = flat
        with self.version.get_lock():
            self.version.value += 1

    def load(self, torch: Any, net: Any, seen: int) -> int:
        """Copy the weights into `net` if they are newer than `seen`; returns the version."""
        version = int(self.version.value)
        if version != seen:
            with self.array.get_lock():
                flat = np.frombuffer(self.array.get_obj(), dtype=np.float32).copy()
            torch.nn.utils.vector_to_parameters(torch.from_numpy(flat), net.parameters())
        return version


def act(index: int, replay: Any, weights: Weights, stop: Any, env_steps: Any, cfg: dict[str, Any]) -> None:
    """One actor, in a process or a thread: E environments, a fixed epsilon, 3-step
    transitions into `replay` through a Writer, until `stop` is set."""
    import gymnasium as gym
    import torch

    torch.set_num_threads(1)
    net = make_net(torch, cfg["hidden"])
    version = weights.load(torch, net, -1)
    rng = np.random.default_rng(cfg["seed"])
    envs = [gym.make("CartPole-v1") for _ in range(cfg["envs"])]
    obs = np.stack([e.reset(seed=cfg["seed"] * 1000 + i)[0] for i, e in enumerate(envs)]).astype(np.float32)
    traces: list[collections.deque[tuple[Any, int, float]]] = [collections.deque() for _ in envs]
    steps = 0
    if cfg["lanes"]:
        # One lane per environment: raw steps in, the buffer builds the n-step windows.
        lanes = [replay.lane(cfg["first_lane"] + i) for i in range(len(envs))]
        while not stop.is_set():
            if steps % (64 * cfg["sync_every"]) < len(envs):
                version = weights.load(torch, net, version)
            with torch.no_grad():
                greedy = net(torch.from_numpy(obs)).argmax(1).numpy()
            explore = rng.random(len(envs)) < cfg["eps"]
            actions = np.where(explore, rng.integers(0, 2, len(envs)), greedy)
            for i, env in enumerate(envs):
                next_obs, reward, terminated, truncated, _ = env.step(int(actions[i]))
                lanes[i].push(obs=obs[i], action=int(actions[i]), reward=np.float32(reward))
                if terminated or truncated:
                    # A time limit's cut bootstraps; a terminal does not.
                    lanes[i].end_episode(truncated and not terminated, obs=next_obs.astype(np.float32))
                    next_obs, _ = env.reset()
                obs[i] = next_obs
            steps += len(envs)
        with env_steps.get_lock():
            env_steps.value += steps
        return
    with replay.writer(64) as writer:
        while not stop.is_set():
            if steps % (64 * cfg["sync_every"]) < len(envs):
                version = weights.load(torch, net, version)
            with torch.no_grad():
                greedy = net(torch.from_numpy(obs)).argmax(1).numpy()
            explore = rng.random(len(envs)) < cfg["eps"]
            actions = np.where(explore, rng.integers(0, 2, len(envs)), greedy)
            for i, env in enumerate(envs):
                next_obs, reward, terminated, truncated, _ = env.step(int(actions[i]))
                next_obs = next_obs.astype(np.float32)
                trace = traces[i]
                trace.append((obs[i].copy(), int(actions[i]), float(reward)))
                ended = terminated or truncated
                # A full trace gives its oldest step's 3-step transition; an episode's end
                # gives every step still in the trace its shorter one.
                while len(trace) == N_STEP or (ended and trace):
                    ret = sum(GAMMA**j * r for j, (_, _, r) in enumerate(trace))
                    first_obs, first_action, _ = trace[0]
                    writer.push(
                        obs=first_obs,
                        action=first_action,
                        reward=ret,
                        next_obs=next_obs,
                        done=bool(terminated),
                        discount=GAMMA ** len(trace),
                    )
                    trace.popleft()
                if ended:
                    next_obs = env.reset()[0].astype(np.float32)
                obs[i] = next_obs
            steps += len(envs)
    with env_steps.get_lock():
        env_steps.value += steps


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=("processes", "threads"), default="processes")
    p.add_argument("--actors", type=int, default=1)
    p.add_argument("--envs", type=int, default=8, help="environments per actor")
    p.add_argument("--capacity", type=int, default=100_000)
    p.add_argument(
        "--lanes", action="store_true", help="a SharedSequenceReplayBuffer builds the n-step windows from raw steps"
    )
    add_flags(p, max_seconds=300)
    a = p.parse_args()
    if a.smoke:
        a.max_seconds, a.learning_starts, a.eval_every, a.eval_episodes = 10, 500, 200, 2

    import kary_replay as kr
    import torch

    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    start = time.time()
    # Spawned, not forked: a fork of a process that has run torch can hang in its thread pools.
    ctx = mp.get_context("spawn")
    replay: Any
    if a.lanes:
        # One lane per environment of every actor.
        n_lanes = a.actors * a.envs
        steps_per_lane = -(-a.capacity // n_lanes)
        options: dict[str, Any] = dict(window=1, nstep=(N_STEP, GAMMA, "reward"), next_of=("obs",), alpha=0.6)
        if a.mode == "processes":
            replay = kr.SharedSequenceReplayBuffer(n_lanes, steps_per_lane, STEP_SCHEMA, **options)
        else:
            replay = kr.SequenceReplayBuffer(n_lanes, steps_per_lane, STEP_SCHEMA, **options)
    elif a.mode == "processes":
        replay = kr.SharedReplayBuffer(a.capacity, SCHEMA, alpha=0.6)
    else:
        replay = kr.PrioritizedReplayBuffer(a.capacity, SCHEMA, alpha=0.6, variant="lockfree")
    net, target = make_net(torch, a.hidden), make_net(torch, a.hidden)
    target.load_state_dict(net.state_dict())
    opt = torch.optim.Adam(net.parameters(), lr=a.lr)
    weights = Weights(ctx, sum(p.numel() for p in net.parameters()))
    weights.publish(torch, net)
    stop, env_steps = ctx.Event(), ctx.Value("q", 0)
    epsilons = [0.4 ** (1 + 7 * i / max(1, a.actors - 1)) for i in range(a.actors)]
    actors: list[Any] = []
    for i in range(a.actors):
        cfg = dict(
            hidden=a.hidden,
            envs=a.envs,
            eps=epsilons[i],
            seed=a.seed * 100 + i,
            sync_every=a.sync_every,
            lanes=a.lanes,
            first_lane=i * a.envs,
        )
        args = (i, replay, weights, stop, env_steps, cfg)
        worker: Any = (
            ctx.Process(target=act, args=args) if a.mode == "processes" else threading.Thread(target=act, args=args)
        )
        worker.start()
        actors.append(worker)

    rng = kr.Rng(a.seed)
    steps, solved, evals, best = 0, None, [], 0.0
    try:
        # A smoke run's budget is for learning: on a loaded machine the actors may take long
        # to fill the warm-up (bounded apart).
        warmup_seconds = max(a.max_seconds, 300.0) if a.smoke else a.max_seconds
        while len(replay) < a.learning_starts and time.time() - start < warmup_seconds:
            time.sleep(0.02)
        learning_started = time.time() - start
        clock = time.time() if a.smoke else start
        while time.time() - clock < a.max_seconds:
            b = replay.sample(a.batch, 0.4, rng=rng)
            if a.lanes:
                # Windows of one step: the n-step return, its discount (0 after a terminal)
                # and the observation to bootstrap from, as the buffer computed them.
                b = kr.Batch(
                    obs=b["obs"][:, 0], action=b["action"][:, 0], reward=b["returns"], next_obs=b["next_obs"],
                    done=np.zeros(len(b["keys"]), bool), discount=b["discounts"], keys=b["keys"], weights=b["weights"],
                )  # fmt: skip
            replay.update_priorities(b["keys"], dqn_step(torch, net, target, opt, b, b["weights"]))
            steps += 1
            if steps % a.target_every == 0:
                target.load_state_dict(net.state_dict())
            if steps % a.publish_every == 0:
                weights.publish(torch, net)
            if steps % a.eval_every == 0:
                score = evaluate(torch, net, a.eval_episodes, 10_000 + steps)
                now = time.time() - start
                items = replay.steps_written if a.lanes else replay.stats()["inserted"]
                evals.append(dict(seconds=now, learner_steps=steps, items=items, score=score))
                best = max(best, score)
                print(
                    f"{now:7.1f} s  learner step {steps:6d}  items inserted {items:7d}  greedy return {score:6.1f}",
                    flush=True,
                )
                if score >= 475:
                    solved = evals[-1]
                    break
    finally:
        stop.set()
        for worker in actors:
            worker.join()
    seconds = time.time() - start
    result = dict(
        mode=a.mode,
        lanes=a.lanes,
        solved=solved is not None,
        seconds=seconds,
        solved_seconds=solved["seconds"] if solved else None,
        learning_started=learning_started,
        learner_steps=steps,
        learner_steps_per_s=steps / max(1e-9, seconds - learning_started),
        env_steps=int(env_steps.value),
        env_steps_per_s=int(env_steps.value) / seconds,
        items=replay.stats()["inserted"],
        actors=a.actors,
        envs=a.envs,
        best=best,
        evals=evals,
    )
    rates = f"learner {result['learner_steps_per_s']:.0f} steps/s, actors {result['env_steps_per_s']:.0f} env steps/s"
    if solved:
        print(f"solved in {solved['seconds']:.1f} s ({a.mode}; learner steps {solved['learner_steps']}, {rates})")
    else:
        print(f"not solved in {seconds:.1f} s ({a.mode}; best greedy return {best:.1f}, {rates})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    # A smoke run passes when both sides worked: the learner stepped, the actors inserted.
    return 0 if solved or (a.smoke and steps > 0 and result["env_steps"] > 0) else 1


if __name__ == "__main__":
    sys.exit(main())
