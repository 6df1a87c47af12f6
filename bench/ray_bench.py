"""Replay through Ray, side by side in one run (bench/peers.sh ray_bench; docs/performance.md,
"Through Ray").

One local Ray runtime on this machine (loopback). CartPole transitions (obs f32[4], action,
reward, next_obs f32[4], done), N items in total (default 2^18, prefilled), B = 256, alpha
0.6, beta 0.4. The learner is the driver; each buffer lives in Ray actors.

Rows, each a median over REPEATS timed runs of about SECONDS each:
- kary-replay ShardedReplay with S = 1, 2, 4 shards of N / S:
  - "exact": stats, then each shard's part (two round trips);
  - "one round trip": the plan from the stats of the last replies;
  - "pipelined": `ShardedReplay.batches` with its defaults: 4 batches planned together and
    served by one call per shard, 2 such groups in flight (a learner training on one batch
    while the next ones travel);
  - "per-shard (RLlib-style)": each batch from one shard (round robin), with that shard's
    own probabilities and weights (not the union's: the baseline of Ape-X's sharded buffer);
- TorchRL's RayReplayBuffer around a prioritized TensorDictReplayBuffer (one actor);
- "Ray alone (bound)": the pipelined pattern's calls to S actors that hand back prebuilt
  parts of a batch (no sampling at all): what Ray's calls allow on this machine.
Columns: samples/s (B-item batches with weights and keys or indices, as items per second),
learner steps/s (a sample and the update of its B priorities: ours fire-and-forget under the
in-flight bound, TorchRL's update_priority as its client does it), inserts/s (64
transitions per call, the caller waiting for each).
"""

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

ALPHA, BETA, B, INSERT = 0.6, 0.4, 256, 64


def transitions(n, seed=0):
    r = np.random.default_rng(seed)
    return dict(
        obs=r.random((n, 4), dtype=np.float32),
        action=r.integers(0, 2, n).astype(np.int64),
        reward=r.random(n, dtype=np.float32),
        next_obs=r.random((n, 4), dtype=np.float32),
        done=r.random(n) < 0.01,
    )


SCHEMA = {
    "obs": ("float32", (4,)),
    "action": ("int64", ()),
    "reward": ("float32", ()),
    "next_obs": ("float32", (4,)),
    "done": ("bool", ()),
}


def timed(step, seconds, repeats):
    """Median calls per second of `step` over `repeats` runs of about `seconds`."""
    step()
    rates = []
    for _ in range(repeats):
        calls, start = 0, time.perf_counter()
        while True:
            step()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        rates.append(calls / elapsed)
    return statistics.median(rates)


