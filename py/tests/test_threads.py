"""Threads and the sampling distribution through Python."""

import threading

import kary_replay as kr
import numpy as np
import pytest

SCHEMA = {"obs": ("float32", (8,)), "id": ("int64", ())}


@pytest.mark.parametrize("variant", ["split", "lockfree", "global"])
def test_actors_and_learners_in_threads(variant):
    """Two actor threads add numbered items (add_batch, a writer and add), two learner
    threads sample and update, all at once: no exception, every sampled row is the item its
    key names, nothing inserted is lost, and the sums are exact at the end."""
    rb = kr.PrioritizedReplayBuffer(4096, SCHEMA, variant=variant)
    per_actor = 3000
    errors = []
    done = threading.Event()

    def actor(a):
        try:
            ids = np.arange(a * per_actor, (a + 1) * per_actor)
            obs = np.repeat(ids.astype(np.float32)[:, None], 8, axis=1)
            if a == 0:
                for i in range(0, per_actor, 50):
                    rb.add_batch(obs=obs[i : i + 50], id=ids[i : i + 50])
            else:
                with rb.writer(32) as w:
                    for i in range(per_actor - 100):
                        w.push(obs=obs[i], id=ids[i])
                for i in range(per_actor - 100, per_actor):
                    rb.add(priority=1.5, obs=obs[i], id=ids[i])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    def learner(seed):
        rng = kr.Rng(seed)
        try:
            while not done.is_set():
                if len(rb) < 64:
                    continue
                try:
                    b = rb.sample(64, 0.4, rng=rng)
                except kr.ContentionError:
                    continue
                # A row is whole and is the item its key names (generation = insertion order,
                # so the id tells which actor; both columns agree).
                assert np.all(b["obs"] == b["id"][:, None].astype(np.float32))
                rb.update_priorities(b["keys"], np.abs(np.sin(b["id"])) + 0.01)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    learners = [threading.Thread(target=learner, args=(s,)) for s in (1, 2)]
    actors = [threading.Thread(target=actor, args=(a,)) for a in (0, 1)]
    for t in learners + actors:
        t.start()
    for t in actors:
        t.join()
    done.set()
    for t in learners:
        t.join()
    assert not errors, errors
    s = rb.stats()
    assert s["inserted"] == 2 * per_actor and s["len"] == 4096
    assert rb.consistency()["exact"]
    # Nothing lost: the stored items are exactly the last `capacity` inserted.
    stored = sorted(rb.key(i) & ((1 << 48) - 1) for i in range(4096))
    assert stored == list(range(2 * per_actor - 4096, 2 * per_actor))


def test_chi_square_of_a_million_draws():
    """10^6 draws through Python over four priority classes match p_i / sum p (chi-square,
    3 degrees of freedom, below the 0.999 quantile 16.27), with alpha 1."""
    rb = kr.PrioritizedReplayBuffer(1000, SCHEMA, alpha=1.0)
    classes = np.repeat(np.arange(4), 250)
    priorities = np.array([0.5, 1.0, 2.0, 4.0])[classes]
    rb.add_batch(priorities=priorities, obs=np.zeros((1000, 8), np.float32), id=classes)
    rng = kr.Rng(12345)
    counts = np.zeros(4)
    for _ in range(1000):
        b = rb.sample(1000, 1.0, mode="independent", rng=rng)
        counts += np.bincount(b["id"], minlength=4)
    expected = 1e6 * np.array([0.5, 1.0, 2.0, 4.0]) * 250 / priorities.sum()
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 16.27, (counts, expected, chi2)
    # The probabilities the batch reports are the exact ones.
    b = rb.sample(4, 1.0, rng=rng)
    np.testing.assert_allclose(
        b["probabilities"], np.array([0.5, 1.0, 2.0, 4.0])[b["id"]] / priorities.sum(), rtol=1e-12
    )


def test_the_gil_is_released_while_sampling():
    """While the main thread is inside a large sample, another Python thread runs: it
    stamps the time in a loop, and stamps fall inside the call's window (with the GIL held
    throughout the call, none could)."""
    import time

    rb = kr.PrioritizedReplayBuffer(1 << 16, {"obs": ("float32", (256,))})
    rb.add_batch(obs=np.ones((1 << 16, 256), np.float32))
    stamps = []
    stop = threading.Event()

    def stamper():
        while not stop.is_set():
            stamps.append(time.perf_counter())

    t = threading.Thread(target=stamper)
    t.start()
    inside = 0
    for _ in range(5):
        start = time.perf_counter()
        rb.sample(1 << 14, 0.4)  # 16 MiB of rows: milliseconds without the GIL
        end = time.perf_counter()
        inside += any(start < s < end for s in stamps[-100000:])
    stop.set()
    t.join()
    assert inside >= 3, inside


_SHARED_GENERATORS = """
import threading, numpy as np, kary_replay as kr
rb = kr.PrioritizedReplayBuffer(1 << 16, {"obs": ("float32", (8,)), "id": ("int64", ())})
rb.add_batch(obs=np.zeros((1 << 16, 8), np.float32), id=np.arange(1 << 16))
shared = kr.Rng(4)
def sampler(rng):
    for _ in range(300):
        rb.sample(2048, 0.4, rng=rng)
def reader():
    for _ in range(3000):
        shared.state()
        shared.random()
threads = [threading.Thread(target=sampler, args=(r,)) for r in (None, None, shared, shared)]
threads.append(threading.Thread(target=reader))
for t in threads:
    t.start()
for t in threads:
    t.join()
print("done")
"""


def test_threads_sharing_a_generator_do_not_deadlock():
    """Threads that sample with the buffer's own generator (no rng given), or share one Rng
    while another thread reads its state, finish: a generator's lock is never held by a
    thread that waits for the GIL. Run in a child process: a deadlock there holds the GIL,
    so it is caught by the child's time limit."""
    import subprocess
    import sys

    try:
        done = subprocess.run([sys.executable, "-c", _SHARED_GENERATORS], capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("threads sharing a generator deadlocked")
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr
