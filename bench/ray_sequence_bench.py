"""Windows over lanes through Ray, side by side in one run (bench/peers.sh ray_sequence_bench;
docs/performance.md, "Sequences through Ray").

One local Ray runtime on this machine (loopback). Steps of obs f32[8], action i64, reward f32
(and an episode id for TorchRL, which finds trajectories by it), N steps in total (default
2^18, prefilled; episodes of 200 to 1200 steps), windows of W = 40 steps every 20, B = 32
windows per batch, alpha 0.6, beta 0.4. The learner is the driver; each buffer lives in Ray
actors.

Rows, each a median over REPEATS timed runs of about SECONDS each:
- kary-replay ShardedSequenceReplay with S = 1, 2, 4 shards (4 lanes in all, N / 4 steps a
  lane), sampled "exact" (stats, then each shard's windows: two round trips), "one round
  trip" (the plan from the stats of the last replies) and "pipelined"
  (ShardedSequenceReplay.batches: 4 batches planned together, 2 groups in flight);
- TorchRL's RayReplayBuffer around a TensorDictReplayBuffer with a PrioritizedSliceSampler
  (slices of W steps, strict length, trajectories by the episode key; one actor).
Columns: windows/s, learner steps/s (a sample and the update of its B priorities: ours
fire-and-forget under the in-flight bound, TorchRL's update_priority as its client does it),
and writer steps/s (ours: a RemoteLane from the driver, chunks of 64 steps with one in
flight; TorchRL: extend with 64 steps, the caller waiting for each).
"""

import argparse
import functools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

ALPHA, BETA, B, W, PERIOD, CHUNK, LANES = 0.6, 0.4, 32, 40, 20, 64, 4
SCHEMA = {"obs": ("float32", (8,)), "action": ("int64", ()), "reward": ("float32", ())}


def episodes(total: int, seed: int = 0) -> list[int]:
    """Episode lengths (uniform in [200, 1200], seeded) that fill `total` steps."""
    r = np.random.default_rng(seed)
    out, n = [], 0
    while n < total:
        out.append(int(r.integers(200, 1201)))
        n += out[-1]
    out[-1] -= n - total
    return out


