"""SharedReplayBuffer across real processes: multiprocessing (fork, spawn, forkserver), a
process pool, Ray actors on this node, actors killed mid-run, two learners, a rate limit
that every process waits on."""

import multiprocessing as mp
import os
import pickle
import signal
import time
from concurrent.futures import ProcessPoolExecutor

import kary_replay as kr
import numpy as np
import pytest

SCHEMA = {"obs": ("float32", (4,)), "id": ("int64", ()), "check": ("int64", ())}


def rows(first: int, n: int) -> dict[str, np.ndarray]:
    """Items ``first..first+n``: observations and a checksum that a torn row breaks."""
    ids = np.arange(first, first + n, dtype=np.int64)
    obs = (ids[:, None] * 7 + np.arange(4)[None, :]).astype(np.float32) + 0.25
    return {"obs": obs, "id": ids, "check": checksum(obs, ids)}


def checksum(obs: np.ndarray, ids: np.ndarray) -> np.ndarray:
    bits = obs.view(np.int32).astype(np.int64)
    return ids * 1_000_003 + bits.sum(axis=1)


def check(batch: kr.Batch) -> int:
    """Every sampled row whole; returns how many."""
    assert np.array_equal(checksum(batch["obs"], batch["id"]), batch["check"])
    want = rows(0, int(batch["id"].max()) + 1)["obs"][batch["id"]]
    assert np.array_equal(batch["obs"], want)
    return len(batch["id"])


def actor(rb: kr.SharedReplayBuffer, first: int, n: int, batch: int) -> int:
    """Insert items first..first+n in batches; returns the process id."""
    for start in range(first, first + n, batch):
        rb.add_batch(**rows(start, min(batch, first + n - start)))
    return os.getpid()


def actor_by_name(name: str, first: int, n: int) -> int:
    rb = kr.SharedReplayBuffer.attach(name)
    return actor(rb, first, n, 10)


def forever(rb: kr.SharedReplayBuffer, first: int) -> None:
    """Insert until killed."""
    i = first
    while True:
        rb.add_batch(**rows(i, 16))
        i += 16


def learner(rb: kr.SharedReplayBuffer, rounds: int, seed: int) -> int:
    """Sample, check, update; returns the rows checked."""
    rng = kr.Rng(seed)
    n = 0
    for r in range(rounds):
        b = rb.sample(32, rng=rng)
        n += check(b)
        rb.update_priorities(b["keys"], 0.5 + (np.arange(32) + r) % 7)
    return n


def test_create_attach_pickle_and_the_context_manager():
    with kr.SharedReplayBuffer(256, SCHEMA) as rb:
        name = rb.name
        assert os.path.exists(f"/dev/shm/{name}")
        rb.add_batch(**rows(0, 20))
        other = pickle.loads(pickle.dumps(rb))
        assert isinstance(other, kr.SharedReplayBuffer)
        assert other.name == name and len(other) == 20 and other.schema == rb.schema
        assert other.key_tag == rb.key_tag
        b = other.sample(16)
        assert check(b) == 16
        # Keys from one handle update through the other.
        assert rb.update_priorities(b["keys"], np.full(16, 2.0))[1] == 0
        assert [p["this_handle"] for p in rb.participants()].count(True) == 1
        assert len(rb.participants()) == 2
        del other
    # The unnamed buffer's creator removed the name it made.
    assert not os.path.exists(f"/dev/shm/{name}")
    with pytest.raises(kr.SharedBufferError):
        kr.SharedReplayBuffer.attach(name)


def test_a_named_buffer_stays_until_unlink_and_names_are_taken_once():
    name = f"kr-py-test-{os.getpid()}"
    rb = kr.SharedReplayBuffer(64, SCHEMA, name=name)
    with pytest.raises(kr.SharedBufferError, match="taken"):
        kr.SharedReplayBuffer(64, SCHEMA, name=name)
    with rb:
        pass
    assert kr.SharedReplayBuffer.attach(name).capacity == 64
    rb.unlink()
    with pytest.raises(kr.SharedBufferError):
        rb.unlink()
    with pytest.raises(kr.SharedBufferError):
        kr.SharedReplayBuffer(64, SCHEMA, name="no/slashes")
    # The buffer outlives its name.
    rb.add_batch(**rows(0, 3))
    assert len(rb) == 3


