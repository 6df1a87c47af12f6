"""kary_replay.RateLimiter: admission, timeouts, close from another thread, Ctrl-C while
blocked, the errors, and threads holding the ratio."""

import _thread
import threading
import time

import kary_replay as kr
import pytest
from kary_replay.errors import (
    ClosedError,
    InvalidArgumentError,
    RateLimitedError,
    RateLimitTimeoutError,
)


def limiter(limit: kr.RateLimit | None = None, max_insert: int = 4, max_sample: int = 8) -> kr.RateLimiter:
    return kr.RateLimiter(limit or kr.MinSize(10), max_insert=max_insert, max_sample=max_sample)


def test_ratio_admits_as_reverb_does() -> None:
    rl = limiter(kr.SampleToInsertRatio(2.0, min_size=4, error_buffer=8.0))
    with pytest.raises(RateLimitedError) as e:
        rl.try_sample(1)  # before min_size
    assert e.value.retryable
    for _ in range(4):
        rl.try_insert(1)
    rl.try_sample(8)
    stats = rl.stats()
    assert (stats["inserts"], stats["samples"], stats["diff"], stats["open"]) == (4, 8, 0.0, True)
    with pytest.raises(RateLimitedError):
        rl.try_sample(1)  # diff would go below 8 - 8 = 0
    assert rl.samples_per_insert() == (2, 1)


def test_a_timed_out_sample_waits_and_spends_nothing() -> None:
    rl = limiter()
    start = time.perf_counter()
    with pytest.raises(RateLimitTimeoutError) as e:
        rl.sample(1, timeout=0.2)
    assert time.perf_counter() - start >= 0.2
    assert e.value.retryable and isinstance(e.value, TimeoutError)
    stats = rl.stats()
    assert (stats["samples"], stats["sample_waiters"]) == (0, 0)
    assert stats["blocked_s"] >= 0.2
    # timeout=0 does not wait: the refusal of try_sample.
    with pytest.raises(RateLimitedError):
        rl.sample(1, timeout=0)


def test_close_from_another_thread_wakes_the_waiter() -> None:
    rl = limiter()
    threading.Timer(0.2, rl.close).start()
    with pytest.raises(ClosedError):
        rl.sample(1)
    assert rl.closed
    with pytest.raises(ClosedError):
        rl.try_insert(1)


@pytest.mark.usefixtures("python_sigint")
def test_ctrl_c_interrupts_a_blocked_call_and_spends_nothing() -> None:
    rl = limiter()
    threading.Timer(0.2, _thread.interrupt_main).start()
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        rl.sample(1)
    assert time.perf_counter() - start < 5
    stats = rl.stats()
    assert (stats["samples"], stats["sample_waiters"]) == (0, 0)


def test_a_blocked_sampler_is_woken_by_an_insert_in_another_thread() -> None:
    rl = limiter(kr.Queue(4), max_insert=1, max_sample=1)
    threading.Timer(0.1, lambda: rl.insert(1)).start()
    rl.sample(1, timeout=10)
    assert rl.stats()["samples"] == 1


def test_bad_configurations_and_calls_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="too narrow"):
        limiter(kr.SampleToInsertRatio(4.0, min_size=100, error_buffer=10.0), max_insert=16, max_sample=256)
    with pytest.raises(InvalidArgumentError):
        limiter(kr.MinSize(0))
    with pytest.raises(InvalidArgumentError):
        limiter(kr.SampleToInsertRatio(float("nan"), min_size=1, error_buffer=1.0))
    with pytest.raises(InvalidArgumentError):
        limiter(kr.SampleToInsertRatio(1.0, min_size=1, error_buffer="wide"))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        kr.RateLimiter("queue", max_insert=1, max_sample=1)  # type: ignore[arg-type]
    rl = limiter()
    with pytest.raises(InvalidArgumentError, match="Batches"):
        rl.insert(5)
    with pytest.raises(InvalidArgumentError):
        rl.sample(1, timeout=-1)
    with pytest.raises(OverflowError):
        rl.insert(-1)


def test_threads_hold_the_ratio_exactly() -> None:
    rl = limiter(kr.SampleToInsertRatio(2.0, min_size=16, error_buffer=(8.0, 64.0)), max_insert=4, max_sample=8)
    counts = {"inserted": 0, "sampled": 0}
    lock = threading.Lock()

    def run(inserting: bool) -> None:
        for i in range(2000):
            n = 1 + i % (4 if inserting else 8)
            try:
                rl.insert(n) if inserting else rl.sample(n)
            except ClosedError:
                return
            with lock:
                counts["inserted" if inserting else "sampled"] += n

    threads = [threading.Thread(target=run, args=(k < 2,)) for k in range(4)]
    for t in threads:
        t.start()
    # One side finishing first leaves the other waiting: close releases it.
    while all(t.is_alive() for t in threads[:2]) and all(t.is_alive() for t in threads[2:]):
        time.sleep(0.01)
    rl.close()
    for t in threads:
        t.join()
    stats = rl.stats()
    assert (stats["inserts"], stats["samples"]) == (counts["inserted"], counts["sampled"])
    assert 8.0 <= stats["diff"] <= 64.0
    assert stats["diff"] == 2.0 * counts["inserted"] - counts["sampled"]
