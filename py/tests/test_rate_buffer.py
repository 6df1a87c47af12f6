"""A rate limit held by PrioritizedReplayBuffer (``rate_limit=``): admission of adds, writer
flushes and samples, timeouts and refusals that spend nothing, close and Ctrl-C while
blocked, checkpoints and pickles that keep the counts, and threads that hold the ratio."""

import _thread
import pickle
import threading
import time
from pathlib import Path

import kary_replay as kr
import numpy as np
import pytest
from kary_replay.errors import (
    ClosedError,
    InvalidArgumentError,
    InvalidPriorityError,
    RateLimitedError,
    RateLimitTimeoutError,
    SchemaError,
)

SCHEMA = {"obs": ("float32", (2,))}
VARIANTS: list[kr.Variant] = ["split", "lockfree", "global"]


def rows(n: int) -> np.ndarray:
    return np.arange(2 * n, dtype=np.float32).reshape(n, 2)


def buffer(variant: kr.Variant = "split") -> kr.PrioritizedReplayBuffer:
    """2 samples per insert from 4 items on: ``2 * inserts - samples`` within [0, 16]."""
    return kr.PrioritizedReplayBuffer(
        64,
        SCHEMA,
        variant=variant,
        rate_limit=kr.SampleToInsertRatio(2.0, min_size=4, error_buffer=8.0),
        max_insert=4,
        max_sample=4,
    )


def counts(rb: kr.PrioritizedReplayBuffer) -> tuple[int, int]:
    stats = rb.rate_stats()
    assert stats is not None
    return stats["inserts"], stats["samples"]


def test_the_issue_example_builds_and_reports_its_limit() -> None:
    limit = kr.SampleToInsertRatio(8.0, min_size=1000, error_buffer=200)
    rb = kr.PrioritizedReplayBuffer(1 << 16, SCHEMA, rate_limit=limit)
    assert rb.rate_limit == limit
    assert "rate_limit=SampleToInsertRatio" in repr(rb)
    plain = kr.PrioritizedReplayBuffer(8, SCHEMA)
    assert plain.rate_limit is None and plain.rate_stats() is None
    plain.close()  # nothing to close: adds go on
    plain.add(obs=np.zeros(2, np.float32), timeout=0)


@pytest.mark.parametrize("variant", VARIANTS)
def test_admission_timeouts_and_refusals_spend_nothing(variant: kr.Variant) -> None:
    rb = buffer(variant)
    rng = kr.Rng(1)
    with pytest.raises(RateLimitedError) as refused:
        rb.sample(1, rng=rng, timeout=0)
    assert refused.value.retryable
    start = time.perf_counter()
    with pytest.raises(RateLimitTimeoutError) as timed_out:
        rb.sample(1, rng=rng, timeout=0.05)
    assert time.perf_counter() - start >= 0.05
    assert timed_out.value.retryable and isinstance(timed_out.value, TimeoutError)
    rb.add_batch(obs=rows(4))
    assert counts(rb) == (4, 0)

    # Bad input spends nothing.
    with pytest.raises(InvalidArgumentError):
        rb.sample(5, rng=rng)  # past max_sample
    with pytest.raises(InvalidArgumentError):
        rb.add_batch(obs=rows(5))  # past max_insert
    with pytest.raises(InvalidPriorityError):
        rb.add_batch(obs=rows(2), priorities=[1.0, float("nan")])
    with pytest.raises(SchemaError):
        rb.add_batch(obs=rows(2).astype(np.float64))
    with pytest.raises(InvalidArgumentError):
        rb.sample(1, rng=rng, timeout=-1.0)
    assert counts(rb) == (4, 0) and len(rb) == 4

    # 8 samples fit, then samples wait; 8 inserts fit, then inserts wait.
    rb.sample(4, rng=rng, timeout=0)
    out = {"obs": np.zeros((4, 2), np.float32)}
    rb.sample_into(out, 4, rng=rng)
    with pytest.raises(RateLimitedError):
        rb.sample(1, rng=rng, timeout=0)
    rb.add_batch(obs=rows(4), timeout=0)
    rb.add_batch(obs=rows(4))
    with pytest.raises(RateLimitedError):
        rb.add(obs=np.zeros(2, np.float32), timeout=0)
    with pytest.raises(RateLimitTimeoutError):
        rb.add(obs=np.zeros(2, np.float32), timeout=0.01)
    assert counts(rb) == (12, 8) and len(rb) == 12


def test_reserved_column_names_are_refused() -> None:
    for name in ("timeout", "priority", "keys", "weights"):
        with pytest.raises(SchemaError, match="is taken"):
            kr.PrioritizedReplayBuffer(8, {name: ("float32", ())})


def test_a_limit_that_could_deadlock_is_refused_with_what_would_work() -> None:
    with pytest.raises(InvalidArgumentError, match="deadlock"):
        kr.PrioritizedReplayBuffer(
            64, SCHEMA, rate_limit=kr.SampleToInsertRatio(8.0, min_size=100, error_buffer=50), max_sample=256
        )
    with pytest.raises(InvalidArgumentError, match="MinSize, SampleToInsertRatio or Queue"):
        kr.PrioritizedReplayBuffer(64, SCHEMA, rate_limit="fast")  # type: ignore[arg-type]


