"""The buffers through Python, side by side in one run (bench/peers.sh python_bench).

Libraries (pinned in scripts/lib/peers-requirements.txt): cpprb, TorchRL, tianshou, rlox, and
kary-replay in each variant. Transitions: obs f32[D], action, reward, next_obs f32[D], done,
for D = 4 and 128; N items (default 2^20, prefilled); B = 256; alpha 0.6, beta 0.4.

Rows (median microseconds per call over REPEATS timed runs of about 0.3 s each):
- insert batch 1 (one transition per call) and insert batch 64 (64 per call; tianshou and
  rlox have no batch insert: 64 calls);
- sample (B items with weights and indices);
- update (B new priorities by the sample's indices or keys);
- learner step (a sample and its update).
Correctness in the same run: every buffer's priorities set to 4 classes (1, 2, 3, 4 by
index mod 4), 10^6 draws, chi-square against p^alpha / sum (3 degrees of freedom; the 0.999
quantile is 16.27).
Threads: an actor thread (insert batch 64 in a loop) and a learner thread (learner steps)
in one process, each one's rate beside its rate alone; cpprb's multi-process buffer
(MPPrioritizedReplayBuffer, the actor in a process) beside it.
"""

import argparse
import functools
import json
import multiprocessing as mp
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

ALPHA, BETA, B = 0.6, 0.4, 256
CLASSES = np.array([1.0, 2.0, 3.0, 4.0])


def transitions(n, d, seed=0):
    r = np.random.default_rng(seed)
    return dict(
        obs=r.random((n, d), dtype=np.float32),
        action=r.integers(0, 4, n).astype(np.int64),
        reward=r.random(n, dtype=np.float32),
        next_obs=r.random((n, d), dtype=np.float32),
        done=(r.random(n) < 0.01),
    )


# --------------------------------------------------------------------------- adapters
# Each: insert(batch dict of arrays) for any leading length; sample() -> (indices, handle);
# update(handle, priorities); set_all(priorities of all N by index); name.


class Kary:
    def __init__(self, n, d, variant):
        import kary_replay as kr

        self.name = f"kary-replay {variant}"
        self.rb = kr.PrioritizedReplayBuffer(
            n,
            {
                "obs": ("float32", (d,)),
                "action": ("int64", ()),
                "reward": ("float32", ()),
                "next_obs": ("float32", (d,)),
                "done": ("bool", ()),
            },
            alpha=ALPHA,
            variant=variant,
        )
        self.rng = kr.Rng(1)

    def insert(self, t):
        self.rb.add_batch(**t)

    def insert_one(self, t, i):
        self.rb.add(
            obs=t["obs"][i], action=t["action"][i], reward=t["reward"][i], next_obs=t["next_obs"][i], done=t["done"][i]
        )

    def sample(self):
        b = self.rb.sample(B, BETA, rng=self.rng)
        return b["indices"], b["keys"]

    def update(self, handle, p):
        self.rb.update_priorities(handle, p)

    def set_all(self, n, p):
        keys = np.array([self.rb.key(i) for i in range(n)], dtype=np.uint64)
        self.rb.update_priorities(keys, p)

    def thread_rng(self):
        import kary_replay as kr

        return kr.Rng(99)


class Cpprb:
    def __init__(self, n, d):
        import cpprb

        self.name = f"cpprb {cpprb.__version__ if hasattr(cpprb, '__version__') else ''}".strip()
        self.rb = cpprb.PrioritizedReplayBuffer(
            n,
            {
                "obs": {"shape": d, "dtype": np.float32},
                "action": {"dtype": np.int64},
                "reward": {"dtype": np.float32},
                "next_obs": {"shape": d, "dtype": np.float32},
                "done": {"dtype": np.bool_},
            },
            alpha=ALPHA,
        )

    def insert(self, t):
        self.rb.add(**t)

    def insert_one(self, t, i):
        self.rb.add(
            obs=t["obs"][i], action=t["action"][i], reward=t["reward"][i], next_obs=t["next_obs"][i], done=t["done"][i]
        )

    def sample(self):
        s = self.rb.sample(B, beta=BETA)
        return s["indexes"], s["indexes"]

    def update(self, handle, p):
        self.rb.update_priorities(handle, p)

    def set_all(self, n, p):
        self.rb.update_priorities(np.arange(n, dtype=np.uint64), p)


