"""Sequences across processes at the R2D2 shape (bench/peers.sh shm_sequence_bench).

One SharedSequenceReplayBuffer: u8 84x84 frames, 4 lanes of STEPS/4 steps, windows of 120
steps every 40 (cut windows dropped), episodes of 200-1200 steps. An actor process writes
one lane (pushes of one step, as an actor stepping its environment does); the learner (this
process) takes learner steps: a sample of B = 64 windows and the update of their 64
priorities. Rows: the actor's steps/s alone and with the learner running, the learner's
steps/s alone and with the actor running, each side's share of its rate alone (target: each
>= 0.7). The bound: the same actor and learner at once on two shared buffers that share
nothing (what two processes reach on this machine with no synchronization between them);
and the actor as a thread of the learner's process on an in-process SequenceReplayBuffer
(what the GIL leaves the pair without processes).
"""

import argparse
import json
import multiprocessing as mp
import os
import statistics
import threading
import time
from typing import Any

import numpy as np

FRAME = (84, 84)
B = 64
CTX = mp.get_context("fork")


def make(steps: int, shared: bool) -> Any:
    import kary_replay as kr

    per_lane = steps // 4 // 40 * 40
    schema = {"obs": ("uint8", FRAME), "reward": ("float32", ())}
    options: dict[str, Any] = {"window": 120, "period": 40, "partial": "drop"}
    if shared:
        return kr.SharedSequenceReplayBuffer(4, per_lane, schema, **options)
    return kr.SequenceReplayBuffer(4, per_lane, schema, **options)


def episode_lengths(n: int, seed: int) -> list[int]:
    r = np.random.default_rng(seed)
    return [int(x) for x in r.integers(200, 1201, n)]


def write(rb: Any, lane: int, stop: Any, count: Any, limit: int | None = None) -> None:
    """Push steps into `lane` until `stop` is set (or `limit` steps), counting them."""
    frames = np.random.default_rng(lane).integers(0, 256, (64, *FRAME), dtype=np.uint8)
    lengths = episode_lengths(4096, lane)
    w = rb.lane(lane)
    ep, i, n = 0, 0, 0
    while not stop.is_set() and (limit is None or n < limit):
        for _ in range(64):
            w.push(obs=frames[n % 64], reward=1.0)
            n += 1
            i += 1
            if i == lengths[ep % len(lengths)]:
                w.end_episode()
                ep, i = ep + 1, 0
        with count.get_lock():
            count.value += 64


def actor_process(name: str, lane: int, stop: Any, count: Any) -> None:
    import kary_replay as kr

    write(kr.SharedSequenceReplayBuffer.attach(name), lane, stop, count)


def learner_steps(rb: Any, seconds: float, seed: int) -> float:
    """Learner steps/s over `seconds`: sample B windows, update their priorities."""
    import kary_replay as kr

    rng = kr.Rng(seed)
    prio = np.random.default_rng(seed).random(B) + 0.1
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        b = rb.sample(B, rng=rng)
        rb.update_priorities(b["keys"], prio)
        n += 1
    return n / (time.perf_counter() - t0)


def actor_rate(start: Any, seconds: float) -> float:
    """Steps/s an actor (started by `start`, which returns its stop event, counter and
    joiner) writes over `seconds`."""
    stop, count, join = start()
    time.sleep(0.3)
    c0, t0 = count.value, time.perf_counter()
    time.sleep(seconds)
    rate = float(count.value - c0) / (time.perf_counter() - t0)
    stop.set()
    join()
    return rate


def in_process(rb: Any, lane: int) -> Any:
    def start() -> tuple[Any, Any, Any]:
        stop, count = CTX.Event(), CTX.Value("q", 0)
        p = CTX.Process(target=actor_process, args=(rb.name, lane, stop, count))
        p.start()
        return stop, count, lambda: p.join(30)

    return start


def fill(rb: Any, steps_per_lane: int) -> None:
    """Fill lanes 1-3 (the actor writes lane 0) so that the learner samples a full buffer."""
    stop, count = threading.Event(), CTX.Value("q", 0)
    for lane in (1, 2, 3):
        write(rb, lane, stop, count, limit=steps_per_lane)