def test_a_writer_counts_at_its_flush_and_its_batch_must_fit() -> None:
    rb = buffer()
    with pytest.raises(InvalidArgumentError, match="Batches::insert"):
        rb.writer(5)
    writer = rb.writer()  # min(64, max_insert)
    for _ in range(3):
        writer.push(obs=np.zeros(2, np.float32))
    assert writer.staged == 3 and counts(rb) == (0, 0)
    assert len(writer.push(obs=np.zeros(2, np.float32))) == 4
    assert counts(rb) == (4, 0)
    rb.close()
    with rb.writer() as w:  # a writer left after close drops its items without waiting
        w.push(obs=np.zeros(2, np.float32))
    for _ in range(3):
        writer.push(obs=np.zeros(2, np.float32))  # staged: no flush yet
    with pytest.raises(ClosedError):
        writer.push(obs=np.zeros(2, np.float32))  # the flush is refused, the items kept
    assert writer.staged == 4 and len(rb) == 4


def test_a_blocked_writer_waits_for_the_learner_then_flushes() -> None:
    rb = buffer()
    rb.add_batch(obs=rows(4))
    rb.add_batch(obs=rows(4))  # difference 16: the top of the range
    writer = rb.writer(4)
    for _ in range(3):
        writer.push(obs=np.zeros(2, np.float32))
    # The flush of 4 needs the difference at 8: two samples of 4 from another thread.
    threading.Timer(0.1, lambda: rb.sample(4, rng=kr.Rng(2))).start()
    threading.Timer(0.15, lambda: rb.sample(4, rng=kr.Rng(3))).start()
    start = time.perf_counter()
    keys = writer.push(obs=np.ones(2, np.float32))
    assert len(keys) == 4 and time.perf_counter() - start >= 0.1
    assert counts(rb) == (12, 8) and writer.staged == 0


def test_close_from_another_thread_wakes_blocked_calls() -> None:
    rb = buffer()
    threading.Timer(0.2, rb.close).start()
    with pytest.raises(ClosedError):
        rb.sample(1, rng=kr.Rng(4))  # empty, before min_size: waits until closed
    with pytest.raises(ClosedError):
        rb.add(obs=np.zeros(2, np.float32))
    stats = rb.rate_stats()
    assert stats is not None and stats["closed"] and stats["sample_waiters"] == 0


@pytest.mark.usefixtures("python_sigint")
def test_ctrl_c_interrupts_a_blocked_sample_and_spends_nothing() -> None:
    rb = buffer()
    threading.Timer(0.2, _thread.interrupt_main).start()
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        rb.sample(1, rng=kr.Rng(5))
    assert time.perf_counter() - start < 5
    assert counts(rb) == (0, 0)


def test_a_sampler_waits_for_the_first_items_instead_of_failing_empty() -> None:
    rb = buffer("global")
    threading.Timer(0.1, lambda: rb.add_batch(obs=rows(4))).start()
    batch = rb.sample(4, rng=kr.Rng(6), timeout=10)
    assert len(batch["keys"]) == 4


@pytest.mark.parametrize("variant", VARIANTS)
def test_checkpoints_and_pickles_keep_the_limit_and_counts(variant: kr.Variant, tmp_path: Path) -> None:
    rb = buffer()
    rb.add_batch(obs=rows(4))
    rb.add_batch(obs=rows(4))
    for _ in range(3):
        rb.sample(4, rng=kr.Rng(7))
    assert counts(rb) == (8, 12)
    rb.save(tmp_path / "ckpt")
    for loaded in (kr.load(tmp_path / "ckpt", variant=variant), pickle.loads(pickle.dumps(rb))):
        assert loaded.rate_limit == rb.rate_limit
        assert counts(loaded) == (8, 12)
        loaded.sample(4, rng=kr.Rng(8), timeout=0)  # diff 4 -> 0
        with pytest.raises(RateLimitedError):
            loaded.sample(1, rng=kr.Rng(8), timeout=0)


def test_actor_and_learner_threads_hold_the_ratio() -> None:
    rb = kr.PrioritizedReplayBuffer(
        4096,
        SCHEMA,
        rate_limit=kr.SampleToInsertRatio(4.0, min_size=128, error_buffer=64),
        max_insert=8,
        max_sample=32,
    )
    stop = threading.Event()

    def actor() -> None:
        writer = rb.writer(8)
        try:
            while not stop.is_set():
                writer.push(obs=np.zeros(2, np.float32))
        except ClosedError:
            pass

    def learner(seed: int) -> None:
        rng = kr.Rng(seed)
        try:
            while True:
                batch = rb.sample(32, rng=rng)
                rb.update_priorities(batch["keys"], np.full(32, 1.5))
        except ClosedError:
            pass

    threads = [threading.Thread(target=actor) for _ in range(2)]
    threads += [threading.Thread(target=learner, args=(s,)) for s in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while counts(rb)[1] < 5000:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    stop.set()
    rb.close()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive()
    stats = rb.rate_stats()
    assert stats is not None
    assert stats["diff"] == 4.0 * stats["inserts"] - stats["samples"]
    assert 4.0 * 128 - 64 <= stats["diff"] <= 4.0 * 128 + 64
    assert rb.stats()["inserted"] == stats["inserts"]