class TorchRL:
    def __init__(self, n, d):
        import torch
        import torchrl
        from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

        self.torch = torch
        self.name = f"TorchRL {torchrl.__version__}"
        self.rb = TensorDictPrioritizedReplayBuffer(alpha=ALPHA, beta=BETA, storage=LazyTensorStorage(n), batch_size=B)

    def _td(self, t):
        from tensordict import TensorDict

        n = len(t["reward"])
        return TensorDict({k: self.torch.from_numpy(np.ascontiguousarray(v)) for k, v in t.items()}, batch_size=[n])

    def insert(self, t):
        self.rb.extend(self._td(t))

    def insert_one(self, t, i):
        from tensordict import TensorDict

        self.rb.add(TensorDict({k: self.torch.as_tensor(v[i]) for k, v in t.items()}, batch_size=[]))

    def sample(self):
        s = self.rb.sample()
        return s["index"].numpy(), s["index"]

    def update(self, handle, p):
        self.rb.update_priority(handle, self.torch.from_numpy(p.astype(np.float32)))

    def set_all(self, n, p):
        self.rb.update_priority(self.torch.arange(n), self.torch.from_numpy(p.astype(np.float32)))


class Tianshou:
    def __init__(self, n, d):
        import tianshou
        from tianshou.data import PrioritizedReplayBuffer

        self.name = f"tianshou {tianshou.__version__}"
        self.rb = PrioritizedReplayBuffer(n, ALPHA, BETA)

    def insert(self, t):
        for i in range(len(t["reward"])):
            self.insert_one(t, i)

    def insert_one(self, t, i):
        from tianshou.data import Batch

        self.rb.add(
            Batch(
                obs=t["obs"][i],
                act=t["action"][i],
                rew=t["reward"][i],
                terminated=t["done"][i],
                truncated=False,
                obs_next=t["next_obs"][i],
                info={},
            )
        )

    def sample(self):
        _, idx = self.rb.sample(B)
        return idx, idx

    def update(self, handle, p):
        self.rb.update_weight(handle, p)

    def set_all(self, n, p):
        self.rb.update_weight(np.arange(n), p)


class Rlox:
    def __init__(self, n, d):
        import rlox

        self.name = f"rlox {getattr(rlox, '__version__', '')}".strip()
        self.rb = rlox.PrioritizedReplayBuffer(n, d, 1, ALPHA, BETA)
        self.seed = 0

    def insert(self, t):
        for i in range(len(t["reward"])):
            self.insert_one(t, i)

    def insert_one(self, t, i):
        self.rb.push(
            t["obs"][i],
            np.array([t["action"][i]], dtype=np.float32),
            float(t["reward"][i]),
            bool(t["done"][i]),
            False,
            next_obs=t["next_obs"][i],
        )

    def sample(self):
        self.seed += 1  # rlox returns the same batch for the same seed
        s = self.rb.sample(B, self.seed)
        return s["indices"], s["indices"]

    def update(self, handle, p):
        self.rb.update_priorities(np.asarray(handle, dtype=np.uint64), p)

    def set_all(self, n, p):
        self.rb.update_priorities(np.arange(n, dtype=np.uint64), p)


def libraries(which):
    out: list[tuple[str, Callable[[int, int], Any]]] = []
    for v in ("split", "lockfree", "global"):
        out.append((f"kary-replay {v}", functools.partial(Kary, variant=v)))
    out += [("cpprb", Cpprb), ("TorchRL", TorchRL), ("tianshou", Tianshou), ("rlox", Rlox)]
    return [(name, make) for name, make in out if not which or any(w in name for w in which)]


# --------------------------------------------------------------------------- timing


def per_call_us(fn, repeats, budget=0.3):
    """Median microseconds per call of fn() over `repeats` runs of about `budget` s."""
    calls = 1
    while True:  # calibrate
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        dt = time.perf_counter() - t
        if dt > budget / 10:
            break
        calls *= 4
    calls = max(1, int(calls * budget / dt))
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - t) / calls * 1e6)
    return statistics.median(runs)


