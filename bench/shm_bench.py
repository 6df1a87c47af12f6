"""Actor processes and a learner on one buffer, side by side in one run (bench/peers.sh shm_bench).

Systems (each with its actors in processes, the learner in this process):
- kary-replay SharedReplayBuffer: every process on the one shared buffer;
- cpprb MPPrioritizedReplayBuffer (pinned in scripts/lib/peers-requirements.txt): its shared
  buffer, one learner only;
- the bound: the same calls on two shared buffers, the actors' and the learner's, that share
  nothing (what two processes reach on this machine with no synchronization between them);
- TorchRL's PrioritizedReplayBuffer(sync=False) over a LazyMemmapStorage in /dev/shm (pinned
  torchrl): the actors write the shared memmap, the learner keeps the priorities in its own
  process, one learner only;
- a multiprocessing.Queue feeding one in-process kary-replay buffer (the lock-free one) that
  the learner drains between its steps (Spreeze's baseline: the actors ship batches).

Items: obs f32[4] (CartPole-like: obs, action, reward, done) and obs u8 84x84 (Atari-like).
An actor inserts batches of 64; a learner step is a sample of B = 256 (alpha 0.6, beta 0.4)
and the update of its 256 priorities. For each system: the actors' items/s alone and the
learner's steps/s alone, then both at once and each side's share of its rate alone, and the
insert-to-sampleable latency (median: the insert call for a shared buffer, whose items are
sampleable when it returns; put to insertion by the learner for the queue). For the shared
buffer also two learner processes at once, each one's share of its rate alone.
"""

import argparse
import json
import multiprocessing as mp
import os
import queue
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

ALPHA, BETA, B, BATCH = 0.6, 0.4, 256, 64
CTX = mp.get_context("fork")


