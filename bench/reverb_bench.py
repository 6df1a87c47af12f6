"""An IMPALA-style queue through Python beside DeepMind's Reverb, in one run
(bench/peers.sh reverb_bench; dm-reverb 0.14 in a venv of its own, scripts/lib/reverb-env.sh).

The queue: FIFO draws, each item retired after its first draw (``max_times_sampled=1``), a
``Queue`` rate limit (ours: the ring's size less the largest sample, which the buffer
requires so that inserts admitted while a sample runs never evict items not handed out yet;
Reverb's: the table's size), items of three columns (obs float32 x 6, action
int64, reward float32: 36 bytes, the Rust queue bench's shape). Two shapes, each for our
``PrioritizedReplayBuffer`` (split and lock-free) and for a Reverb table (``Fifo`` sampler and
remover, ``rate_limiters.Queue``, in-process server and client, the path without gRPC):

- one thread: insert B items, sample B items, repeated; items through the queue per second;
- two threads: a producer thread inserting batches of B and a consumer thread sampling
  batches of B, each blocking on the rate limit (ours releases the GIL while it waits and
  copies); items per second.

Reverb's rows, each its own way from Python: ``reverb-client`` inserts with ``client.insert``
(one call an item) and samples with ``client.sample(table, num_samples=B)``; ``reverb-writer``
inserts with a ``TrajectoryWriter`` (one ``append`` and one ``create_item`` an item, flushed per
batch) and samples as ``reverb-client``; ``reverb-dataset`` inserts as ``reverb-writer`` and
samples batches of B from a ``TrajectoryDataset`` (TensorFlow's input pipeline, the way Acme's
IMPALA learners read a queue).
"""

import argparse
import json
import statistics
import threading
import time
from typing import Any

import kary_replay as kr
import numpy as np

CAPACITY = 1 << 16
SCHEMA = {"obs": ("float32", (6,)), "action": ("int64", ()), "reward": ("float32", ())}


def rows(b: int) -> dict[str, np.ndarray]:
    return {
        "obs": np.ones((b, 6), np.float32),
        "action": np.arange(b, dtype=np.int64),
        "reward": np.zeros(b, np.float32),
    }


class Ours:
    def __init__(self, variant: kr.Variant) -> None:
        self.rb = kr.PrioritizedReplayBuffer(
            CAPACITY,
            SCHEMA,
            variant=variant,
            max_times_sampled=1,
            rate_limit=kr.Queue(CAPACITY - 256),
            max_insert=256,
        )

    def insert(self, batch: dict[str, np.ndarray]) -> None:
        self.rb.add_batch(obs=batch["obs"], action=batch["action"], reward=batch["reward"])

    def sample(self, b: int) -> int:
        # A draw that meets only slots being written gives up with ContentionError (the
        # producer was preempted mid-write): the documented answer is to call again.
        while True:
            try:
                return len(self.rb.sample(b, mode="fifo")["action"])
            except kr.errors.ContentionError:
                continue

    def close(self) -> None:
        pass


