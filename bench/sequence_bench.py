"""Windows over lanes of steps beside the peers, in one run (bench/peers.sh sequence_bench).

Two shapes, each side by side:

- R2D2: STEPS steps (default 2^18) of u8 84x84 frames, windows of 120 steps every 40, B = 64
  windows per sample. kary-replay's SequenceReplayBuffer (4 lanes, windows cut by an
  episode's end dropped) against TorchRL's PrioritizedSliceSampler over a LazyTensorStorage
  (slices of 120 steps, strict length, trajectories by an episode key). Rows: sample latency
  (median ms), steps/s of the writers (ours: 4 Python threads, one lane each; TorchRL: one
  thread extending in chunks of 1024, its storage takes no concurrent writers), and
  windows that hold steps of two episodes in DRAWS draws (on obs f32[4] with the same
  episodes, so that the draws measure the samplers and not the copies). TorchRL again with
  kary_replay.torchrl's KaryPrioritizedSliceSampler in place of its sampler (nothing else
  changed); for both TorchRL rows also the sampler's part alone (indices and weights, no rows
  gathered). flashbax's
  prioritised trajectory buffer (JAX on the CPU; 4 rows of the time axis, one per lane,
  sequences of 120 every 40; jitted add and sample) joins with ``--peers ours,flashbax``,
  in a venv of its own (bench/peers.sh sequence_flashbax): its writer adds [4, 1024] steps
  at a time (its state is a value: one writer), and it knows no episodes.
- Atari n-step: STEPS steps of u8 84x84 frames stacked k = 4, n = 3, gamma 0.99, B = 32. A
  learner step is a sample and its priority update. kary-replay's SequenceReplayBuffer (one
  frame per step, stacks and next observations built at sampling; also into arrays the
  learner reuses, sample_into) against the flat stacked
  layout (kary-replay's PrioritizedReplayBuffer holding obs and next_obs as 4x84x84 each,
  n-step returns computed before insert: FLAT steps, as it takes 56 KB a transition), cpprb's
  PrioritizedReplayBuffer with Nstep and stack_compress on obs and next_obs (its next_of
  drops next_obs from n-step samples), and SB3's NStepReplayBuffer
  (uniform, no priorities: a sample alone; it refuses optimize_memory_usage, so FLAT steps). Memory per
  transition: ours from memory_bytes, the flat layout from its memory_bytes, cpprb and SB3
  from the process's resident memory grown by their fill (every page written).

Episodes: lengths uniform in [200, 1200] (seeded, the same for every buffer).
"""

import argparse
import functools
import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

FRAME = (84, 84)
FRAME_BYTES = 84 * 84


def episode_lengths(total: int, seed: int = 0) -> list[int]:
    r = np.random.default_rng(seed)
    out, n = [], 0
    while n < total:
        e = int(r.integers(200, 1201))
        out.append(e)
        n += e
    return out


def frames_pool(n: int = 64) -> np.ndarray:
    return np.random.default_rng(1).integers(0, 256, (n, *FRAME), dtype=np.uint8)


