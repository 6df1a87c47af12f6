"""SharedSequenceReplayBuffer across real processes: actor processes (fork, spawn) write lanes
while the parent samples windows, the same buffer as one process would build, actors
killed mid-episode, pickles, names, bad input, a rate limit every process waits on."""

import multiprocessing as mp
import os
import pickle
import signal
import time

import kary_replay as kr
import numpy as np
import pytest

SCHEMA = {"obs": ("float32", (2,)), "check": ("int64", ()), "reward": ("float32", ())}
OPTIONS = {"window": 4, "period": 2, "nstep": (3, 0.5, "reward"), "next_of": ("obs",), "alpha": 1.0}


def value(lane: int, t: int) -> float:
    return float(lane * 100_000 + t)


def check_value(v: np.ndarray) -> np.ndarray:
    return (v.astype(np.int64) * 0x9E3779B9) ^ 0x5555


def write(lane: kr.LaneWriter, steps: int, episode: int) -> None:
    """Push `steps` steps of lane `lane.lane`, ending an episode every `episode` steps."""
    n = lane.lane
    for t in range(steps):
        v = value(n, lane.position)
        lane.push(obs=np.array([v, -v], np.float32), check=check_value(np.array(v)), reward=1.0)
        if (t + 1) % episode == 0:
            v = value(n, lane.position)
            lane.end_episode(obs=np.array([v, -v], np.float32), truncated=True)


def actor(rb: kr.SharedSequenceReplayBuffer, lane: int, steps: int, episode: int) -> None:
    with rb.lane(lane) as w:
        write(w, steps, episode)


def actor_forever(name: str, lane: int) -> None:
    rb = kr.SharedSequenceReplayBuffer.attach(name)
    w = rb.lane(lane)
    while True:
        write(w, 1000, 37)


def check(batch: kr.Batch) -> int:
    """Every window whole: consecutive steps of one lane, each row's check its value."""
    obs, checks, mask = batch["obs"], batch["check"], batch["mask"]
    for b in range(len(batch["keys"])):
        n = int(mask[b].sum())
        v = obs[b, :n, 0]
        assert np.array_equal(obs[b, :n, 1], -v), "torn observation"
        assert np.array_equal(checks[b, :n], check_value(v)), "torn row"
        assert np.array_equal(np.diff(v), np.ones(n - 1, np.float32)), "steps not consecutive"
    return len(batch["keys"])


def test_create_attach_pickle_and_one_writer_per_lane():
    with kr.SharedSequenceReplayBuffer(4, 64, SCHEMA, **OPTIONS) as rb:
        other = pickle.loads(pickle.dumps(rb))
        assert isinstance(other, kr.SharedSequenceReplayBuffer) and other.name == rb.name
        assert kr.SharedSequenceReplayBuffer.attach(rb.name).capacity == rb.capacity
        assert len(rb.participants()) == 2  # this handle and `other`
        with rb.lane(1) as w:
            write(w, 20, 50)
            with pytest.raises(kr.InvalidArgumentError, match="already has a writer"):
                other.lane(1)
            with pytest.raises(kr.InvalidArgumentError, match="batch of 1"):
                w.set_batch(8)
        assert len(other) == len(rb) > 0
        assert check(other.sample(16, rng=kr.Rng(1))) == 16
        # Bad input is refused and changes nothing, as in every buffer.
        with other.lane(1) as w:
            with pytest.raises(kr.SchemaError):
                w.push(obs=np.zeros(3, np.float32), check=0, reward=1.0)
            with pytest.raises(kr.SchemaError):
                w.push(obs=np.zeros(2, np.float64), check=0, reward=1.0)
        with pytest.raises(kr.InvalidPriorityError):
            rb.update_priorities(rb.sample(2)["keys"], [float("nan"), 1.0])
        name = rb.name
    assert not os.path.exists(f"/dev/shm/{name}")
    with pytest.raises(kr.SharedBufferError, match="no shared sequence buffer has this name"):
        kr.SharedSequenceReplayBuffer.attach(name)


def test_a_flat_mapping_is_not_a_sequence_one():
    with (
        kr.SharedReplayBuffer(16, {"x": ("float32", ())}) as flat,
        pytest.raises(kr.SharedBufferError, match="not a shared sequence buffer"),
    ):
        kr.SharedSequenceReplayBuffer.attach(flat.name)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_actor_processes_write_lanes_the_parent_samples(method):
    ctx = mp.get_context(method)
    with kr.SharedSequenceReplayBuffer(4, 256, SCHEMA, **OPTIONS) as rb:
        procs = [ctx.Process(target=actor, args=(rb, k, 400, 29)) for k in range(3)]
        for p in procs:
            p.start()
        checked = 0
        while any(p.is_alive() for p in procs):
            if len(rb):
                checked += check(rb.sample(64))
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
        # The same steps written in one process make the same buffer.
        local = kr.SequenceReplayBuffer(4, 256, SCHEMA, **OPTIONS)
        for k in range(3):
            actor(local, k, 400, 29)
        assert len(rb) == len(local) and rb.steps_written == local.steps_written
        assert rb.total_priority == local.total_priority
        for _ in range(10):
            checked += check(rb.sample(64))
        assert checked >= 640
        assert rb.consistency()["exact"]
        b = rb.sample(32, rng=kr.Rng(5))
        assert rb.update_priorities(b["keys"], np.arange(1, 33)) == (32, 0)


def test_an_actor_killed_mid_episode_is_recovered_and_its_lane_goes_on():
    ctx = mp.get_context("fork")
    with kr.SharedSequenceReplayBuffer(2, 128, SCHEMA, **OPTIONS) as rb:
        for k in range(8):
            p = ctx.Process(target=actor_forever, args=(rb.name, 0))
            p.start()
            time.sleep(0.05 + 0.007 * k)
            os.kill(p.pid, signal.SIGKILL)
            p.join()
            # The learner goes on at once: windows are whole, sums exact after recovery.
            if len(rb):
                check(rb.sample(64))
            rb.recover()
            assert rb.consistency()["exact"]
            assert len(rb.participants()) == 1
            # The lane takes a new writer; the dead episode was ended.
            with rb.lane(0) as w:
                assert not w.in_episode
                write(w, 50, 1000)
            check(rb.sample(64))
        assert rb.recovered == 8


def sample_until_closed(name: str) -> tuple[int, str]:
    """Sample 8 windows at a time, each waiting for the rate limit, until it is closed;
    returns the samples taken and how it ended."""
    rb = kr.SharedSequenceReplayBuffer.attach(name)
    n = 0
    try:
        while True:
            check(rb.sample(8))
            n += 1
            time.sleep(0.01)
    except kr.ClosedError:
        return n, "closed"


def test_a_rate_limit_counts_windows_of_every_process():
    # Sampling waits for 16 windows from the actor process (MinSize), counted in the
    # mapping: one limit for every process.
    limit = kr.MinSize(16)
    with kr.SharedSequenceReplayBuffer(2, 128, SCHEMA, rate_limit=limit, **OPTIONS) as rb:
        ctx = mp.get_context("fork")
        with ctx.Pool(1) as pool:
            learner = pool.apply_async(sample_until_closed, (rb.name,))
            time.sleep(0.3)
            assert not learner.ready(), "a sample went ahead of the rate limit"
            assert rb.rate_stats()["samples"] == 0
            actor(rb, 0, 60, 1000)
            time.sleep(0.3)
            # Closing it here ends the wait there.
            rb.close()
            n, how = learner.get(30)
        assert how == "closed" and n >= 1
        stats = rb.rate_stats()
        assert stats["samples"] == 8 * n and stats["inserts"] == len(rb)