def schema(kind: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    obs = ("float32", (4,)) if kind == "f32x4" else ("uint8", (84, 84))
    return {"obs": obs, "action": ("int64", ()), "reward": ("float32", ()), "done": ("bool", ())}


def batch(kind: str, n: int = BATCH, seed: int = 0) -> dict[str, Any]:
    r = np.random.default_rng(seed)
    obs = r.random((n, 4), dtype=np.float32) if kind == "f32x4" else r.integers(0, 255, (n, 84, 84), dtype=np.uint8)
    return {
        "obs": obs,
        "action": r.integers(0, 4, n).astype(np.int64),
        "reward": r.random(n, dtype=np.float32),
        "done": r.random(n) < 0.01,
    }


# --------------------------------------------------------------------------- systems
# Each: make(kind, capacity) -> state; actor(state, kind, stop, count, lat) runs in a child
# process; learner_step(state) in this one; close(state).


def timed_inserts(insert: Callable[[], Any], stop: Any, count: Any, lat: Any) -> None:
    """An actor process's loop: `insert` (a batch of BATCH items) until `stop` is set, the
    items counted in `count`, every 64th call's time put on `lat`."""
    n = 0
    while not stop.is_set():
        t = time.perf_counter()
        insert()
        if n % 64 == 0:
            lat.put(time.perf_counter() - t)
        n += 1
        with count.get_lock():
            count.value += BATCH


class Kary:
    name = "kary-replay SharedReplayBuffer"

    def make(self, kind: str, capacity: int) -> Any:
        import kary_replay as kr

        rb = kr.SharedReplayBuffer(capacity, schema(kind), alpha=ALPHA)
        src = batch(kind)
        for _ in range(capacity // BATCH):
            rb.add_batch(**src)
        return {"rb": rb, "rng": kr.Rng(1), "prio": np.random.default_rng(2).uniform(0.1, 10.0, B)}

    def actor(self, st: Any, kind: str, stop: Any, count: Any, lat: Any) -> None:
        rb, src = st["rb"], batch(kind)
        timed_inserts(lambda: rb.add_batch(**src), stop, count, lat)

    def learner_step(self, st: Any) -> None:
        s = st["rb"].sample(B, BETA, rng=st["rng"])
        st["rb"].update_priorities(s["keys"], st["prio"])

    def close(self, st: Any) -> None:
        st["rb"].unlink()


class Separate(Kary):
    """The bound: the same processes and calls on two buffers, the actor's and the learner's,
    sharing nothing (what the machine allows two processes here)."""

    name = "bound: two separate SharedReplayBuffers"

    def make(self, kind: str, capacity: int) -> Any:
        st = super().make(kind, capacity)
        st["learner"] = super().make(kind, capacity)
        return st

    def learner_step(self, st: Any) -> None:
        super().learner_step(st["learner"])

    def close(self, st: Any) -> None:
        super().close(st["learner"])
        super().close(st)


class Cpprb:
    name = "cpprb MPPrioritizedReplayBuffer"

    def make(self, kind: str, capacity: int) -> Any:
        import cpprb

        env = {
            "obs": {
                "shape": (4,) if kind == "f32x4" else (84, 84),
                "dtype": np.float32 if kind == "f32x4" else np.uint8,
            },
            "action": {"dtype": np.int64},
            "reward": {"dtype": np.float32},
            "done": {"dtype": np.bool_},
        }
        rb = cpprb.MPPrioritizedReplayBuffer(capacity, env, alpha=ALPHA, ctx=CTX)
        src = batch(kind)
        for _ in range(capacity // BATCH):
            rb.add(**src)
        return {"rb": rb, "prio": np.random.default_rng(2).uniform(0.1, 10.0, B)}

    def actor(self, st: Any, kind: str, stop: Any, count: Any, lat: Any) -> None:
        rb, src = st["rb"], batch(kind)
        timed_inserts(lambda: rb.add(**src), stop, count, lat)

    def learner_step(self, st: Any) -> None:
        s = st["rb"].sample(B, beta=BETA)
        st["rb"].update_priorities(s["indexes"], st["prio"])

    def close(self, st: Any) -> None:
        pass


class TorchRL:
    """TorchRL's prioritized buffer across processes: PrioritizedReplayBuffer(sync=False) over
    a LazyMemmapStorage in /dev/shm. The actor processes get a uniform sampler and write the
    shared memmap; the learner keeps the priority tree in its own process and marks the
    items written since its last sample (a shared write count) before each sample. One
    learner only; nothing keeps a learner from reading a row an actor is overwriting."""

    name = "TorchRL PrioritizedReplayBuffer(sync=False), LazyMemmapStorage"

    def make(self, kind: str, capacity: int) -> Any:
        import logging
        import tempfile

        import torch
        from torchrl.data import LazyMemmapStorage, TensorDictPrioritizedReplayBuffer

        logging.getLogger("torchrl").setLevel(logging.WARNING)
        torch.set_num_threads(1)
        scratch = tempfile.mkdtemp(prefix="kr-shm-bench-torchrl-", dir="/dev/shm")
        storage = LazyMemmapStorage(capacity, scratch_dir=scratch)
        rb = TensorDictPrioritizedReplayBuffer(alpha=ALPHA, beta=BETA, storage=storage, sync=False, batch_size=B)
        src = self.tensordict(kind)
        for _ in range(capacity // BATCH):
            rb.extend(src)
        return {
            "rb": rb,
            "scratch": scratch,
            "prio": torch.from_numpy(np.random.default_rng(2).uniform(0.1, 10.0, B).astype(np.float32)),
        }

    @staticmethod
    def tensordict(kind: str) -> Any:
        import torch
        from tensordict import TensorDict

        return TensorDict({k: torch.from_numpy(v) for k, v in batch(kind).items()}, batch_size=[BATCH])

    def actor(self, st: Any, kind: str, stop: Any, count: Any, lat: Any) -> None:
        rb, src = st["rb"], self.tensordict(kind)
        timed_inserts(lambda: rb.extend(src), stop, count, lat)

    def learner_step(self, st: Any) -> None:
        s = st["rb"].sample()
        st["rb"].update_priority(s["index"], st["prio"])

    def close(self, st: Any) -> None:
        import shutil

        shutil.rmtree(st["scratch"], ignore_errors=True)


class QueueFed:
    name = "multiprocessing.Queue -> kary-replay lockfree"

    def make(self, kind: str, capacity: int) -> Any:
        import kary_replay as kr

        rb = kr.PrioritizedReplayBuffer(capacity, schema(kind), alpha=ALPHA, variant="lockfree")
        src = batch(kind)
        for _ in range(capacity // BATCH):
            rb.add_batch(**src)
        st = {"rb": rb, "rng": kr.Rng(1), "prio": np.random.default_rng(2).uniform(0.1, 10.0, B)}
        st["q"] = CTX.Queue(maxsize=64)
        st["lat"] = []
        return st

    def actor(self, st: Any, kind: str, stop: Any, count: Any, lat: Any) -> None:
        src, q = batch(kind), st["q"]
        while not stop.is_set():
            try:
                q.put((time.perf_counter(), src), timeout=0.1)
            except queue.Full:
                continue
            with count.get_lock():
                count.value += BATCH
        # Exit without waiting for the queue's feeder to hand over what the learner will
        # not read any more (multiprocessing would wait for ever).
        q.cancel_join_thread()

    def drain(self, st: Any) -> None:
        q, rb = st["q"], st["rb"]
        while True:
            try:
                t, items = q.get_nowait()
            except queue.Empty:
                return
            rb.add_batch(**items)
            st["lat"].append(time.perf_counter() - t)

    def learner_step(self, st: Any) -> None:
        self.drain(st)
        s = st["rb"].sample(B, BETA, rng=st["rng"])
        st["rb"].update_priorities(s["keys"], st["prio"])

    def close(self, st: Any) -> None:
        pass


# --------------------------------------------------------------------------- runs


def run_actors(sys: Any, st: Any, kind: str, actors: int, seconds: float, learner: bool) -> dict[str, float]:
    stop, count, lat = CTX.Event(), CTX.Value("q", 0), CTX.Queue()
    if isinstance(sys, QueueFed):
        # A queue of its own per run: a previous run's actor may have left the old one's
        # writer lock taken.
        st["q"] = CTX.Queue(maxsize=64)
    procs = [CTX.Process(target=sys.actor, args=(st, kind, stop, count, lat), daemon=True) for _ in range(actors)]
    for p in procs:
        p.start()
    time.sleep(0.5)  # start-up
    c0, t0 = count.value, time.perf_counter()
    steps = 0
    while time.perf_counter() - t0 < seconds:
        if learner:
            sys.learner_step(st)
            steps += 1
        else:
            if isinstance(sys, QueueFed):
                sys.drain(st)  # the queue must be drained for the actor to go on
            time.sleep(0.001)
    dt = time.perf_counter() - t0
    items = (count.value - c0) / dt
    stop.set()
    if isinstance(sys, QueueFed):
        # Drain until the actors are out (a process killed mid-put would leave half a
        # message that no later get could finish).
        deadline = time.perf_counter() + 30
        while any(p.is_alive() for p in procs) and time.perf_counter() < deadline:
            sys.drain(st)
            time.sleep(0.01)
    lats = []
    while True:
        try:
            lats.append(lat.get(timeout=0.2))
        except queue.Empty:
            break
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
    if isinstance(sys, QueueFed):
        sys.drain(st)
        lats, st["lat"] = st["lat"], []
    return {
        "items_per_s": items,
        "steps_per_s": steps / dt,
        "latency_us": 1e6 * statistics.median(lats) if lats else float("nan"),
    }


def learner_alone(sys: Any, st: Any, seconds: float) -> float:
    t0, steps = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        sys.learner_step(st)
        steps += 1
    return steps / (time.perf_counter() - t0)


def _learner_proc(sys: Any, st: Any, seconds: float, out: Any) -> None:
    out.put(learner_alone(sys, st, seconds))


def two_learners(sys: Any, st: Any, seconds: float) -> list[float]:
    out = CTX.Queue()
    procs = [CTX.Process(target=_learner_proc, args=(sys, st, seconds, out)) for _ in range(2)]
    for p in procs:
        p.start()
    rates = [out.get(timeout=seconds + 30) for _ in procs]
    for p in procs:
        p.join(10)
    return rates


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", default="f32x4,u8x84x84")
    ap.add_argument("--actors", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--only", default="", help="comma-separated substrings of system names")
    ap.add_argument(
        "--queue-kinds",
        default="f32x4",
        help="the kinds the queue runs (its u8 84x84 run hangs in multiprocessing's pipe)",
    )
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    systems = [s() for s in (Kary, Separate, Cpprb, TorchRL, QueueFed)]
    if a.only:
        systems = [s for s in systems if any(w in s.name for w in a.only.split(","))]
    results: dict[str, Any] = {"actors": a.actors, "cpus": os.cpu_count(), "rows": {}}
    for kind in a.kinds.split(","):
        capacity = 1 << 16 if kind == "f32x4" else 1 << 13
        for sys in systems:
            if isinstance(sys, QueueFed) and kind not in a.queue_kinds.split(","):
                continue
            st = sys.make(kind, capacity)
            solo_a = run_actors(sys, st, kind, a.actors, a.seconds, learner=False)
            solo_l = learner_alone(sys, st, a.seconds)
            both = run_actors(sys, st, kind, a.actors, a.seconds, learner=True)
            row: dict[str, Any] = {
                "actor_items_per_s_alone": solo_a["items_per_s"],
                "learner_steps_per_s_alone": solo_l,
                "actor_items_per_s": both["items_per_s"],
                "learner_steps_per_s": both["steps_per_s"],
                "actor_share": both["items_per_s"] / solo_a["items_per_s"],
                "learner_share": both["steps_per_s"] / solo_l,
                "latency_us": both["latency_us"],
            }
            if type(sys) is Kary:
                rates = two_learners(sys, st, a.seconds)
                row["two_learners_share"] = [r / solo_l for r in rates]
            sys.close(st)
            results["rows"][f"{sys.name}|{kind}"] = row
            print(
                f"{kind:10s} {sys.name:45s} "
                + " ".join(f"{k}={v}" if isinstance(v, list) else f"{k}={v:.3g}" for k, v in row.items()),
                flush=True,
            )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
    # Every figure is out: leave without waiting for helper processes (cpprb's, queue
    # feeders) that multiprocessing's exit handlers could wait on for ever.
    os._exit(0)