def test_bad_input_is_refused_as_in_every_buffer():
    with kr.SharedReplayBuffer(64, SCHEMA) as rb:
        with pytest.raises(kr.SchemaError):
            rb.add_batch(obs=np.zeros((2, 4), np.float64), id=np.zeros(2, np.int64), check=np.zeros(2, np.int64))
        with pytest.raises(kr.InvalidPriorityError):
            rb.add_batch(priorities=[float("nan"), 1.0], **rows(0, 2))
        assert len(rb) == 0
        with pytest.raises(kr.SchemaError):
            kr.SharedReplayBuffer(64, {})
        # Shuffled passes live in one process's memory: a shared buffer refuses them.
        rb.add_batch(**rows(0, 4))
        with pytest.raises(ValueError, match="shared mapping"):
            rb.sample(2, mode="shuffled")
        # Alpha at run time, in the mapping: every handle sees it.
        keys = rb.add_batch(priorities=[4.0, 9.0], **rows(4, 2))
        other = kr.SharedReplayBuffer.attach(rb.name)
        rb.set_alpha(0.5)
        assert other.alpha == 0.5
        np.testing.assert_array_equal(other.priorities_of(keys), [2.0, 3.0])
        np.testing.assert_array_equal(other.raw_priorities_of(keys), [4.0, 9.0])
        other.close()


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_multiprocessing_actors_write_what_the_parent_samples(method):
    ctx = mp.get_context(method)
    with kr.SharedReplayBuffer(4096, SCHEMA) as rb:
        procs = [ctx.Process(target=actor, args=(rb, k * 1000, 500, 25)) for k in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
        assert len(rb) == 1000
        for _ in range(10):
            assert check(rb.sample(64)) == 64
        assert rb.consistency()["exact"]


def test_a_process_pool_and_two_learner_processes():
    ctx = mp.get_context("spawn")
    with kr.SharedReplayBuffer(2048, SCHEMA) as rb:
        with ProcessPoolExecutor(2, mp_context=ctx) as pool:
            pids = list(pool.map(actor_by_name, [rb.name] * 2, [0, 1000], [400, 400]))
            assert len(set(pids)) >= 1 and len(rb) == 800
            # Two learners sample and update the one buffer at once.
            checked = list(pool.map(learner, [rb, rb], [50, 50], [1, 2]))
        assert checked == [1600, 1600]
        assert rb.consistency()["exact"]


def test_an_actor_killed_mid_run_costs_at_most_its_batch_and_blocks_nobody():
    ctx = mp.get_context("fork")
    with kr.SharedReplayBuffer(1024, SCHEMA) as rb:
        rb.add_batch(**rows(0, 64))
        for k in range(10):
            p = ctx.Process(target=forever, args=(rb, 100_000 * (k + 1)))
            p.start()
            time.sleep(0.02 + 0.003 * k)
            os.kill(p.pid, signal.SIGKILL)
            p.join()
            # The learner goes on at once: samples are whole, inserts over every slot
            # go through (the dead actor's slots included), sums are exact at rest.
            assert check(rb.sample(64)) == 64
            t = time.perf_counter()
            rb.add_batch(**rows(10_000 * k, 1024))
            assert time.perf_counter() - t < 1.0
            rb.recover()
            assert rb.consistency()["exact"]
            assert len(rb.participants()) == 1
        assert rb.recovered == 10


def sample_until_closed(rb: kr.SharedReplayBuffer, samples: int) -> str:
    """Take `samples` samples of 16, each waiting for the rate limit; then wait for one
    more until the limit is closed. Returns how it ended."""
    for _ in range(samples):
        check(rb.sample(16))
    try:
        rb.sample(16)
    except kr.ClosedError:
        return "closed"
    return "sampled"


def test_a_rate_limit_holds_across_processes_and_close_ends_every_wait():
    # 2 samples per insert once 32 items are in, within +-64 samples.
    limit = kr.SampleToInsertRatio(2.0, min_size=32, error_buffer=64.0)
    ctx = mp.get_context("spawn")
    with kr.SharedReplayBuffer(1024, SCHEMA, rate_limit=limit, max_sample=16) as rb:
        assert kr.SharedReplayBuffer.attach(rb.name).rate_limit == limit
        with ProcessPoolExecutor(1, mp_context=ctx) as pool:
            # The learner process waits for this process's inserts, then for more.
            done = pool.submit(sample_until_closed, rb, 4)
            deadline = time.time() + 30
            while rb.rate_stats()["sample_waiters"] == 0:
                assert time.time() < deadline, "the learner process never waited"
                time.sleep(0.005)
            rb.add_batch(**rows(0, 16))
            time.sleep(0.05)
            assert not done.done() and rb.rate_stats()["samples"] == 0
            rb.add_batch(**rows(16, 16))
            # Its 4 samples took the credit to the bottom of the range: the 5th waits.
            while rb.rate_stats()["samples"] < 64 or rb.rate_stats()["sample_waiters"] == 0:
                assert time.time() < deadline, "the learner process did not sample"
                time.sleep(0.005)
            with pytest.raises(kr.RateLimitedError):
                rb.sample(16, timeout=0)
            rb.close()
            assert done.result(timeout=10) == "closed"
        stats = rb.rate_stats()
        assert (stats["inserts"], stats["samples"], stats["closed"]) == (32, 64, True)


def test_ray_actors_on_this_node_share_the_buffer():
    ray = pytest.importorskip("ray")
    # The workers import this file's functions: its directory on their path.
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    ray.init(
        num_cpus=2,
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        object_store_memory=100 << 20,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    try:

        @ray.remote
        class Actor:
            def run(self, rb: kr.SharedReplayBuffer, first: int) -> tuple[str, int]:
                actor(rb, first, 300, 30)
                return rb.name, os.getpid()

        with kr.SharedReplayBuffer(2048, SCHEMA) as rb:
            actors = [Actor.remote() for _ in range(2)]
            out = ray.get([a.run.remote(rb, k * 1000) for k, a in enumerate(actors)])
            assert {name for name, _ in out} == {rb.name}
            assert all(pid != os.getpid() for _, pid in out)
            assert len(rb) == 600
            assert check(rb.sample(128)) == 128
            del actors
    finally:
        ray.shutdown()


def test_delete_by_key_in_a_shared_buffer():
    with kr.SharedReplayBuffer(64, SCHEMA) as rb:
        keys = rb.add_batch(**rows(0, 8))
        assert rb.delete(keys[:3]) == (3, 0)
        assert len(rb) == 5 and rb.delete(keys[:1]) == (0, 1)
        other = pickle.loads(pickle.dumps(rb))  # the same mapping, attached
        assert len(other) == 5 and other.key(0) is None
        b = other.sample(5, 0.4, mode="without_replacement")
        assert check(b) == 5 and sorted(b["keys"].tolist()) == sorted(keys[3:].tolist())
        with pytest.raises(kr.errors.InvalidArgumentError, match="write back"):
            rb.write_back(keys[3:4], id=[99])


def test_consume_after_one_draw_across_handles():
    with kr.SharedReplayBuffer(64, SCHEMA, max_times_sampled=1) as rb:
        keys = rb.add_batch(**rows(0, 8))
        other = pickle.loads(pickle.dumps(rb))  # the same mapping, attached
        a = rb.sample(4, 0.4, mode="without_replacement")
        b = other.sample(4, 0.4, mode="without_replacement")
        assert check(a) == 4 and check(b) == 4
        assert sorted(a["keys"].tolist() + b["keys"].tolist()) == sorted(keys.tolist())
        assert len(rb) == 0 and len(other) == 0


def versioned_actor(name: str, version: int, n: int) -> int:
    """Insert `n` items of policy version `version` into the shared buffer `name`; returns
    how many inserts the buffer refused as retired."""
    rb = kr.SharedReplayBuffer.attach(name)
    refused = 0
    for _ in range(n):
        try:
            rb.add(obs=np.zeros(2, np.float32), version=version)
        except kr.errors.InvalidArgumentError:
            refused += 1
    return refused


def test_a_policy_version_window_across_processes():
    schema = {"obs": ("float32", (2,)), "version": ("int64", ())}
    with kr.SharedReplayBuffer(256, schema, version_column="version") as rb:
        ctx = mp.get_context("spawn")
        with ctx.Pool(2) as pool:
            assert pool.starmap(versioned_actor, [(rb.name, 1, 20), (rb.name, 2, 20)]) == [0, 0]
            assert len(rb) == 40
            assert rb.retire_before(2) == 20 and len(rb) == 20
            # A process attached later sees the floor, and its old items are refused.
            assert pool.starmap(versioned_actor, [(rb.name, 1, 5), (rb.name, 3, 5)]) == [5, 0]
        assert len(rb) == 25 and rb.version_floor == 2
        assert (rb.sample(64, mode="independent")["version"] >= 2).all()
