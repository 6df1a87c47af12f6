"""Checkpoint save and load beside the peers', in one run (bench/peers.sh checkpoint_peers).

The same content everywhere: ITEMS items of 128 f32 observations (1 GiB at 2^21) with a
priority each. Each side saves into a new file or directory and loads into a new buffer;
before each load the files' pages are dropped from the page cache (posix_fadvise), so
every load reads the disk. The harness fsyncs every file a peer wrote, inside the timed
save (cpprb and TorchRL do not fsync; kary-replay and the plain write do). Rows:

- plain I/O: the observation bytes written to one file (+ fsync) and read into a new array;
- kary-replay: SplitLockBuffer save (pause, copy, write, fsync) and load (read, CRC, checks,
  exact rebuild), by examples/checkpoint_io.rs;
- cpprb 11.0.0: PrioritizedReplayBuffer.save_transitions / load_transitions;
- TorchRL 0.14.1: TensorDictPrioritizedReplayBuffer(LazyTensorStorage).dumps / loads.

For each: median seconds over REPEATS, GiB/s of observation bytes, and whether the loaded
buffer has the saved priorities (checked, not assumed).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

SHAPE = 128
ALPHA = 0.6


def files_under(path):
    if os.path.isfile(path):
        return [path]
    return [os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs]


def fsync_all(path):
    for f in files_under(path):
        fd = os.open(f, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def drop_cache(path):
    for f in files_under(path):
        fd = os.open(f, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def remove(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


def timed(repeats, save, load, path):
    """Median save and load seconds; `load` returns whether priorities survived."""
    saves, loads, kept = [], [], True
    for _ in range(repeats):
        remove(path)
        t = time.perf_counter()
        save(path)
        fsync_all(path)
        saves.append(time.perf_counter() - t)
        drop_cache(path)
        t = time.perf_counter()
        kept_now = load(path)
        loads.append(time.perf_counter() - t)
        kept = kept and kept_now
        remove(path)
    return statistics.median(saves), statistics.median(loads), kept


def plain(obs, root, repeats):
    path = os.path.join(root, "plain.bin")

    def save(p):
        with open(p, "wb") as f:
            f.write(memoryview(obs).cast("B"))

    def load(p):
        out = np.empty_like(obs)
        with open(p, "rb", buffering=0) as f:
            f.readinto(memoryview(out).cast("B"))
        return True

    s, ld, _ = timed(repeats, save, load, path)
    return s, ld, None


def cpprb_side(obs, prio, root, repeats):
    import cpprb

    n = len(obs)
    env = {"obs": {"shape": SHAPE, "dtype": np.float32}}
    rb = cpprb.PrioritizedReplayBuffer(n, env, alpha=ALPHA)
    for i in range(0, n, 65536):
        rb.add(obs=obs[i : i + 65536], priorities=prio[i : i + 65536])
    path = os.path.join(root, "cpprb.npz")
    kept = []

    def load(p):
        rb2 = cpprb.PrioritizedReplayBuffer(n, env, alpha=ALPHA)
        rb2.load_transitions(p)
        # Priorities survive only if the loaded weights differ (the saved priorities do).
        w = rb2.sample(4096, beta=1.0)["weights"]
        kept.append(bool(w.min() != w.max()))
        return kept[-1]

    s, ld, k = timed(repeats, rb.save_transitions, load, path)
    return s, ld, k


def torchrl_side(obs, prio, root, repeats):
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

    n = len(obs)

    def make():
        return TensorDictPrioritizedReplayBuffer(
            alpha=ALPHA,
            beta=0.4,
            storage=LazyTensorStorage(n),
            priority_key="td_error",
            batch_size=256,
        )

    rb = make()
    for i in range(0, n, 65536):
        rb.extend(
            TensorDict(
                {
                    "obs": torch.from_numpy(obs[i : i + 65536]),
                    "td_error": torch.from_numpy(prio[i : i + 65536].astype(np.float32)),
                },
                batch_size=[min(65536, n - i)],
            )
        )
    path = os.path.join(root, "torchrl")
    probe = [0, n // 3, n - 1]

    def load(p):
        rb2 = make()
        rb2.loads(p)
        a, b = rb._sampler._sum_tree, rb2._sampler._sum_tree
        return all(a[i] == b[i] for i in probe) and a.query(0, n) == b.query(0, n)

    return timed(repeats, rb.dumps, load, path)


def ours(root, items, repeats, binary):
    out = subprocess.run(
        [binary, os.path.join(root, "ours"), str(items), str(repeats)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    r = json.loads(out)
    return r["save_s"], r["load_s"], r["priorities_exact"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=1 << 21)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default="target/ckpt-peers")
    ap.add_argument("--ours", default="target/release/examples/checkpoint_io")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    rng = np.random.default_rng(1)
    obs = rng.random((a.items, SHAPE), dtype=np.float32)
    prio = rng.uniform(0.01, 10.0, a.items)
    gib = obs.nbytes / 2**30
    rows = [("plain I/O (one file)", plain(obs, a.dir, a.repeats))]
    rows.append(("kary-replay SplitLockBuffer save / load", ours(a.dir, a.items, a.repeats, a.ours)))
    rows.append(("cpprb 11.0.0 save_transitions / load_transitions", cpprb_side(obs, prio, a.dir, a.repeats)))
    rows.append(("TorchRL 0.14.1 dumps / loads", torchrl_side(obs, prio, a.dir, a.repeats)))
    base_s, base_l = rows[0][1][0], rows[0][1][1]
    print(f"{a.items} items x {SHAPE} f32 ({gib:.2f} GiB of observations), medians of {a.repeats}")
    print(
        "| saver | save s | save GiB/s | x plain write | load s | load GiB/s | x plain read | priorities after load |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, (s, ld, kept) in rows:
        k = "-" if kept is None else ("kept (checked)" if kept else "lost (checked)")
        print(
            f"| {name} | {s:.2f} | {gib / s:.2f} | {base_s / s:.2f} | {ld:.2f} | {gib / ld:.2f} | "
            f"{base_l / ld:.2f} | {k} |"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