class Kary:
    def __init__(self, n, shards, how):
        import kary_replay as kr
        from kary_replay.ray import ShardedReplay

        self.name = f"kary-replay {shards} shard{'s' if shards > 1 else ''}, {how}"
        self.how = how
        self.r = ShardedReplay(shards, n // shards, SCHEMA, alpha=ALPHA, max_in_flight=8)
        data = transitions(n)
        for k in range(shards):
            part = {c: v[k * (n // shards) : (k + 1) * (n // shards)] for c, v in data.items()}
            for s in range(0, n // shards, 8192):
                chunk = {c: v[s : s + 8192] for c, v in part.items()}
                self.r.add_batch(np.random.default_rng(s).random(len(chunk["obs"])) + 0.1, shard=k, **chunk)
        self.rng = kr.Rng(1)
        self.next = 0
        self.stream = self.r.batches(B, BETA, rng=self.rng) if how == "pipelined" else None
        self.rows = transitions(INSERT, 7)
        self.priorities = np.full(B, 0.7)

    def sample(self):
        if self.how == "per-shard (RLlib-style)":
            import ray

            k = self.next % self.r.num_shards
            self.next += 1
            return ray.get(self.r.shards[k].sample.remote(B, BETA, "stratified"))
        if self.stream is not None:
            return next(self.stream)
        return self.r.sample(B, BETA, rng=self.rng, one_round_trip=self.how == "one round trip")

    def step(self):
        batch = self.sample()
        self.r.update_priorities(batch["keys"], self.priorities)

    def insert(self):
        self.next += 1
        self.r.add_batch(shard=self.next % self.r.num_shards, **self.rows)

    def close(self):
        self.r.flush()
        self.r.shutdown()


class Batches:
    """Ray alone: S actors that hold a prebuilt part of a batch (B / S rows of the same
    columns, with keys and priorities) and hand `per_call` of them back per call, in the
    pipelined pattern (2 groups in flight). No sampling, no plan: the bound Ray's calls set
    on this machine."""

    def __init__(self, shards, per_call=4, depth=2):
        import collections

        import ray

        self.name = f"Ray alone, {shards} actor{'s' if shards > 1 else ''}, pipelined (bound)"
        self.ray, self.per_call, self.depth = ray, per_call, depth

        @ray.remote(num_cpus=0)
        class Holder:
            def __init__(self, rows):
                part = transitions(rows, 3)
                part.update(keys=np.arange(rows, dtype=np.uint64), indices=np.arange(rows), priorities=np.ones(rows))
                self.part = part

            def parts(self, n):
                return [self.part] * n

        self.holders: list[Any] = [Holder.remote(B // shards) for _ in range(shards)]  # type: ignore[attr-defined]
        self.pending: collections.deque[list[Any]] = collections.deque()
        self.ready: collections.deque[Any] = collections.deque()

    def sample(self):
        while not self.ready:
            while len(self.pending) < self.depth:
                self.pending.append([h.parts.remote(self.per_call) for h in self.holders])
            replies = self.ray.get(self.pending.popleft())
            for j in range(self.per_call):
                parts = [r[j] for r in replies]
                self.ready.append({c: np.concatenate([p[c] for p in parts]) for c in parts[0]})
        return self.ready.popleft()

    step = sample

    def insert(self):
        pass

    def close(self):
        for h in self.holders:
            self.ray.kill(h)


class TorchRLRay:
    name = "TorchRL RayReplayBuffer (one actor)"

    def __init__(self, n):
        from functools import partial

        import torch
        from tensordict import TensorDict
        from torchrl.data import LazyTensorStorage, PrioritizedSampler, RayReplayBuffer, TensorDictReplayBuffer

        self.torch, self.TensorDict = torch, TensorDict
        # TensorDictPrioritizedReplayBuffer cannot be the class: RayReplayBuffer passes it a
        # `delayed_init` it does not take (torchrl 0.14.1). This is the same buffer built from
        # its parts, constructors as RayReplayBuffer asks.
        self.rb = RayReplayBuffer(
            replay_buffer_cls=TensorDictReplayBuffer,
            storage=partial(LazyTensorStorage, n),
            sampler=partial(PrioritizedSampler, n, ALPHA, BETA),
            batch_size=B,
            remote_config={"num_cpus": 0},
            ray_init_config={"address": "auto"},
        )
        data = transitions(n)
        for s in range(0, n, 8192):
            td = self.td({c: v[s : s + 8192] for c, v in data.items()})
            self.rb.extend(td)
        self.insert_td = self.td(transitions(INSERT, 7))
        self.priorities = torch.full((B,), 0.7)

    def td(self, arrays):
        t = {c: self.torch.from_numpy(np.ascontiguousarray(v)) for c, v in arrays.items()}
        return self.TensorDict(t, batch_size=[len(arrays["obs"])])

    def sample(self):
        return self.rb.sample()

    def step(self):
        batch = self.sample()
        self.rb.update_priority(batch["index"], self.priorities)

    def insert(self):
        self.rb.extend(self.insert_td)

    def close(self):
        self.rb.shutdown() if hasattr(self.rb, "shutdown") else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--items", type=int, default=1 << 18)
    p.add_argument("--shards", default="1,2,4")
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", default="", help="comma-separated: kary, torchrl, bound")
    p.add_argument("--json", default="")
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="kr-ray-", dir="/tmp")
    for name, value in dict(
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", RAY_TMPDIR=tmp
    ).items():
        os.environ.setdefault(name, value)
    import ray

    ray.init(
        num_cpus=2,
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        object_store_memory=512 << 20,
        log_to_driver=False,
    )
    makers: list[Callable[[], Any]] = []
    only = set(filter(None, a.only.split(",")))
    if not only or "torchrl" in only:
        makers.append(lambda: TorchRLRay(a.items))
    if not only or "kary" in only:
        for s in map(int, a.shards.split(",")):
            for how in ("exact", "one round trip", "pipelined", "per-shard (RLlib-style)"):
                makers.append(functools.partial(Kary, a.items, s, how))
    if not only or "bound" in only:
        for s in map(int, a.shards.split(",")):
            makers.append(functools.partial(Batches, s))
    rows = []
    print(f"N = {a.items}, B = {B}, inserts of {INSERT}; median of {a.repeats} x {a.seconds} s", flush=True)
    print(f"{'buffer':48} {'samples/s':>12} {'learner steps/s':>16} {'inserts/s':>12}", flush=True)
    for make in makers:
        buf = make()
        bound = isinstance(buf, Batches)
        row = dict(
            name=buf.name,
            samples_per_s=timed(buf.sample, a.seconds, a.repeats) * B,
            steps_per_s=float("nan") if bound else timed(buf.step, a.seconds, a.repeats),
            inserts_per_s=float("nan") if bound else timed(buf.insert, a.seconds, a.repeats) * INSERT,
        )
        buf.close()
        rows.append(row)
        print(
            f"{row['name']:48} {row['samples_per_s']:12.0f} {row['steps_per_s']:16.1f} {row['inserts_per_s']:12.0f}",
            flush=True,
        )
    base = next((r for r in rows if r["name"].startswith("TorchRL")), None)
    if base:
        print("\nsamples/s against TorchRL's RayReplayBuffer:")
        for r in rows:
            print(f"  {r['name']:48} {r['samples_per_s'] / base['samples_per_s']:.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