def measure(lib, n, d, repeats, src):
    chunk = 4096
    t0 = time.perf_counter()
    for i in range(0, n, chunk):
        lib.insert({k: v[i % len(src["reward"]) : i % len(src["reward"]) + chunk] for k, v in src.items()})
    fill_s = time.perf_counter() - t0
    one = {k: v[:1024] for k, v in src.items()}
    b64 = {k: v[:64] for k, v in src.items()}
    counter = [0]

    def ins1():
        counter[0] = (counter[0] + 1) % 1024
        lib.insert_one(one, counter[0])

    prio = np.random.default_rng(1).uniform(0.1, 10.0, (64, B))
    pc = [0]

    def upd_handle():
        pc[0] = (pc[0] + 1) % 64
        return prio[pc[0]]

    _, handle = lib.sample()

    def learner_step():
        _, h = lib.sample()
        lib.update(h, upd_handle())

    r = {
        "fill_s": fill_s,
        "insert_1_us": per_call_us(ins1, repeats),
        "insert_64_us": per_call_us(lambda: lib.insert(b64), repeats),
        "sample_us": per_call_us(lib.sample, repeats),
        "update_us": per_call_us(lambda: lib.update(handle, upd_handle()), repeats),
        "learner_step_us": per_call_us(learner_step, repeats),
    }
    # Correctness: classes by index mod 4; 10^6 draws.
    p = CLASSES[np.arange(n) % 4]
    lib.set_all(n, p)
    counts = np.zeros(4)
    draws = 0
    while draws < 1_000_000:
        idx, _ = lib.sample()
        idx = np.asarray(idx, dtype=np.int64)
        counts += np.bincount(idx % 4, minlength=4)
        draws += len(idx)
    w = CLASSES**ALPHA
    expected = draws * w / w.sum()
    r["chi2"] = float(((counts - expected) ** 2 / expected).sum())
    return r


# --------------------------------------------------------------------------- threads


def thread_shares(make, n, d, seconds, src):
    """Each side's rate in a thread beside the other, over its rate alone."""
    lib = make(n, d)
    for i in range(0, n, 4096):
        lib.insert({k: v[i % len(src["reward"]) : i % len(src["reward"]) + 4096] for k, v in src.items()})
    b64 = {k: v[:64] for k, v in src.items()}
    prio = np.random.default_rng(2).uniform(0.1, 10.0, B)

    def actor(stop, count):
        while not stop.is_set():
            lib.insert(b64)
            count[0] += 1

    def learner(stop, count):
        while not stop.is_set():
            _, h = lib.sample()
            lib.update(h, prio)
            count[0] += 1

    def run(which):
        stop = threading.Event()
        counts = {w: [0] for w in which}
        threads = [
            threading.Thread(target={"actor": actor, "learner": learner}[w], args=(stop, counts[w])) for w in which
        ]
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
        return {w: counts[w][0] / seconds for w in which}

    solo_a = run(["actor"])["actor"]
    solo_l = run(["learner"])["learner"]
    both = run(["actor", "learner"])
    return {
        "actor_solo": solo_a,
        "learner_solo": solo_l,
        "actor_share": both["actor"] / solo_a,
        "learner_share": both["learner"] / solo_l,
    }


def _mp_actor(rb, src64, stop, count):
    while not stop.is_set():
        rb.add(**src64)
        with count.get_lock():
            count.value += 1


def cpprb_mp_shares(n, d, seconds, src):
    """cpprb's MPPrioritizedReplayBuffer: the actor in a process, the learner in this one."""
    import cpprb

    ctx = mp.get_context("fork")
    env = {
        "obs": {"shape": d, "dtype": np.float32},
        "action": {"dtype": np.int64},
        "reward": {"dtype": np.float32},
        "next_obs": {"shape": d, "dtype": np.float32},
        "done": {"dtype": np.bool_},
    }
    rb = cpprb.MPPrioritizedReplayBuffer(n, env, alpha=ALPHA, ctx=ctx)
    for i in range(0, n, 4096):
        rb.add(**{k: v[i % len(src["reward"]) : i % len(src["reward"]) + 4096] for k, v in src.items()})
    src64 = {k: v[:64] for k, v in src.items()}
    prio = np.random.default_rng(2).uniform(0.1, 10.0, B)

    def learner_for(stop_at):
        c = 0
        while time.perf_counter() < stop_at:
            s = rb.sample(B, beta=BETA)
            rb.update_priorities(s["indexes"], prio)
            c += 1
        return c

    def actor_run(with_learner):
        stop, count = ctx.Event(), ctx.Value("l", 0)
        p = ctx.Process(target=_mp_actor, args=(rb, src64, stop, count))
        p.start()
        time.sleep(0.5)  # the process's start-up
        c0, t0 = count.value, time.perf_counter()
        if with_learner:
            lc = learner_for(t0 + seconds)
        else:
            time.sleep(seconds)
            lc = 0
        a = (count.value - c0) / (time.perf_counter() - t0)
        stop.set()
        p.join()
        return a, lc / seconds

    solo_a, _ = actor_run(False)
    solo_l = learner_for(time.perf_counter() + seconds) / seconds
    both_a, both_l = actor_run(True)
    return {
        "actor_solo": solo_a,
        "learner_solo": solo_l,
        "actor_share": both_a / solo_a,
        "learner_share": both_l / solo_l,
    }