def run(steps: int, seconds: float, repeats: int) -> dict[str, Any]:
    rb = make(steps, shared=True)
    other = make(steps, shared=True)
    local = make(steps, shared=False)
    per_lane = steps // 4
    for b in (rb, other, local):
        fill(b, per_lane)
    rows: dict[str, list[float]] = {k: [] for k in ("actor_alone", "learner_alone", "actor_with", "learner_with")}
    rows.update({k: [] for k in ("bound_actor", "bound_learner", "thread_actor", "thread_learner")})
    for r in range(repeats):
        rows["actor_alone"].append(actor_rate(in_process(rb, 0), seconds))
        rows["learner_alone"].append(learner_steps(rb, seconds, r))
        # Both at once, on the one buffer.
        stop, count = CTX.Event(), CTX.Value("q", 0)
        p = CTX.Process(target=actor_process, args=(rb.name, 0, stop, count))
        p.start()
        time.sleep(0.3)
        c0, t0 = count.value, time.perf_counter()
        rows["learner_with"].append(learner_steps(rb, seconds, r))
        rows["actor_with"].append((count.value - c0) / (time.perf_counter() - t0))
        stop.set()
        p.join(30)
        # The bound: the actor on another buffer, nothing shared.
        stop, count = CTX.Event(), CTX.Value("q", 0)
        p = CTX.Process(target=actor_process, args=(other.name, 0, stop, count))
        p.start()
        time.sleep(0.3)
        c0, t0 = count.value, time.perf_counter()
        rows["bound_learner"].append(learner_steps(rb, seconds, r))
        rows["bound_actor"].append((count.value - c0) / (time.perf_counter() - t0))
        stop.set()
        p.join(30)
        # The actor as a thread of this process, on an in-process buffer.
        stop_t, count_t = threading.Event(), CTX.Value("q", 0)
        th = threading.Thread(target=write, args=(local, 0, stop_t, count_t))
        th.start()
        time.sleep(0.3)
        c0, t0 = count_t.value, time.perf_counter()
        rows["thread_learner"].append(learner_steps(local, seconds, r))
        rows["thread_actor"].append((count_t.value - c0) / (time.perf_counter() - t0))
        stop_t.set()
        th.join()
    med = {k: statistics.median(v) for k, v in rows.items()}
    t_actor = statistics.median(rows["actor_alone"])
    t_learner = statistics.median(rows["learner_alone"])
    return {
        "steps": steps,
        "seconds": seconds,
        "repeats": repeats,
        "cores": os.cpu_count(),
        "median": med,
        "share": {
            "actor": med["actor_with"] / t_actor,
            "learner": med["learner_with"] / t_learner,
            "bound_actor": med["bound_actor"] / t_actor,
            "bound_learner": med["bound_learner"] / t_learner,
            "thread_actor": med["thread_actor"] / t_actor,
            "thread_learner": med["thread_learner"] / t_learner,
        },
        "memory_bytes": rb.memory_bytes,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=1 << 16, help="steps over the 4 lanes")
    p.add_argument("--seconds", type=float, default=2.0, help="each measurement's length")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    out = run(a.steps, a.seconds, a.repeats)
    m, s = out["median"], out["share"]
    print(f"actor alone   {m['actor_alone']:10.0f} steps/s   learner alone {m['learner_alone']:8.1f} steps/s")
    print(
        f"together      {m['actor_with']:10.0f} steps/s ({s['actor']:.2f})   "
        f"{m['learner_with']:8.1f} steps/s ({s['learner']:.2f})"
    )
    print(
        f"bound         {m['bound_actor']:10.0f} steps/s ({s['bound_actor']:.2f})   "
        f"{m['bound_learner']:8.1f} steps/s ({s['bound_learner']:.2f})"
    )
    print(
        f"thread actor  {m['thread_actor']:10.0f} steps/s ({s['thread_actor']:.2f})   "
        f"{m['thread_learner']:8.1f} steps/s ({s['thread_learner']:.2f})"
    )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