def timed(fn: Any, repeats: int) -> float:
    """Median seconds per call over `repeats` calls (after one warm-up)."""
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def rss() -> int:
    """The process's resident memory in bytes (Linux: /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# --------------------------------------------------------------------------------- R2D2


def r2d2_ours(steps: int, repeats: int, draws: int) -> dict[str, Any]:
    import kary_replay as kr

    lanes = 4
    per_lane = steps // lanes // 40 * 40  # a multiple of the period
    schema = {"obs": ("uint8", FRAME), "episode": ("int64", ())}
    rb = kr.SequenceReplayBuffer(lanes, per_lane, schema, window=120, period=40, partial="drop")
    pool = frames_pool()
    lengths = episode_lengths(steps)

    def writer(lane: int) -> None:
        w = rb.lane(lane)
        ep = 0
        left = lengths[lane::lanes]
        i = 0
        while w.position < per_lane - 41:
            w.push(obs=pool[i % 64], episode=lane * 100000 + ep)
            i += 1
            if i == left[ep % len(left)]:
                w.end_episode()
                ep, i = ep + 1, 0

    threads = [threading.Thread(target=writer, args=(lane,)) for lane in range(lanes)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    fill = time.perf_counter() - t
    written = rb.steps_written
    # One writer alone, for the share the GIL leaves 4 threads: one lane of the same shape.
    alone = kr.SequenceReplayBuffer(1, per_lane, schema, window=120, period=40, partial="drop")
    w = alone.lane(0)
    t = time.perf_counter()
    for i in range(per_lane):
        w.push(obs=pool[i % 64], episode=0)
    one = per_lane / (time.perf_counter() - t)
    del w, alone
    rng = kr.Rng(3)
    sample = timed(lambda: rb.sample(64, rng=rng), repeats)
    # Cross-episode windows: the same episodes over obs f32[4].
    small = kr.SequenceReplayBuffer(
        lanes, per_lane, {"obs": ("float32", (4,)), "episode": ("int64", ())}, window=120, period=40, partial="drop"
    )
    for lane in range(lanes):
        w = small.lane(lane)
        ep, i = 0, 0
        left = lengths[lane::lanes]
        while w.position < per_lane - 41:
            w.push(obs=np.zeros(4, np.float32), episode=ep)
            i += 1
            if i == left[ep % len(left)]:
                w.end_episode()
                ep, i = ep + 1, 0
    crossed, n = 0, 0
    while n < draws:
        b = small.sample(1024, rng=rng)
        e = b["episode"]
        crossed += int(((e != e[:, :1]) & b["mask"]).any(axis=1).sum())
        n += 1024
    return {
        "name": "kary-replay SequenceReplayBuffer",
        "sample_ms": sample * 1e3,
        "writer_steps_per_s": written / fill,
        "writers": lanes,
        "one_writer_steps_per_s": one,
        "cross_episode": crossed,
        "draws": n,
        "memory_bytes": rb.memory_bytes,
    }


def r2d2_torchrl(steps: int, repeats: int, draws: int, kary: bool = False) -> dict[str, Any]:
    import torch
    from kary_replay.torchrl import KaryPrioritizedSliceSampler
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
    from torchrl.data.replay_buffers.samplers import PrioritizedSliceSampler

    sampler_class: Any = KaryPrioritizedSliceSampler if kary else PrioritizedSliceSampler

    def make(n: int, obs_shape: tuple[int, ...], dtype: torch.dtype) -> Any:
        sampler = sampler_class(
            max_capacity=n, alpha=0.6, beta=0.4, slice_len=120, traj_key="episode", strict_length=True
        )
        return TensorDictReplayBuffer(storage=LazyTensorStorage(n), sampler=sampler, batch_size=64 * 120)

    lengths = episode_lengths(steps)
    episode = np.concatenate([np.full(e, i, np.int64) for i, e in enumerate(lengths)])[:steps]
    pool = torch.from_numpy(frames_pool())
    rb = make(steps, FRAME, torch.uint8)
    t = time.perf_counter()
    for s in range(0, steps, 1024):
        n = min(1024, steps - s)
        idx = torch.arange(s, s + n) % 64
        rb.extend(TensorDict({"obs": pool[idx], "episode": torch.from_numpy(episode[s : s + n])}, batch_size=[n]))
    fill = time.perf_counter() - t
    sample = timed(lambda: rb.sample(), repeats)
    # The sampler's part alone: slice indices and weights, no rows gathered.
    index = timed(lambda: rb._sampler.sample(rb._storage, 64 * 120), repeats)
    small = make(steps, (4,), torch.float32)
    for s in range(0, steps, 8192):
        n = min(8192, steps - s)
        small.extend(
            TensorDict(
                {"obs": torch.zeros(n, 4), "episode": torch.from_numpy(episode[s : s + n])},
                batch_size=[n],
            )
        )
    crossed, n = 0, 0
    while n < draws:
        b = small.sample(1024 * 120)
        e = b["episode"].reshape(1024, 120)
        crossed += int((e != e[:, :1]).any(dim=1).sum())
        n += 1024
    return {
        "name": "TorchRL, KaryPrioritizedSliceSampler" if kary else "TorchRL PrioritizedSliceSampler",
        "sample_ms": sample * 1e3,
        "index_ms": index * 1e3,
        "writer_steps_per_s": steps / fill,
        "writers": 1,
        "one_writer_steps_per_s": steps / fill,
        "cross_episode": crossed,
        "draws": n,
        "memory_bytes": steps * FRAME_BYTES,
    }


def r2d2_flashbax(steps: int, repeats: int, draws: int) -> dict[str, Any]:
    import flashbax as fbx
    import jax
    import jax.numpy as jnp

    lanes, chunk = 4, 1024
    per_lane = steps // lanes // chunk * chunk
    lengths = episode_lengths(steps)

    # Each lane's episode ids: the lanes take the episodes in turn, each cycling through its
    # own, as ours do.
    def lane_ids(lane: int) -> np.ndarray:
        left, out, ep, n = lengths[lane::lanes], [], 0, 0
        while n < per_lane:
            out.append(np.full(left[ep % len(left)], lane * 100000 + ep, np.int32))
            n += len(out[-1])
            ep += 1
        return np.concatenate(out)[:per_lane]

    episode = np.stack([lane_ids(lane) for lane in range(lanes)])
    pool = jnp.asarray(frames_pool())

    def make(sample_batch: int, example: dict[str, Any]) -> Any:
        buf = fbx.make_prioritised_trajectory_buffer(
            add_batch_size=lanes,
            sample_batch_size=sample_batch,
            sample_sequence_length=120,
            period=40,
            min_length_time_axis=120,
            max_size=lanes * per_lane,
            priority_exponent=0.6,
            device="cpu",
        )
        return buf, buf.init(example), jax.jit(buf.add, donate_argnums=0), jax.jit(buf.sample)

    _, state, add, sample = make(64, {"obs": jnp.zeros(FRAME, jnp.uint8), "episode": jnp.int32(0)})
    idx = (jnp.arange(lanes)[:, None] * 7 + jnp.arange(chunk)[None, :]) % 64
    frames = pool[idx]  # [lanes, chunk, 84, 84], the same frames each chunk (a memory copy each add)
    state = add(state, {"obs": frames, "episode": jnp.asarray(episode[:, :chunk])})  # compile
    jax.block_until_ready(state)
    t = time.perf_counter()
    for s in range(chunk, per_lane, chunk):
        state = add(state, {"obs": frames, "episode": jnp.asarray(episode[:, s : s + chunk])})
    jax.block_until_ready(state)
    fill = time.perf_counter() - t
    written = lanes * (per_lane - chunk)
    key = [jax.random.PRNGKey(3)]

    def draw() -> None:
        key[0], k = jax.random.split(key[0])
        jax.block_until_ready(sample(state, k).experience["obs"])

    sample_s = timed(draw, repeats)
    memory = lanes * per_lane * FRAME_BYTES
    state = None  # frees the frames before the small buffer
    # Cross-episode windows: the same episodes over obs f32[4], drawn 1024 at a time.
    _, small, add_small, sample_small = make(1024, {"obs": jnp.zeros(4, jnp.float32), "episode": jnp.int32(0)})
    zeros = jnp.zeros((lanes, chunk, 4), jnp.float32)
    for s in range(0, per_lane, chunk):
        small = add_small(small, {"obs": zeros, "episode": jnp.asarray(episode[:, s : s + chunk])})
    crossed, n, k = 0, 0, jax.random.PRNGKey(5)
    while n < draws:
        k, sub = jax.random.split(k)
        e = np.asarray(sample_small(small, sub).experience["episode"])
        crossed += int((e != e[:, :1]).any(axis=1).sum())
        n += 1024
    return {
        "name": "flashbax prioritised trajectory buffer",
        "sample_ms": sample_s * 1e3,
        "writer_steps_per_s": written / fill,
        "writers": 1,
        "one_writer_steps_per_s": written / fill,
        "cross_episode": crossed,
        "draws": n,
        "memory_bytes": memory,
    }


# ------------------------------------------------------------------------- Atari n-step


def nstep_ours(steps: int, repeats: int) -> dict[str, Any]:
    import kary_replay as kr

    schema = {"obs": ("uint8", FRAME), "action": ("int64", ()), "reward": ("float32", ())}
    lanes = 4
    rb = kr.SequenceReplayBuffer(
        lanes, steps // lanes, schema, nstep=(3, 0.99, "reward"), stack={"obs": 4}, next_of=("obs",)
    )
    pool = frames_pool()
    lengths = episode_lengths(steps)
    for lane in range(lanes):
        w = rb.lane(lane)
        ep, i = 0, 0
        left = lengths[lane::lanes]
        while w.position < steps // lanes - 2:
            w.push(obs=pool[i % 64], action=i % 4, reward=1.0)
            i += 1
            if i == left[ep % len(left)]:
                w.end_episode(obs=pool[(i + 1) % 64])
                ep, i = ep + 1, 0
    rng = kr.Rng(4)
    state: dict[str, Any] = {}

    def sample() -> None:
        state["b"] = rb.sample(32, rng=rng)

    def step() -> None:
        b = rb.sample(32, rng=rng)
        rb.update_priorities(b["keys"], np.abs(b.returns) + 0.01)

    # A learner that reuses its arrays (sample_into): no allocation per batch.
    out = {
        "obs": np.empty((32, 1, 4, *FRAME), np.uint8),
        "action": np.empty((32, 1), np.int64),
        "reward": np.empty((32, 1), np.float32),
        "next_obs": np.empty((32, 4, *FRAME), np.uint8),
    }

    def step_into() -> None:
        info = rb.sample_into(out, 32, rng=rng)
        rb.update_priorities(info["keys"], np.abs(info.returns) + 0.01)

    return {
        "name": "kary-replay SequenceReplayBuffer (k=4, n=3)",
        "steps": steps,
        "sample_us": timed(sample, repeats) * 1e6,
        "learner_step_us": timed(step, repeats) * 1e6,
        "learner_step_into_us": timed(step_into, repeats) * 1e6,
        "bytes_per_transition": rb.memory_bytes / steps,
    }


def nstep_flat(steps: int, repeats: int) -> dict[str, Any]:
    import kary_replay as kr

    schema = {
        "obs": ("uint8", (4, *FRAME)),
        "action": ("int64", ()),
        "reward": ("float32", ()),
        "next_obs": ("uint8", (4, *FRAME)),
        "discount": ("float32", ()),
    }
    rb = kr.PrioritizedReplayBuffer(steps, schema)
    pool = frames_pool()
    for s in range(0, steps, 256):
        n = min(256, steps - s)
        idx = (np.arange(s, s + n)[:, None] + np.arange(4)[None, :]) % 64
        rb.add_batch(
            obs=pool[idx],
            action=np.arange(n) % 4,
            reward=np.ones(n, np.float32),
            next_obs=pool[(idx + 3) % 64],
            discount=np.full(n, 0.99**3, np.float32),
        )
    rng = kr.Rng(5)

    def step() -> None:
        b = rb.sample(32, rng=rng)
        rb.update_priorities(b["keys"], np.abs(b["reward"]) + 0.01)

    return {
        "name": "flat stacked layout (kary-replay PrioritizedReplayBuffer, obs and next_obs 4x84x84)",
        "steps": steps,
        "sample_us": timed(lambda: rb.sample(32, rng=rng), repeats) * 1e6,
        "learner_step_us": timed(step, repeats) * 1e6,
        "bytes_per_transition": rb.stats()["memory_bytes"] / steps,
    }


def nstep_cpprb(steps: int, repeats: int) -> dict[str, Any]:
    import cpprb

    before = rss()
    # With Nstep, cpprb's next_of drops next_obs from its samples (a learner could not
    # bootstrap), so next_obs is a column of its own, both stack-compressed.
    frame = {"shape": (*FRAME, 4), "dtype": np.uint8}
    rb = cpprb.PrioritizedReplayBuffer(
        steps,
        {"obs": frame, "act": {"dtype": np.int64}, "rew": {}, "done": {}, "next_obs": frame},
        stack_compress=["obs", "next_obs"],
        Nstep={"size": 3, "gamma": 0.99, "rew": "rew", "next": "next_obs"},
    )
    pool = frames_pool()
    lengths = episode_lengths(steps)
    stack = np.stack([pool[i % 64] for i in range(4)], axis=-1)
    ep, i = 0, 0
    for t in range(steps):
        nxt = np.roll(stack, -1, axis=-1)
        nxt[..., -1] = pool[(t + 4) % 64]
        i += 1
        done = i == lengths[ep]
        rb.add(obs=stack, act=t % 4, rew=1.0, next_obs=nxt, done=done)
        stack = nxt
        if done:
            rb.on_episode_end()
            ep, i = ep + 1, 0
    grown = rss() - before
    assert "next_obs" in rb.sample(1, beta=0.4)

    def step() -> None:
        b = rb.sample(32, beta=0.4)
        rb.update_priorities(b["indexes"], np.abs(b["rew"][:, 0]) + 0.01)

    return {
        "name": "cpprb PrioritizedReplayBuffer (Nstep, stack_compress on obs and next_obs)",
        "steps": steps,
        "sample_us": timed(lambda: rb.sample(32, beta=0.4), repeats) * 1e6,
        "learner_step_us": timed(step, repeats) * 1e6,
        "bytes_per_transition": grown / steps,
    }


def nstep_sb3(steps: int, repeats: int) -> dict[str, Any]:
    from gymnasium import spaces
    from stable_baselines3.common.buffers import NStepReplayBuffer

    before = rss()
    rb = NStepReplayBuffer(
        steps,
        spaces.Box(0, 255, (4, *FRAME), np.uint8),
        spaces.Discrete(4),
        device="cpu",
        n_steps=3,
        gamma=0.99,
    )
    pool = frames_pool()
    lengths = episode_lengths(steps)
    ep, i = 0, 0
    for t in range(steps):
        idx = (t + np.arange(4)) % 64
        i += 1
        done = i == lengths[ep]
        rb.add(pool[idx][None], pool[(idx + 1) % 64][None], np.array([t % 4]), np.array([1.0]), np.array([done]), [{}])
        if done:
            ep, i = ep + 1, 0
    grown = rss() - before
    sample = timed(lambda: rb.sample(32), repeats)
    return {
        "name": "SB3 NStepReplayBuffer (uniform; no optimize_memory_usage with n-step)",
        "steps": steps,
        "sample_us": sample * 1e6,
        "learner_step_us": sample * 1e6,
        "bytes_per_transition": grown / steps,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=1 << 18, help="steps of the R2D2 and n-step buffers")
    p.add_argument("--flat", type=int, default=1 << 15, help="steps of the flat layout and SB3 (56 KB each)")
    p.add_argument("--draws", type=int, default=1_000_000, help="windows drawn to count cross-episode ones")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--only", choices=["r2d2", "nstep"], default=None)
    p.add_argument(
        "--peers",
        default="ours,torchrl,torchrl_kary",
        help="the R2D2 rows: ours, torchrl, torchrl_kary (TorchRL with kary_replay.torchrl's slice sampler), "
        "flashbax (comma-separated)",
    )
    p.add_argument(
        "--ours-only",
        action="store_true",
        help="our rows alone (R2D2 and n-step): what bench/sequence-ab.sh compares between two commits",
    )
    p.add_argument("--json", default=None, help="write the results here")
    a = p.parse_args()
    if a.ours_only:
        a.peers = "ours"
    results: dict[str, Any] = {"steps": a.steps, "flat": a.flat}
    if a.only in (None, "r2d2"):
        rows: dict[str, Callable[[int, int, int], dict[str, Any]]] = {
            "ours": r2d2_ours,
            "torchrl": r2d2_torchrl,
            "torchrl_kary": functools.partial(r2d2_torchrl, kary=True),
            "flashbax": r2d2_flashbax,
        }
        results["r2d2"] = [rows[name](a.steps, a.repeats, a.draws) for name in a.peers.split(",")]
        for r in results["r2d2"]:
            print(
                f"R2D2  {r['name']:<45} sample {r['sample_ms']:8.2f} ms  writers {r['writers']}: "
                f"{r['writer_steps_per_s']:10.0f} steps/s (1 writer {r['one_writer_steps_per_s']:8.0f})  "
                f"cross-episode {r['cross_episode']}/{r['draws']}"
                + (f"  (sampler alone {r['index_ms']:.2f} ms)" if "index_ms" in r else "")
            )
    if a.only in (None, "nstep"):
        results["nstep"] = [nstep_ours(a.steps, a.repeats * 10)]
        if not a.ours_only:
            results["nstep"] += [
                nstep_flat(a.flat, a.repeats * 10),
                nstep_cpprb(a.steps, a.repeats * 10),
                nstep_sb3(a.flat, a.repeats * 10),
            ]
        for r in results["nstep"]:
            into = f" (into its arrays {r['learner_step_into_us']:5.0f})" if "learner_step_into_us" in r else ""
            print(
                f"nstep {r['name']:<80} sample {r['sample_us']:8.0f} us  learner step "
                f"{r['learner_step_us']:8.0f} us{into}  {r['bytes_per_transition'] / 1000:6.1f} KB/transition"
            )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