def steps(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    r = np.random.default_rng(seed)
    return dict(
        obs=r.random((n, 8), dtype=np.float32),
        action=r.integers(0, 4, n).astype(np.int64),
        reward=r.random(n, dtype=np.float32),
    )


def timed(step: Callable[[], Any], seconds: float, repeats: int) -> float:
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
    def __init__(self, n: int, shards: int, how: str) -> None:
        import kary_replay as kr
        from kary_replay.ray import ShardedSequenceReplay

        self.name = f"kary-replay {shards} shard{'s' if shards > 1 else ''}, {how}"
        self.how = how
        per_lane = n // LANES // PERIOD * PERIOD  # a multiple of the period
        self.r = ShardedSequenceReplay(
            shards, LANES // shards, per_lane, SCHEMA, window=W, period=PERIOD, partial="drop", alpha=ALPHA,
            max_in_flight=8,
        )  # fmt: skip
        data = steps(per_lane)
        for g in range(LANES):
            with self.r.lane(g, chunk=4096) as lane:
                t = 0
                for length in episodes(per_lane - 1, seed=g):
                    for i in range(t, t + length):
                        lane.push(obs=data["obs"][i], action=data["action"][i], reward=data["reward"][i])
                    lane.end_episode(False)
                    t += length
        self.rng = kr.Rng(1)
        self.stream = self.r.batches(B, BETA, rng=self.rng) if how == "pipelined" else None
        self.priorities = np.full(B, 0.7)
        self.writer = self.r.lane(0, chunk=CHUNK)
        self.rows = steps(CHUNK, 7)

    def sample(self) -> Any:
        if self.stream is not None:
            return next(self.stream)
        return self.r.sample(B, BETA, rng=self.rng, one_round_trip=self.how == "one round trip")

    def step(self) -> None:
        batch = self.sample()
        self.r.update_priorities(batch["keys"], self.priorities)

    def insert(self) -> None:
        rows = self.rows
        for i in range(CHUNK):
            self.writer.push(obs=rows["obs"][i], action=rows["action"][i], reward=rows["reward"][i])

    def close(self) -> None:
        self.writer.close()
        self.r.flush()
        self.r.shutdown()


class TorchRLRay:
    name = "TorchRL RayReplayBuffer + PrioritizedSliceSampler"

    def __init__(self, n: int) -> None:
        from functools import partial

        import torch
        from tensordict import TensorDict
        from torchrl.data import LazyTensorStorage, RayReplayBuffer, TensorDictReplayBuffer
        from torchrl.data.replay_buffers.samplers import PrioritizedSliceSampler

        self.torch, self.TensorDict = torch, TensorDict
        self.rb = RayReplayBuffer(
            replay_buffer_cls=TensorDictReplayBuffer,
            storage=partial(LazyTensorStorage, n),
            sampler=partial(
                PrioritizedSliceSampler,
                max_capacity=n,
                alpha=ALPHA,
                beta=BETA,
                slice_len=W,
                traj_key="episode",
                strict_length=True,
            ),
            batch_size=B * W,
            remote_config={"num_cpus": 0},
            ray_init_config={"address": "auto"},
        )
        data = steps(n)
        data["episode"] = np.concatenate([np.full(e, i, np.int64) for i, e in enumerate(episodes(n))])
        for s in range(0, n, 8192):
            self.rb.extend(self.td({c: v[s : s + 8192] for c, v in data.items()}))
        rows = steps(CHUNK, 7)
        rows["episode"] = np.full(CHUNK, 10**6, np.int64)
        self.insert_td = self.td(rows)
        self.priorities = torch.full((B * W,), 0.7)

    def td(self, arrays: dict[str, np.ndarray]) -> Any:
        t = {c: self.torch.from_numpy(np.ascontiguousarray(v)) for c, v in arrays.items()}
        return self.TensorDict(t, batch_size=[len(arrays["obs"])])

    def sample(self) -> Any:
        return self.rb.sample()

    def step(self) -> None:
        batch = self.sample()
        self.rb.update_priority(batch["index"], self.priorities)

    def insert(self) -> None:
        self.rb.extend(self.insert_td)

    def close(self) -> None:
        if hasattr(self.rb, "shutdown"):
            self.rb.shutdown()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=1 << 18)
    p.add_argument("--shards", default="1,2,4")
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", default="", help="comma-separated: kary, torchrl")
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
        makers.append(lambda: TorchRLRay(a.steps))
    if not only or "kary" in only:
        for s in map(int, a.shards.split(",")):
            for how in ("exact", "one round trip", "pipelined"):
                makers.append(functools.partial(Kary, a.steps, s, how))
    rows = []
    print(f"N = {a.steps} steps, B = {B} windows of {W}; median of {a.repeats} x {a.seconds} s", flush=True)
    print(f"{'buffer':52} {'windows/s':>10} {'learner steps/s':>16} {'writer steps/s':>15}", flush=True)
    for make in makers:
        buf = make()
        row = dict(
            name=buf.name,
            windows_per_s=timed(buf.sample, a.seconds, a.repeats) * B,
            steps_per_s=timed(buf.step, a.seconds, a.repeats),
            writer_steps_per_s=timed(buf.insert, a.seconds, a.repeats) * CHUNK,
        )
        buf.close()
        rows.append(row)
        print(
            f"{row['name']:52} {row['windows_per_s']:10.0f} {row['steps_per_s']:16.1f} "
            f"{row['writer_steps_per_s']:15.0f}",
            flush=True,
        )
    base = next((r for r in rows if r["name"].startswith("TorchRL")), None)
    if base:
        print("\nwindows/s against TorchRL's RayReplayBuffer + PrioritizedSliceSampler:")
        for r in rows:
            print(f"  {r['name']:52} {r['windows_per_s'] / base['windows_per_s']:.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    ray.shutdown()


if __name__ == "__main__":
    main()
