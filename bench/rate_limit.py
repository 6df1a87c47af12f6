"""Rate limiting through Python, side by side in one run (bench/peers.sh rate_limit).

Wake latency: a sampler thread blocks on a sample of 1 that a ``Queue`` limit refuses
until the next insert; the main thread inserts one item (after a pause that lets the
sampler park) and the latency is the time from just before that insert to the sampler's
return. Rows: ``kr.RateLimiter`` alone, a ``kr.PrioritizedReplayBuffer`` holding the limit
(``rb.sample(1)`` woken by ``rb.add``), and a limiter written the common Python way: two
counters under a ``threading.Condition`` (``notify_all`` on every insert). TorchRL's
``RateLimitedReplayBuffer`` is on its main branch only (not in TorchRL 0.14.1, the newest
release on PyPI), so it is not measured.

Ratio under a 4:1 mismatch: an actor thread stages items through a writer of 16, sleeping
after every 16 pushes so that alone it would insert about 4 times what the learner's samples
need at the target ratio; a learner thread samples B = 256, updates and sleeps per step. With
``SampleToInsertRatio(8, min_size=1000, error_buffer=512)`` the buffer must hold
samples / inserts at 8 (within the error buffer); without a limit the ratio falls to what
the speeds give (about 2). A monitor thread reads the counts every millisecond: the largest
distance of ``inserts * 8 - samples`` from its target is reported beside the range.

Lane pushes under a limit: 1 and 4 Python threads push 20,000 small steps each into a
``kr.SequenceReplayBuffer`` without a limit and into one with a limit that never blocks
inserts (``MinSize(1)``, counted in windows), alternating, so that the figure is the
admission's cost on the actor's path.
"""

import argparse
import json
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import kary_replay as kr
import numpy as np


class ConditionLimiter:
    """A Queue(size) limiter as Python code usually writes one."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.inserts = 0
        self.samples = 0
        self.cond = threading.Condition()

    def insert(self, n: int) -> None:
        with self.cond:
            while self.inserts + n - self.samples > self.size:
                self.cond.wait()
            self.inserts += n
            self.cond.notify_all()

    def sample(self, n: int) -> None:
        with self.cond:
            while self.inserts - self.samples < n:
                self.cond.wait()
            self.samples += n
            self.cond.notify_all()


def wake_latency(insert: Callable[[], Any], sample: Callable[[], Any], rounds: int, pause: float) -> list[float]:
    """Microseconds from just before each insert to the blocked sampler's return."""
    done = threading.Event()
    woke: list[int] = []
    go = threading.Semaphore(0)

    def sampler() -> None:
        for _ in range(rounds):
            go.release()  # about to block
            sample()
            woke.append(time.perf_counter_ns())
        done.set()

    t = threading.Thread(target=sampler)
    t.start()
    latencies = []
    for _ in range(rounds):
        go.acquire()
        time.sleep(pause)  # let it park
        start = time.perf_counter_ns()
        n = len(woke)
        insert()
        while len(woke) == n:
            time.sleep(0)
        latencies.append((woke[-1] - start) / 1e3)
    done.wait()
    t.join()
    return latencies