# --------------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=1 << 20)
    ap.add_argument("--dims", default="4,128")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated substrings of library names")
    ap.add_argument("--thread-seconds", type=float, default=2.0)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    which = [w for w in a.only.split(",") if w]
    results = {"items": a.items, "B": B, "rows": {}, "threads": {}}
    for d in [int(x) for x in a.dims.split(",")]:
        src = transitions(min(a.items, 1 << 16), d)
        for name, make in libraries(which):
            lib = make(a.items, d)
            r = measure(lib, a.items, d, a.repeats, src)
            results["rows"][f"{name}|{d}"] = r
            print(f"D={d:4d} {name:22s} " + " ".join(f"{k}={v:.2f}" for k, v in r.items()), flush=True)
            del lib
    d = 4
    src = transitions(1 << 16, d)
    for name, make in libraries(which):
        if name.startswith("kary-replay") or name == "cpprb":
            results["threads"][name] = thread_shares(make, 1 << 16, d, a.thread_seconds, src)
            print(f"threads {name:22s} {results['threads'][name]}", flush=True)
    if not which or "cpprb" in which:
        results["threads"]["cpprb MP (actor process)"] = cpprb_mp_shares(1 << 16, d, a.thread_seconds, src)
        print(f"threads cpprb MP {results['threads']['cpprb MP (actor process)']}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    table(results)


def table(results):
    rows = results["rows"]
    dims = sorted({int(k.split("|")[1]) for k in rows})
    for d in dims:
        names = [k.split("|")[0] for k in rows if k.endswith(f"|{d}")]
        peers = [n for n in names if not n.startswith("kary-replay")]
        print(f"\nobs f32[{d}], N = {results['items']}, B = {results['B']}: microseconds per call (median)\n")
        print("| library | insert 1 | insert 64 | sample | update | learner step | chi-square (10^6 draws) |")
        print("|---|---|---|---|---|---|---|")
        for n in names:
            r = rows[f"{n}|{d}"]
            print(
                f"| {n} | {r['insert_1_us']:.1f} | {r['insert_64_us']:.1f} | {r['sample_us']:.1f} | "
                f"{r['update_us']:.1f} | {r['learner_step_us']:.1f} | {r['chi2']:.1f} |"
            )
        if peers:
            best = {
                m: min(rows[f"{p}|{d}"][m] for p in peers) for m in ("insert_64_us", "learner_step_us", "insert_1_us")
            }
            print()
            for n in names:
                if n.startswith("kary-replay"):
                    r = rows[f"{n}|{d}"]
                    print(
                        f"{n}: learner step {best['learner_step_us'] / r['learner_step_us']:.2f}x the best peer, "
                        f"insert 64 {best['insert_64_us'] / r['insert_64_us']:.2f}x, insert 1 {best['insert_1_us'] / r['insert_1_us']:.2f}x"
                    )
    if results["threads"]:
        print(
            "\nan actor thread (insert 64) beside a learner thread (B = 256 steps): each one's share of its solo rate\n"
        )
        print("| buffer | actor alone (calls/s) | learner alone (steps/s) | actor share | learner share |")
        print("|---|---|---|---|---|")
        for n, t in results["threads"].items():
            print(
                f"| {n} | {t['actor_solo']:.0f} | {t['learner_solo']:.0f} | {t['actor_share']:.2f} | {t['learner_share']:.2f} |"
            )


if __name__ == "__main__":
    main()