class Reverb:
    def __init__(self, kind: str) -> None:
        import reverb
        import tensorflow as tf

        signature = {
            "obs": tf.TensorSpec([6], tf.float32),
            "action": tf.TensorSpec([], tf.int64),
            "reward": tf.TensorSpec([], tf.float32),
        }
        table = reverb.Table(
            "q",
            sampler=reverb.selectors.Fifo(),
            remover=reverb.selectors.Fifo(),
            max_size=CAPACITY,
            rate_limiter=reverb.rate_limiters.Queue(CAPACITY),
            max_times_sampled=1,
            signature=signature,
        )
        self.server = reverb.Server(tables=[table])
        self.client = reverb.Client(f"localhost:{self.server.port}")
        self.kind = kind
        self.writer: Any = None
        self.batches: Any = None

    def insert(self, batch: dict[str, np.ndarray]) -> None:
        n = len(batch["action"])
        if self.kind == "client":
            for i in range(n):
                row = {"obs": batch["obs"][i], "action": batch["action"][i], "reward": batch["reward"][i]}
                self.client.insert(row, priorities={"q": 1.0})
            return
        if self.writer is None:
            self.writer = self.client.trajectory_writer(num_keep_alive_refs=1)
        w = self.writer
        for i in range(n):
            w.append({"obs": batch["obs"][i], "action": batch["action"][i], "reward": batch["reward"][i]})
            w.create_item("q", 1.0, {k: w.history[k][-1] for k in ("obs", "action", "reward")})
        w.flush()

    def sample(self, b: int) -> int:
        if self.kind == "dataset":
            if self.batches is None:
                import reverb

                dataset = reverb.TrajectoryDataset.from_table_signature(
                    server_address=f"localhost:{self.server.port}", table="q", max_in_flight_samples_per_worker=b
                )
                self.batches = iter(dataset.batch(b))
            return int(next(self.batches).data["action"].shape[0])
        return sum(1 for _ in self.client.sample("q", num_samples=b, emit_timesteps=False))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.server.stop()


def make(name: str) -> Any:
    if name.startswith("ours-"):
        return Ours("split" if name == "ours-split" else "lockfree")
    return Reverb(name.removeprefix("reverb-"))


def one_thread(name: str, b: int, items: int) -> float:
    q = make(name)
    batch = rows(b)
    try:
        for _ in range(4):  # warm-up
            q.insert(batch)
            q.sample(b)
        start = time.perf_counter()
        done = 0
        while done < items:
            q.insert(batch)
            done += q.sample(b)
        return done / (time.perf_counter() - start)
    finally:
        q.close()


def two_threads(name: str, b: int, items: int) -> float:
    q = make(name)
    batch = rows(b)
    rounds = items // b

    def produce() -> None:
        for _ in range(rounds):
            q.insert(batch)

    try:
        start = time.perf_counter()
        producer = threading.Thread(target=produce)
        producer.start()
        done = 0
        while done < rounds * b:
            done += q.sample(b)
        producer.join()
        return done / (time.perf_counter() - start)
    finally:
        q.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", default="64,256", help="batch sizes B")
    p.add_argument("--items", type=int, default=200_000, help="items through each queue per run (ours)")
    p.add_argument("--reverb-items", type=int, default=20_000, help="items per run for Reverb (slower)")
    p.add_argument("--repeats", type=int, default=3, help="runs per row; the median is reported")
    p.add_argument(
        "--only",
        default="ours-split,ours-lockfree,reverb-dataset,reverb-writer,reverb-client",
        help="rows to run",
    )
    p.add_argument("--json", help="write the results here too")
    a = p.parse_args()
    results: list[dict[str, Any]] = []
    names = a.only.split(",")
    for b in [int(x) for x in a.batches.split(",")]:
        for shape, fn in (("one thread", one_thread), ("two threads", two_threads)):
            medians: dict[str, float] = {}
            for _ in range(a.repeats):  # alternate the rows within each repeat
                for name in names:
                    items = a.items if name.startswith("ours") else a.reverb_items
                    medians.setdefault(name, 0.0)
                    r = fn(name, b, items)
                    results.append({"queue": name, "B": b, "shape": shape, "items_per_s": r})
            for name in names:
                runs = [r["items_per_s"] for r in results if (r["queue"], r["B"], r["shape"]) == (name, b, shape)]
                medians[name] = statistics.median(runs)
                print(
                    f"{shape:11s} B={b:4d} {name:26s} {medians[name] / 1e6:7.3f}M items/s  (runs: "
                    + ", ".join(f"{x / 1e6:.3f}M" for x in runs)
                    + ")",
                    flush=True,
                )
            best_reverb = max((v for k, v in medians.items() if k.startswith("reverb")), default=None)
            if best_reverb:
                for name in names:
                    if name.startswith("ours"):
                        print(f"{'':11s} {name} / fastest Reverb: {medians[name] / best_reverb:.1f}x", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
