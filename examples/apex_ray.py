"""Ape-X on Ray with a sharded kary-replay buffer: CartPole-v1 solved by A actors and one
learner (bench/apex-ray.sh runs it).

- A actor tasks (Ray actors), each with E CartPole environments and its own fixed
  exploration rate (Ape-X's eps_i = 0.4^(1 + 7 i / (A - 1))), act with their copy of the
  network, build 3-step transitions, compute each one's priority as its absolute TD error
  (as Ape-X's actors do) and insert them in batches into the shard on their node
  (`ShardedReplay.add_batch`, fire-and-forget under the in-flight bound). Every
  `--sync-every` batches they fetch the learner's latest weights.
- The learner (this process) samples B transitions of the union of the shards, exactly
  (`ShardedReplay.batches`: requested ahead, each shard serving several batches per call,
  weights from each draw's actual probability), takes a double-DQN step with the
  importance weights, and sends the new priorities back, routed by key (fire-and-forget).
  It publishes its weights for the actors after every `--publish-every` steps.
- Every `--eval-every` learner steps it plays `--eval-episodes` greedy episodes; CartPole-v1
  is solved when their mean return reaches 475 (the maximum is 500).

With `--lanes` the buffer builds the n-step transitions instead: the replay is a
`ShardedSequenceReplay` (windows of one step, `nstep=(3, 0.99, "reward")`,
`next_of=("obs",)`), each environment of an actor writes its raw steps to a lane of the shard
on its node (`replay.lane()`, a `RemoteLane`), ends its episodes with the final
observation, and the learner reads each window's n-step return, bootstrap discount and next
observation from the batch. New windows enter at the running maximum priority (no actor TD
error), as a local buffer's inserts without one do.

Prints one line per evaluation and a final `solved in S s (learner steps L, env steps E)`
or `not solved`; `--json PATH` writes the run's figures. Exit status 0 when solved (or
with `--smoke`, when the learner stepped and the actors inserted).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

import numpy as np
from cartpole_dqn import GAMMA, N_STEP, SCHEMA, add_flags, dqn_step, evaluate, make_net

# With --lanes: one raw step of an environment (the buffer builds the n-step windows).
STEP_SCHEMA = {"obs": ("float32", (4,)), "action": ("int64", ()), "reward": ("float32", ())}


class Actor:
    """One Ape-X actor: E environments, a fixed epsilon, n-step transitions, priorities from
    its own network's TD errors, batches into the replay's shard on this node."""

    def __init__(self, index, replay, params, envs, eps, hidden, seed, batch, lanes=False):
        import gymnasium as gym
        import torch

        torch.set_num_threads(1)
        self.torch, self.replay, self.params = torch, replay, params
        # With lanes, one lane per environment on a shard of this node: raw steps in, the
        # buffer builds the n-step windows.
        self.lanes = [replay.lane(chunk=16) for _ in range(envs)] if lanes else None
        self.net = make_net(torch, hidden)
        self.eps, self.batch = eps, batch
        self.envs = [gym.make("CartPole-v1") for _ in range(envs)]
        self.rng = np.random.default_rng(seed)
        self.obs = np.stack([e.reset(seed=seed * 1000 + i)[0] for i, e in enumerate(self.envs)]).astype(np.float32)
        self.traces: list[list[Any]] = [[] for _ in self.envs]
        self.steps = 0
        self.index = index

    def load(self):
        import ray

        state = ray.get(self.params.latest.remote())
        if state is not None:
            self.net.load_state_dict({k: self.torch.from_numpy(v) for k, v in state.items()})

    def q(self, obs):
        with self.torch.no_grad():
            return self.net(self.torch.from_numpy(obs)).numpy()

    def run(self, batches, sync_every):
        """Collect `batches` batches of transitions (or until the learner says stop)."""
        import ray

        if self.lanes is not None:
            return self.run_lanes(batches, sync_every)
        out: dict[str, list[Any]] = {k: [] for k in ("obs", "action", "reward", "next_obs", "done")}
        for b in range(batches):
            if b % sync_every == 0:
                self.load()
                if ray.get(self.params.stopped.remote()):
                    break
            while len(out["obs"]) < self.batch:
                q = self.q(self.obs)
                greedy = q.argmax(1)
                explore = self.rng.random(len(self.envs)) < self.eps
                actions = np.where(explore, self.rng.integers(0, 2, len(self.envs)), greedy)
                for i, env in enumerate(self.envs):
                    next_obs, reward, terminated, truncated, _ = env.step(int(actions[i]))
                    self.steps += 1
                    self.traces[i].append((self.obs[i].copy(), int(actions[i]), float(reward)))
                    if len(self.traces[i]) == N_STEP or terminated or truncated:
                        # Emit the oldest (all of them at an episode's end) as n-step items.
                        while self.traces[i] and (len(self.traces[i]) == N_STEP or terminated or truncated):
                            ret = sum(GAMMA**j * r for j, (_, _, r) in enumerate(self.traces[i]))
                            o, a, _ = self.traces[i][0]
                            out["obs"].append(o)
                            out["action"].append(a)
                            out["reward"].append(ret * 1.0)
                            out["next_obs"].append(next_obs.astype(np.float32))
                            out["done"].append(bool(terminated))
                            # The discount to the bootstrap: gamma^(steps in this item).
                            out.setdefault("discount", []).append(GAMMA ** len(self.traces[i]))
                            self.traces[i].pop(0)
                            if len(self.traces[i]) < N_STEP and not (terminated or truncated):
                                break
                    if terminated or truncated:
                        self.traces[i] = []
                        next_obs, _ = env.reset()
                    self.obs[i] = next_obs
            rows = {k: np.asarray(v[: self.batch]) for k, v in out.items()}
            for k in out:
                del out[k][: self.batch]
            rows["obs"] = rows["obs"].astype(np.float32)
            rows["next_obs"] = rows["next_obs"].astype(np.float32)
            rows["reward"] = rows["reward"].astype(np.float32)
            rows["discount"] = rows["discount"].astype(np.float32)
            # Ape-X: the actor's own TD error is the initial priority.
            q_now = self.q(rows["obs"])[np.arange(self.batch), rows["action"]]
            q_next = self.q(rows["next_obs"]).max(1)
            target = rows["reward"] + rows["discount"] * (1.0 - rows["done"]) * q_next
            priorities = np.abs(target - q_now) + 1e-3
            self.replay.add_batch(priorities, wait=False, **rows)
        self.replay.flush()
        return self.steps

    def run_lanes(self, batches, sync_every):
        """`run` with lanes: each environment's steps go to its lane as they happen, its
        episodes end with their final observation; `batch` steps count as one batch."""
        import ray

        assert self.lanes is not None
        for b in range(batches):
            if b % sync_every == 0:
                self.load()
                if ray.get(self.params.stopped.remote()):
                    break
            for _ in range(max(1, self.batch // len(self.envs))):
                q = self.q(self.obs)
                greedy = q.argmax(1)
                explore = self.rng.random(len(self.envs)) < self.eps
                actions = np.where(explore, self.rng.integers(0, 2, len(self.envs)), greedy)
                for i, env in enumerate(self.envs):
                    next_obs, reward, terminated, truncated, _ = env.step(int(actions[i]))
                    self.steps += 1
                    self.lanes[i].push(obs=self.obs[i], action=int(actions[i]), reward=np.float32(reward))
                    if terminated or truncated:
                        # A time limit's cut bootstraps; a terminal does not.
                        self.lanes[i].end_episode(truncated and not terminated, obs=next_obs.astype(np.float32))
                        next_obs, _ = env.reset()
                    self.obs[i] = next_obs
        for lane in self.lanes:
            lane.flush()
        return self.steps


class Params:
    """Where the learner publishes its weights (a dict of arrays) and its stop signal."""

    def __init__(self):
        self.state = None
        self.stop = False

    def publish(self, state):
        self.state = state

    def latest(self):
        return self.state

    def stopped(self):
        return self.stop

    def set_stop(self):
        self.stop = True


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--actors", type=int, default=2)
    p.add_argument("--envs", type=int, default=8, help="environments per actor")
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--nodes", type=int, default=2, help="raylets on this machine (a ray.cluster_utils.Cluster)")
    p.add_argument("--capacity", type=int, default=50_000, help="items per shard")
    p.add_argument("--lanes", action="store_true", help="the buffer builds the n-step windows from raw steps")
    add_flags(p, max_seconds=600)
    a = p.parse_args()
    if a.smoke:
        a.max_seconds, a.learning_starts, a.eval_every, a.eval_episodes = 25, 500, 200, 2

    tmp = tempfile.mkdtemp(prefix="kr-apex-", dir="/tmp")
    for name, value in dict(
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", RAY_TMPDIR=tmp
    ).items():
        os.environ.setdefault(name, value)
    import cartpole_dqn
    import kary_replay as kr
    import ray
    import ray.cloudpickle
    import torch
    from kary_replay.ray import ShardedReplay, ShardedSequenceReplay
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # The actors' workers do not have examples/ on their path: the shared module travels
    # with them by value.
    ray.cloudpickle.register_pickle_by_value(cartpole_dqn)

    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    node: dict[str, Any] = dict(
        node_ip_address="127.0.0.1", include_dashboard=False, object_store_memory=256 << 20, num_cpus=2
    )
    cluster = Cluster(initialize_head=True, head_node_args=node)
    for _ in range(a.nodes - 1):
        cluster.add_node(**node)
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]

    shard_nodes = [nodes[k % len(nodes)] for k in range(a.shards)]
    replay: Any
    if a.lanes:
        # One lane per environment, spread over the shards (each actor's on its node's).
        lanes_per_shard = -(-a.actors * a.envs // a.shards)
        steps = -(-a.capacity // lanes_per_shard)
        replay = ShardedSequenceReplay(
            a.shards, lanes_per_shard, steps, STEP_SCHEMA, window=1, nstep=(N_STEP, GAMMA, "reward"),
            next_of=("obs",), alpha=0.6, nodes=shard_nodes, max_in_flight=8,
        )  # fmt: skip
    else:
        replay = ShardedReplay(a.shards, a.capacity, SCHEMA, alpha=0.6, nodes=shard_nodes, max_in_flight=8)
    params: Any = ray.remote(Params).options(num_cpus=0).remote()  # a handle: its methods have .remote
    epsilons = [0.4 ** (1 + 7 * i / max(1, a.actors - 1)) for i in range(a.actors)]
    actors: list[Any] = [
        ray.remote(Actor)
        .options(num_cpus=1, scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[i % len(nodes)], soft=False))
        .remote(i, replay, params, a.envs, epsilons[i], a.hidden, a.seed * 100 + i, 64, a.lanes)
        for i in range(a.actors)
    ]
    net, target = make_net(torch, a.hidden), make_net(torch, a.hidden)
    target.load_state_dict(net.state_dict())
    opt = torch.optim.Adam(net.parameters(), lr=a.lr)

    def publish():
        state = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
        ray.get(params.publish.remote(state))

    publish()
    start = time.time()
    runs = [act.run.remote(10**9, a.sync_every) for act in actors]
    rng = kr.Rng(a.seed)
    steps, solved, evals, best = 0, None, [], 0.0
    while len(replay) < a.learning_starts:
        time.sleep(0.05)
    # Batches requested ahead: the next ones travel while the learner trains on this one.
    stream = replay.batches(a.batch, 0.4, rng=rng)
    # A smoke run's budget is for learning: on a loaded machine the actors may take long to
    # fill the warm-up.
    clock = time.time() if a.smoke else start
    while time.time() - clock < a.max_seconds:
        b = next(stream)
        if a.lanes:
            # Windows of one step: the n-step return, its discount (0 after a terminal) and
            # the observation to bootstrap from, as the buffer computed them.
            b = kr.Batch(
                obs=b["obs"][:, 0], action=b["action"][:, 0], reward=b["returns"], next_obs=b["next_obs"],
                done=np.zeros(len(b["keys"]), bool), discount=b["discounts"], keys=b["keys"], weights=b["weights"],
            )  # fmt: skip
        replay.update_priorities(b["keys"], dqn_step(torch, net, target, opt, b, b.weights))
        steps += 1
        if steps % a.target_every == 0:
            target.load_state_dict(net.state_dict())
        if steps % a.publish_every == 0:
            publish()
        if steps % a.eval_every == 0:
            score = evaluate(torch, net, a.eval_episodes, 10_000 + steps)
            stats = replay.stats()
            items = sum(s["inserted"] for s in stats)
            evals.append(dict(seconds=time.time() - start, learner_steps=steps, items=items, score=score))
            best = max(best, score)
            print(
                f"{time.time() - start:7.1f} s  learner step {steps:6d}  items inserted {items:7d}  greedy return {score:6.1f}",
                flush=True,
            )
            if score >= 475:
                solved = evals[-1]
                break
    ray.get(params.set_stop.remote())
    env_steps = sum(ray.get(runs))
    items = sum(s["inserted"] for s in replay.stats())
    replay.flush()
    result = dict(
        solved=solved is not None,
        seconds=time.time() - start,
        learner_steps=steps,
        env_steps=env_steps,
        items=items,
        shards=a.shards,
        lanes=a.lanes,
        actors=a.actors,
        nodes=a.nodes,
        best=best,
        evals=evals,
        learner_steps_per_s=steps / (time.time() - start),
    )
    if solved:
        print(
            f"solved in {solved['seconds']:.1f} s (learner steps {solved['learner_steps']}, items {solved['items']}, env steps at the end {env_steps})"
        )
    else:
        print(
            f"not solved in {result['seconds']:.1f} s (best greedy return {best:.1f}, learner steps {steps}, env steps {env_steps})"
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    replay.shutdown()
    ray.shutdown()
    cluster.shutdown()
    # Ray's session files (RAY_TMPDIR): about 340 KB a run, left in /tmp otherwise.
    shutil.rmtree(tmp, ignore_errors=True)
    # A smoke run passes when both sides worked: the learner stepped, the actors inserted.
    return 0 if solved or (a.smoke and steps > 0 and env_steps > 0) else 1


if __name__ == "__main__":
    sys.exit(main())