def percentile(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def latency_rows(rounds: int, pause: float) -> list[dict[str, Any]]:
    rows: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = []
    obs = np.zeros(2, np.float32)

    limiter = kr.RateLimiter(kr.Queue(64), max_insert=1, max_sample=1)
    rows.append(("kr.RateLimiter", lambda: limiter.insert(1), lambda: limiter.sample(1)))

    rb = kr.PrioritizedReplayBuffer(
        1024, {"obs": ("float32", (2,))}, rate_limit=kr.Queue(64), max_insert=1, max_sample=1
    )
    rng = kr.Rng(1)
    rows.append(("PrioritizedReplayBuffer(rate_limit=Queue)", lambda: rb.add(obs=obs), lambda: rb.sample(1, rng=rng)))

    cond = ConditionLimiter(64)
    rows.append(("threading.Condition limiter", lambda: cond.insert(1), lambda: cond.sample(1)))

    out = []
    for name, insert, sample in rows:
        xs = wake_latency(insert, sample, rounds, pause)
        out.append({"limiter": name, "p50_us": percentile(xs, 50), "p99_us": percentile(xs, 99), "rounds": rounds})
    return out


def mismatch(limited: bool, seconds: float, learner_sleep: float, actor_sleep: float) -> dict[str, Any]:
    spi, min_size, error_buffer = 8.0, 1000, 512.0
    limit = kr.SampleToInsertRatio(spi, min_size=min_size, error_buffer=error_buffer) if limited else None
    rb = kr.PrioritizedReplayBuffer(
        1 << 16, {"obs": ("float32", (4,))}, rate_limit=limit, max_insert=16, max_sample=256
    )
    stop = threading.Event()
    counts = {"inserts": 0, "samples": 0}
    worst = [0.0]

    def actor() -> None:
        writer = rb.writer(16)
        obs = np.zeros(4, np.float32)
        try:
            while not stop.is_set():
                for _ in range(16):
                    writer.push(obs=obs)
                counts["inserts"] += 16
                time.sleep(actor_sleep)
        except kr.ClosedError:
            pass

    def learner() -> None:
        rng = kr.Rng(2)
        try:
            while not stop.is_set():
                if not limited and len(rb) < min_size:
                    time.sleep(0.001)
                    continue
                batch = rb.sample(256, rng=rng)
                rb.update_priorities(batch["keys"], np.full(256, 1.5))
                counts["samples"] += 256
                time.sleep(learner_sleep)
        except kr.ClosedError:
            pass

    def monitor() -> None:
        while not stop.is_set():
            s = rb.rate_stats()
            if s is not None and s["open"]:
                worst[0] = max(worst[0], abs(s["diff"] - spi * min_size))
            time.sleep(0.001)

    threads = [threading.Thread(target=f) for f in (actor, learner, monitor)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    rb.close()
    for t in threads:
        t.join()
    stats = rb.rate_stats()
    inserted = rb.stats()["inserted"]
    samples = stats["samples"] if stats else counts["samples"]
    return {
        "limited": limited,
        "target": spi,
        "samples_per_insert": samples / max(inserted, 1),
        # The first min_size items are inserted before any sample: the ratio from there on.
        "after_min_size": samples / max(inserted - min_size, 1),
        "inserts_per_s": inserted / seconds,
        "samples_per_s": samples / seconds,
        "worst_distance": worst[0] if limited else None,
        "error_buffer": error_buffer,
        "blocked_s": stats["blocked_s"] if stats else 0.0,
    }


SEQ_SCHEMA = {"obs": ("float32", (4,)), "action": ("int64", ()), "reward": ("float32", ())}


def lane_pushes(limited: bool, threads: int, steps: int) -> float:
    """Steps per second that `threads` lane threads push, each its own lane."""
    limit = {"rate_limit": kr.MinSize(1), "max_sample": 8} if limited else {}
    rb = kr.SequenceReplayBuffer(4, 1 << 16, SEQ_SCHEMA, **limit)  # type: ignore[arg-type]

    def push(n: int) -> None:
        lane, obs = rb.lane(n), np.zeros(4, np.float32)
        for t in range(steps):
            lane.push(obs=obs, action=t, reward=1.0)

    workers = [threading.Thread(target=push, args=(n,)) for n in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return threads * steps / (time.perf_counter() - start)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=400)
    p.add_argument("--pause", type=float, default=0.002, help="seconds the sampler is left to park")
    p.add_argument("--seconds", type=float, default=5.0, help="length of each mismatch run")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", help="write the results here too")
    a = p.parse_args()
    results: dict[str, Any] = {"latency": [], "mismatch": []}
    for _ in range(a.repeats):
        results["latency"].append(latency_rows(a.rounds, a.pause))
    # The learner: 256 samples per step of about 2 ms; the actor: 16 items per 0.16 ms sleep
    # and its pushes, about 4x the items that 8 samples per insert need (the unlimited run
    # shows the factor: 8 over its ratio).
    for _ in range(a.repeats):
        for limited in (True, False):
            results["mismatch"].append(mismatch(limited, a.seconds, learner_sleep=0.002, actor_sleep=0.00016))
    results["lanes"] = [
        {"threads": th, "limited": lim, "steps_per_s": lane_pushes(lim, th, 20000)}
        for _ in range(a.repeats)
        for th in (1, 4)
        for lim in (False, True)
    ]
    print("wake latency (us): limiter, p50, p99 (median over repeats)")
    names = [r["limiter"] for r in results["latency"][0]]
    for i, name in enumerate(names):
        p50 = statistics.median(run[i]["p50_us"] for run in results["latency"])
        p99 = statistics.median(run[i]["p99_us"] for run in results["latency"])
        print(f"  {name:45s} {p50:8.1f} {p99:8.1f}")
    print(
        "ratio under a 4:1 mismatch: limited, samples/insert (target 8), after min_size, inserts/s, "
        "samples/s, worst |diff - 8000| (range), blocked s"
    )
    for r in results["mismatch"]:
        worst = "-" if r["worst_distance"] is None else f"{r['worst_distance']:.0f} (+-{r['error_buffer']:.0f})"
        print(
            f"  {r['limited']!s:5s} {r['samples_per_insert']:6.3f} {r['after_min_size']:6.3f} "
            f"{r['inserts_per_s']:10.0f} {r['samples_per_s']:10.0f} {worst:>12s} {r['blocked_s']:6.2f}"
        )
    print("lane pushes (steps/s, median over repeats): threads, without a limit, with one")
    for th in (1, 4):
        rate = {
            lim: statistics.median(
                r["steps_per_s"] for r in results["lanes"] if (r["threads"], r["limited"]) == (th, lim)
            )
            for lim in (False, True)
        }
        print(f"  {th} {rate[False]:10.0f} {rate[True]:10.0f} ({rate[True] / rate[False]:.2f}x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
